"""The region reader on files written byte by byte from HAMi-core's offsets."""

import mmap
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from pyhami.monitor.layout import LayoutVersion
from pyhami.monitor.region import Region, RegionError, RejectReason

from .regionfile import SPEC_V0, SPEC_V1, Mem, Proc, RegionSpec, read_i32, uuid_of, write_region

MIB = 1024 * 1024


def _two_process_spec(version: int) -> RegionSpec:
    return RegionSpec(
        version=version,
        uuids=(uuid_of(0), uuid_of(1)),
        limits=(4096 * MIB, 2048 * MIB),
        sm_limits=(30, 50),
        procs=(
            Proc(pid=10, hostpid=1010, used={0: Mem(100, 20, 300, 420 * MIB)}, sm_util={0: 12}),
            Proc(
                pid=11,
                hostpid=1011,
                used={0: Mem(5, 6, 7, 18 * MIB), 1: Mem(1, 2, 3, 6 * MIB)},
                sm_util={0: 3, 1: 40},
            ),
            Proc(pid=12, status=0, used={0: Mem(999, 999, 999, 999 * MIB)}, sm_util={0: 99}),
        ),
        priority=0,
        recent_kernel=2,
        utilization_switch=1,
        last_kernel_time=1_700_000_000,
    )


@pytest.mark.parametrize("version", [0, 1], ids=["v0", "v1"])
def test_sums_live_slots_per_device(tmp_path: Path, version: int) -> None:
    path = write_region(tmp_path / "a.cache", _two_process_spec(version))
    region = Region.open(path)
    try:
        snap = region.snapshot()
    finally:
        region.close()
    assert snap.version is LayoutVersion(version)
    first, second = snap.devices
    assert (first.index, first.uuid, first.limit, first.sm_limit) == (0, uuid_of(0), 4096 * MIB, 30)
    assert (first.used, first.context, first.module, first.buffer, first.sm_util) == (
        438 * MIB,
        105,
        26,
        307,
        15,
    ), "the exited slot (status 0) must not count"
    assert (second.index, second.used, second.context, second.sm_util) == (1, 6 * MIB, 1, 40)
    assert [p.pid for p in snap.processes] == [10, 11]
    assert (snap.priority, snap.recent_kernel, snap.utilization_switch) == (0, 2, 1)
    assert snap.last_kernel_time == (1_700_000_000 if version == 1 else 0)


@pytest.mark.parametrize("version, table", [(0, SPEC_V0), (1, SPEC_V1)], ids=["v0", "v1"])
def test_writes_land_on_the_spec_offsets_only(
    tmp_path: Path, version: int, table: dict[str, int]
) -> None:
    path = write_region(tmp_path / "a.cache", _two_process_spec(version))
    before = path.read_bytes()
    region = Region.open(path)
    region.write_recent_kernel(-1)
    region.write_utilization_switch(0)
    region.close()
    after = path.read_bytes()
    assert read_i32(path, table["recent_kernel"]) == -1
    assert read_i32(path, table["utilization_switch"]) == 0
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed and all(
        table["utilization_switch"] <= i < table["recent_kernel"] + 4 for i in changed
    ), "nothing but the two writable int32 fields may change"


def test_writes_and_libvgpus_mapping_see_each_other_at_once(tmp_path: Path) -> None:
    """libvgpu maps the file MAP_SHARED; the monitor's pwrite lands in the same page cache, so
    the library sees it without any flush, and the monitor reads the library's stores back."""
    path = write_region(tmp_path / "a.cache", _two_process_spec(1))
    region = Region.open(path)
    with path.open("r+b") as file, mmap.mmap(file.fileno(), 0) as libvgpu:
        region.write_recent_kernel(-1)
        region.write_utilization_switch(0)
        assert struct.unpack_from("<i", libvgpu, SPEC_V1["recent_kernel"])[0] == -1
        assert struct.unpack_from("<i", libvgpu, SPEC_V1["utilization_switch"])[0] == 0
        struct.pack_into("<ii", libvgpu, SPEC_V1["recent_kernel"], 2, 7)
        fields = region.feedback()
        assert (fields.recent_kernel, fields.priority, fields.utilization_switch) == (2, 7, 0)
        assert region.snapshot().recent_kernel == 2
    region.close()


def test_uuid_label_is_the_first_40_bytes_and_bad_uuids_are_skipped(tmp_path: Path) -> None:
    long_uuid = uuid_of(0) + "-EXTRA-TAIL"
    spec = RegionSpec(uuids=(long_uuid, b"", b"\xff\xfe-not-utf8", "MIG-short"))
    region = Region.open(write_region(tmp_path / "a.cache", spec))
    snap = region.snapshot()
    region.close()
    assert [(d.index, d.uuid) for d in snap.devices] == [(0, long_uuid[:40]), (3, "MIG-short")]


