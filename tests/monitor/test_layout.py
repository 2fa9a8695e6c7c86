"""The code's one offset table agrees with the numbers printed in the specs."""

import pytest

from pyhami.monitor.layout import MAGIC, V0, V1, RegionLayout

from .regionfile import MAGIC as SPEC_MAGIC
from .regionfile import SPEC_MEMORY, SPEC_UTIL, SPEC_V0, SPEC_V1


def _flatten(layout: RegionLayout) -> dict[str, int | None]:
    slot = layout.slot
    return {
        "size": layout.size,
        "major_version": layout.major_version,
        "device_num": layout.device_num,
        "uuids": layout.uuids,
        "limit": layout.limit,
        "sm_limit": layout.sm_limit,
        "procs": layout.procs,
        "slot_size": slot.size,
        "slot_pid": slot.pid,
        "slot_hostpid": slot.hostpid,
        "slot_used": slot.used,
        "used_stride": slot.used_stride,
        "slot_monitorused": slot.monitorused,
        "slot_device_util": slot.device_util,
        "device_util_stride": slot.device_util_stride,
        "slot_status": slot.status,
        "proc_num": layout.proc_num,
        "utilization_switch": layout.utilization_switch,
        "recent_kernel": layout.recent_kernel,
        "priority": layout.priority,
        "last_kernel_time": layout.last_kernel_time,
    }


@pytest.mark.parametrize(
    "layout, spec",
    [pytest.param(V1, SPEC_V1, id="v1"), pytest.param(V0, SPEC_V0, id="v0")],
)
def test_every_offset_matches_the_spec(layout: RegionLayout, spec: dict[str, int]) -> None:
    ours = _flatten(layout)
    for name, want in spec.items():
        if name == "minor_version":
            continue
        assert ours[name] == want, f"{layout.version.name} {name}: {ours[name]} != spec {want}"
    if layout is V0:
        assert ours["major_version"] is None and ours["last_kernel_time"] is None


@pytest.mark.parametrize("layout", [V0, V1], ids=["v0", "v1"])
def test_inner_struct_offsets_match_the_spec(layout: RegionLayout) -> None:
    slot = layout.slot
    assert {
        "context_size": slot.context_size,
        "module_size": slot.module_size,
        "data_size": slot.data_size,
        "offset": slot.offset,
        "total": slot.total,
    } == SPEC_MEMORY
    assert slot.sm_util == SPEC_UTIL["sm_util"]


@pytest.mark.parametrize("layout", [V0, V1], ids=["v0", "v1"])
def test_the_layout_adds_up(layout: RegionLayout) -> None:
    """Slots tile the process table exactly up to proc_num; the tail fits in `size`."""
    assert layout.procs + 1024 * layout.slot.size == layout.proc_num
    assert layout.slot.used + 16 * layout.slot.used_stride <= layout.slot.monitorused
    assert layout.slot.device_util + 16 * layout.slot.device_util_stride <= layout.slot.status
    assert layout.uuids + 16 * 96 == layout.limit
    assert layout.limit + 16 * 8 == layout.sm_limit
    assert layout.sm_limit + 16 * 8 == layout.procs
    tail = layout.last_kernel_time if layout.last_kernel_time is not None else layout.priority
    assert tail < layout.size
    assert layout.slot_offset(2) == layout.procs + 2 * layout.slot.size


def test_magic() -> None:
    assert MAGIC == SPEC_MAGIC == 19920718
