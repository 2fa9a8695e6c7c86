"""Writes HAMi-core shared-region files byte by byte from the offsets printed in the specs.

The numbers below are typed in from HAMi-core's v1.2 and v0 region layouts, independently of
`pyhami.monitor.layout`; `test_layout.py` checks that the two tables agree, and the reader tests
read files made here, so a wrong offset in either place fails a test.
"""

import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = 19920718

SPEC_V1 = {
    "size": 2_008_952,
    "major_version": 4,
    "minor_version": 8,
    "device_num": 56,
    "uuids": 64,
    "limit": 1600,
    "sm_limit": 1728,
    "procs": 1856,
    "slot_size": 1960,
    "slot_pid": 0,
    "slot_hostpid": 4,
    "slot_used": 8,
    "used_stride": 64,
    "slot_monitorused": 1032,
    "slot_device_util": 1160,
    "device_util_stride": 48,
    "slot_status": 1928,
    "proc_num": 2_008_896,
    "utilization_switch": 2_008_900,
    "recent_kernel": 2_008_904,
    "priority": 2_008_908,
    "last_kernel_time": 2_008_912,
}

SPEC_V0 = {
    "size": 1_197_896,
    "device_num": 48,
    "uuids": 56,
    "limit": 1592,
    "sm_limit": 1720,
    "procs": 1848,
    "slot_size": 1168,
    "slot_pid": 0,
    "slot_hostpid": 4,
    "slot_used": 8,
    "used_stride": 40,
    "slot_monitorused": 648,
    "slot_device_util": 776,
    "device_util_stride": 24,
    "slot_status": 1160,
    "proc_num": 1_197_880,
    "utilization_switch": 1_197_884,
    "recent_kernel": 1_197_888,
    "priority": 1_197_892,
}

# Inside one device_memory_t / device_util_t.
SPEC_MEMORY = {"context_size": 0, "module_size": 8, "data_size": 16, "offset": 24, "total": 32}
SPEC_UTIL = {"sm_util": 16}


@dataclass(frozen=True)
class Mem:
    context: int = 0
    module: int = 0
    buffer: int = 0
    total: int = 0


@dataclass(frozen=True)
class Proc:
    pid: int
    hostpid: int = 0
    status: int = 1
    used: dict[int, Mem] = field(default_factory=dict)
    sm_util: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RegionSpec:
    """What to write; `None` counts are derived from the lists."""

    version: int = 1
    uuids: tuple[str | bytes, ...] = ()
    limits: tuple[int, ...] = ()
    sm_limits: tuple[int, ...] = ()
    procs: tuple[Proc, ...] = ()
    priority: int = 1
    recent_kernel: int = 2
    utilization_switch: int = 1
    last_kernel_time: int = 0
    num: int | None = None
    proc_num: int | None = None
    magic: int = MAGIC
    major: int = 1
    minor: int = 2
    size: int | None = None  # default: sizeof + 1, as HAMi-core creates it


def region_bytes(spec: RegionSpec) -> bytes:
    table = SPEC_V1 if spec.version == 1 else SPEC_V0
    size = spec.size if spec.size is not None else table["size"] + 1
    buf = bytearray(max(size, table["size"]))
    struct.pack_into("<i", buf, 0, spec.magic)
    if spec.version == 1:
        struct.pack_into("<II", buf, table["major_version"], spec.major, spec.minor)
        struct.pack_into("<q", buf, table["last_kernel_time"], spec.last_kernel_time)
    num = len(spec.uuids) if spec.num is None else spec.num
    struct.pack_into("<Q", buf, table["device_num"], num)
    for index, uuid in enumerate(spec.uuids):
        raw = uuid.encode() if isinstance(uuid, str) else uuid
        buf[table["uuids"] + index * 96 : table["uuids"] + index * 96 + len(raw)] = raw
    for index, limit in enumerate(spec.limits):
        struct.pack_into("<Q", buf, table["limit"] + index * 8, limit)
    for index, sm_limit in enumerate(spec.sm_limits):
        struct.pack_into("<Q", buf, table["sm_limit"] + index * 8, sm_limit)
    for index, proc in enumerate(spec.procs):
        base = table["procs"] + index * table["slot_size"]
        struct.pack_into("<ii", buf, base + table["slot_pid"], proc.pid, proc.hostpid)
        struct.pack_into("<i", buf, base + table["slot_status"], proc.status)
        for dev, mem in proc.used.items():
            at = base + table["slot_used"] + dev * table["used_stride"]
            for name, value in (
                ("context_size", mem.context),
                ("module_size", mem.module),
                ("data_size", mem.buffer),
                ("total", mem.total),
            ):
                struct.pack_into("<q", buf, at + SPEC_MEMORY[name], value)
        for dev, util in proc.sm_util.items():
            at = base + table["slot_device_util"] + dev * table["device_util_stride"]
            struct.pack_into("<q", buf, at + SPEC_UTIL["sm_util"], util)
    proc_num = len(spec.procs) if spec.proc_num is None else spec.proc_num
    struct.pack_into("<i", buf, table["proc_num"], proc_num)
    struct.pack_into("<i", buf, table["utilization_switch"], spec.utilization_switch)
    struct.pack_into("<i", buf, table["recent_kernel"], spec.recent_kernel)
    struct.pack_into("<i", buf, table["priority"], spec.priority)
    return bytes(buf[:size])


def write_region(path: Path, spec: RegionSpec) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(region_bytes(spec))
    return path


def read_i32(path: Path, offset: int) -> int:
    with path.open("rb") as handle:
        handle.seek(offset)
        return int(struct.unpack("<i", handle.read(4))[0])


def uuid_of(index: int) -> str:
    """A 40-character NVIDIA-style UUID, like NVML's."""
    return f"GPU-{index:08x}-1111-2222-3333-{index:012x}"