def test_negative_counters_count_as_zero(tmp_path: Path) -> None:
    spec = RegionSpec(
        uuids=(uuid_of(0),),
        procs=(Proc(pid=1, used={0: Mem(total=-5)}), Proc(pid=2, used={0: Mem(total=7)})),
    )
    region = Region.open(write_region(tmp_path / "a.cache", spec))
    snap = region.snapshot()
    region.close()
    assert snap.devices[0].used == 7
    assert snap.processes[0].totals[0] == -5


def test_device_keys_are_full_96_byte_uuids_of_all_16_slots(tmp_path: Path) -> None:
    spec = RegionSpec(uuids=(uuid_of(0), b"", uuid_of(2)), num=1)
    region = Region.open(write_region(tmp_path / "a.cache", spec))
    keys = region.feedback().device_keys
    region.close()
    assert [len(k) for k in keys] == [96, 96]
    assert [k.rstrip(b"\x00").decode() for k in keys] == [uuid_of(0), uuid_of(2)]


@pytest.mark.parametrize(
    "spec, reason",
    [
        pytest.param(RegionSpec(size=8), RejectReason.TOO_SMALL, id="shorter-than-header"),
        pytest.param(RegionSpec(size=SPEC_V0["size"] - 1), RejectReason.TOO_SMALL, id="below-v0"),
        pytest.param(RegionSpec(magic=12345), RejectReason.BAD_MAGIC, id="bad-magic"),
        pytest.param(RegionSpec(major=2), RejectReason.BAD_VERSION, id="major-2"),
        pytest.param(RegionSpec(major=0), RejectReason.BAD_VERSION, id="v1-size-major-0"),
    ],
)
def test_bad_files_are_refused_at_open(
    tmp_path: Path, spec: RegionSpec, reason: RejectReason
) -> None:
    path = write_region(tmp_path / "bad.cache", spec)
    with pytest.raises(RegionError) as caught:
        Region.open(path)
    assert caught.value.reason is reason
    assert str(path) in str(caught.value)


def test_v0_sized_file_is_v0_whatever_its_header_says(tmp_path: Path) -> None:
    spec = RegionSpec(version=0, uuids=(uuid_of(0),), size=SPEC_V0["size"] + 100)
    region = Region.open(write_region(tmp_path / "a.cache", spec))
    assert region.layout.version is LayoutVersion.V0
    region.close()


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(RegionSpec(num=17), id="device-num-17"),
        pytest.param(RegionSpec(proc_num=1025), id="proc-num-1025"),
        pytest.param(RegionSpec(proc_num=-1), id="proc-num-negative"),
    ],
)
def test_counts_out_of_range_are_refused(tmp_path: Path, spec: RegionSpec) -> None:
    region = Region.open(write_region(tmp_path / "a.cache", spec))
    with pytest.raises(RegionError) as caught:
        region.snapshot()
    region.close()
    assert caught.value.reason is RejectReason.COUNT_OUT_OF_RANGE


def test_a_file_truncated_after_open_is_refused_not_a_sigbus(tmp_path: Path) -> None:
    path = write_region(tmp_path / "a.cache", _two_process_spec(1))
    region = Region.open(path)
    os.truncate(path, 4096)
    for action in (region.snapshot, region.feedback, lambda: region.write_recent_kernel(0)):
        with pytest.raises(RegionError) as caught:
            action()
        assert caught.value.reason is RejectReason.SHRUNK
    region.close()
    assert os.path.getsize(path) == 4096, "a refused write does not grow the file back"


def test_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(RegionError) as caught:
        Region.open(tmp_path / "missing.cache")
    assert caught.value.reason is RejectReason.UNREADABLE


def _symlink_to_a_region(path: Path) -> None:
    path.symlink_to(write_region(path.parent / "elsewhere" / "real.cache", RegionSpec()))


def _symlink_to_a_device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _character_device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is


@pytest.mark.parametrize(
    "make, kind",
    [
        pytest.param(_symlink_to_a_region, "a symbolic link", id="symlink-to-a-region"),
        pytest.param(_symlink_to_a_device, "a symbolic link", id="symlink-to-a-device"),
        pytest.param(os.mkfifo, "a FIFO", id="fifo"),
        pytest.param(_character_device, "a character device", id="device"),
        pytest.param(os.mkdir, "a directory", id="directory"),
    ],
)
def test_anything_but_a_regular_file_is_refused_unopened(
    tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    """The container owns the name: a link is not followed (its target may be another
    container's region), a FIFO or device node is never opened, let alone read or written."""
    path = tmp_path / "a.cache"
    make(path)
    with pytest.raises(RegionError) as caught:
        Region.open(path)
    assert caught.value.reason is RejectReason.NOT_REGULAR
    assert f"is {kind}, not a regular file" in str(caught.value)
