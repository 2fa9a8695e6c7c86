"""Byte layouts of the HAMi-core shared region, v0 and v1 (libvgpu writes v1).

Every offset the monitor reads or writes is pinned here, once; `tests/monitor/test_layout.py`
checks each one against the numbers printed in the spec. Little-endian, x86-64 C ABI.
"""

import enum
from dataclasses import dataclass

MAGIC = 19920718
MAX_DEVICES = 16  # CUDA_DEVICE_MAX_COUNT
MAX_PROCS = 1024  # SHARED_REGION_MAX_PROCESS_NUM
UUID_BYTES = 96
UUID_LABEL_BYTES = 40  # the exported device_uuid label is the first 40 bytes of the slot UUID


class LayoutVersion(enum.IntEnum):
    V0 = 0
    V1 = 1


@dataclass(frozen=True, slots=True)
class SlotLayout:
    """One process slot (`shrreg_proc_slot_t`); offsets relative to the slot start."""

    size: int
    used_stride: int
    monitorused: int
    device_util: int  # device_util[16]
    device_util_stride: int
    status: int
    pid: int = 0
    hostpid: int = 4
    used: int = 8  # used[16], one device_memory_t per device
    # Inside one device_memory_t.
    context_size: int = 0
    module_size: int = 8
    data_size: int = 16  # HAMi's Go side calls it bufferSize
    offset: int = 24
    total: int = 32
    # Inside one device_util_t.
    sm_util: int = 16


@dataclass(frozen=True, slots=True)
class RegionLayout:
    """The whole region (`shared_region_t`)."""

    version: LayoutVersion
    size: int
    major_version: int | None  # v0 has no version fields
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    slot: SlotLayout
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None  # v0 has none (treated as 0)

    def slot_offset(self, index: int) -> int:
        return self.procs + index * self.slot.size


V1 = RegionLayout(
    version=LayoutVersion.V1,
    size=2_008_952,
    major_version=4,
    device_num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    slot=SlotLayout(
        size=1960,
        used_stride=64,
        monitorused=1032,
        device_util=1160,
        device_util_stride=48,
        status=1928,
    ),
    proc_num=2_008_896,
    utilization_switch=2_008_900,
    recent_kernel=2_008_904,
    priority=2_008_908,
    last_kernel_time=2_008_912,
)

V0 = RegionLayout(
    version=LayoutVersion.V0,
    size=1_197_896,
    major_version=None,
    device_num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    slot=SlotLayout(
        size=1168,
        used_stride=40,
        monitorused=648,
        device_util=776,
        device_util_stride=24,
        status=1160,
    ),
    proc_num=1_197_880,
    utilization_switch=1_197_884,
    recent_kernel=1_197_888,
    priority=1_197_892,
    last_kernel_time=None,
)

HEADER_BYTES = 12  # magic + major + minor: the least a file must hold to be judged at all
