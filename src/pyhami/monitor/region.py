"""One HAMi-core shared-region file, mapped with real `mmap` (ops.md §1.2, hami-core.md §4).

The monitor keeps each file mapped read-write and shared for the container's lifetime: it
reads usage from it and writes exactly two fields back, `recentKernel` and `utilizationSwitch`,
with aligned 32-bit stores (atomic on x86-64, as libvgpu expects). Everything else is read-only.

A file that cannot be used raises `RegionError` with a `RejectReason` and a sentence naming the
file and the bad value; the caller logs it and tries again later, it never crashes the monitor.
"""

import ctypes
import enum
import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyhami.monitor.layout import (
    HEADER_BYTES,
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    UUID_BYTES,
    UUID_LABEL_BYTES,
    V0,
    V1,
    LayoutVersion,
    RegionLayout,
)

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")


class RejectReason(enum.StrEnum):
    UNREADABLE = "unreadable"  # cannot open, stat or map
    TOO_SMALL = "too_small"  # shorter than any known layout
    BAD_MAGIC = "bad_magic"  # initializedFlag is not 19920718
    BAD_VERSION = "bad_version"  # v1-sized but majorVersion is not 1
    COUNT_OUT_OF_RANGE = "count_out_of_range"  # device_num > 16 or proc_num outside 0..1024
    SHRUNK = "shrunk"  # the file was truncated while mapped (reading on would SIGBUS)


class RegionError(Exception):
    """A region file the monitor will not use (this time); `reason` is for machines."""

    def __init__(self, path: Path, reason: RejectReason, detail: str) -> None:
        super().__init__(f"shared region {path}: {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """One device slot of a region with its usage summed over live process slots."""

    index: int  # vdevice_index: the slot 0..num-1 in the region
    uuid: str  # the first 40 bytes of the slot UUID (the exported label)
    limit: int  # bytes; 0 = unlimited
    sm_limit: int  # percent
    used: int  # Σ used[i].total
    context: int
    module: int
    buffer: int
    sm_util: int  # Σ deviceUtil[i].smUtil


@dataclass(frozen=True, slots=True)
class ProcessSlot:
    """A live process slot (status != 0) as far as the sanity checks need it."""

    slot: int
    pid: int
    hostpid: int
    status: int
    # Per device index 0..15, signed so that an underflowed counter shows as negative.
    totals: tuple[int, ...]
    contexts: tuple[int, ...]
    modules: tuple[int, ...]
    buffers: tuple[int, ...]
    sm_utils: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RegionSnapshot:
    version: LayoutVersion
    devices: tuple[VirtualDevice, ...]
    processes: tuple[ProcessSlot, ...]
    skipped_devices: tuple[int, ...]  # slots < num whose UUID is empty or not UTF-8
    priority: int
    recent_kernel: int
    utilization_switch: int
    last_kernel_time: int  # Unix seconds; 0 when unknown (always for v0)


def choose_layout(path: Path, size: int, major_version: int) -> RegionLayout:
    """HAMi's rule (hami-core.md §4.4): by size first, v0 whatever the header says."""
    if V0.size <= size < V1.size:
        return V0
    if size >= V1.size:
        if major_version == 1:
            return V1
        raise RegionError(
            path,
            RejectReason.BAD_VERSION,
            f"majorVersion is {major_version}, only 1 is known for a {size}-byte file",
        )
    raise RegionError(
        path,
        RejectReason.TOO_SMALL,
        f"{size} bytes is smaller than the v0 layout ({V0.size} bytes)",
    )


class Region:
    """A mapped region file. Not thread-safe; the monitor serialises access under one lock."""

    def __init__(self, path: Path, fd: int, mapped: mmap.mmap, layout: RegionLayout) -> None:
        self.path = path
        self.layout = layout
        self._fd = fd
        self._map = mapped
        self._recent_kernel = ctypes.c_int32.from_buffer(mapped, layout.recent_kernel)
        self._utilization_switch = ctypes.c_int32.from_buffer(mapped, layout.utilization_switch)
        stat = os.fstat(fd)
        self.identity = (stat.st_dev, stat.st_ino)
        used_stride, util_stride = layout.slot.used_stride // 8, layout.slot.device_util_stride // 8
        self._used = struct.Struct(f"<{MAX_DEVICES * used_stride}q")
        self._utils = struct.Struct(f"<{MAX_DEVICES * util_stride}q")
        self._used_stride, self._util_stride = used_stride, util_stride
        self._limits = struct.Struct(f"<{MAX_DEVICES}Q")

    @classmethod
    def open(cls, path: Path) -> "Region":
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as err:
            raise RegionError(path, RejectReason.UNREADABLE, f"cannot open: {err}") from err
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_BYTES:
                raise RegionError(
                    path, RejectReason.TOO_SMALL, f"{size} bytes cannot hold the 12-byte header"
                )
            magic, major = _I32.unpack(os.pread(fd, 4, 0))[0], _U32.unpack(os.pread(fd, 4, 4))[0]
            if magic != MAGIC:
                raise RegionError(
                    path, RejectReason.BAD_MAGIC, f"initializedFlag is {magic}, want {MAGIC}"
                )
            layout = choose_layout(path, size, major)
            mapped = mmap.mmap(fd, layout.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except RegionError:
            os.close(fd)
            raise
        except (OSError, ValueError) as err:
            os.close(fd)
            raise RegionError(path, RejectReason.UNREADABLE, f"cannot map: {err}") from err
        return cls(path, fd, mapped, layout)

    # ----- the two fields the monitor writes (and reads back) -----

    @property
    def recent_kernel(self) -> int:
        return int(self._recent_kernel.value)

    def write_recent_kernel(self, value: int) -> None:
        self._recent_kernel.value = value

    @property
    def utilization_switch(self) -> int:
        return int(self._utilization_switch.value)

    def write_utilization_switch(self, value: int) -> None:
        self._utilization_switch.value = value

    # ----- reads -----

    @property
    def priority(self) -> int:
        return int(_I32.unpack_from(self._map, self.layout.priority)[0])

    def device_keys(self) -> tuple[bytes, ...]:
        """The full 96-byte UUID of every slot 0..15 that holds one (the feedback loop's key)."""
        keys = []
        for index in range(MAX_DEVICES):
            start = self.layout.uuids + index * UUID_BYTES
            if self._map[start] != 0:
                keys.append(self._map[start : start + UUID_BYTES])
        return tuple(keys)

    def still_whole(self) -> None:
        """Raise if the file shrank below the mapped layout: touching those pages would SIGBUS."""
        try:
            size = os.fstat(self._fd).st_size
        except OSError as err:
            raise RegionError(self.path, RejectReason.UNREADABLE, f"cannot stat: {err}") from err
        if size < self.layout.size:
            raise RegionError(
                self.path,
                RejectReason.SHRUNK,
                f"truncated to {size} bytes while mapped ({self.layout.size} needed)",
            )

    def snapshot(self) -> RegionSnapshot:
        self.still_whole()
        layout, data = self.layout, self._map
        num = _U64.unpack_from(data, layout.device_num)[0]
        proc_num = _I32.unpack_from(data, layout.proc_num)[0]
        if num > MAX_DEVICES or not 0 <= proc_num <= MAX_PROCS:
            raise RegionError(
                self.path,
                RejectReason.COUNT_OUT_OF_RANGE,
                f"device_num {num} (at most {MAX_DEVICES}) / proc_num {proc_num} (0..{MAX_PROCS})",
            )
        processes = tuple(
            slot for slot in (self._slot(index) for index in range(proc_num)) if slot is not None
        )
        limits = self._limits.unpack_from(data, layout.limit)
        sm_limits = self._limits.unpack_from(data, layout.sm_limit)
        devices, skipped = [], []
        for index in range(num):
            uuid = self._uuid_label(index)
            if uuid is None:
                skipped.append(index)
                continue
            devices.append(self._device(index, uuid, limits[index], sm_limits[index], processes))
        last_kernel = (
            0
            if layout.last_kernel_time is None
            else _I64.unpack_from(data, layout.last_kernel_time)[0]
        )
        return RegionSnapshot(
            version=layout.version,
            devices=tuple(devices),
            processes=processes,
            skipped_devices=tuple(skipped),
            priority=self.priority,
            recent_kernel=self.recent_kernel,
            utilization_switch=self.utilization_switch,
            last_kernel_time=last_kernel,
        )

    def _uuid_label(self, index: int) -> str | None:
        start = self.layout.uuids + index * UUID_BYTES
        raw = self._map[start : start + UUID_LABEL_BYTES]
        if raw[:1] == b"\x00":
            return None
        try:
            # HAMi keeps the 40 bytes as they are; we cut at the first NUL so that a short
            # UUID does not put NUL characters into a Prometheus label.
            return raw.split(b"\x00", 1)[0].decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _slot(self, index: int) -> ProcessSlot | None:
        slot, base = self.layout.slot, self.layout.slot_offset(index)
        status = _I32.unpack_from(self._map, base + slot.status)[0]
        if status == 0:
            return None
        used = self._used.unpack_from(self._map, base + slot.used)
        utils = self._utils.unpack_from(self._map, base + slot.device_util)
        return ProcessSlot(
            slot=index,
            pid=_I32.unpack_from(self._map, base + slot.pid)[0],
            hostpid=_I32.unpack_from(self._map, base + slot.hostpid)[0],
            status=status,
            totals=used[slot.total // 8 :: self._used_stride],
            contexts=used[slot.context_size // 8 :: self._used_stride],
            modules=used[slot.module_size // 8 :: self._used_stride],
            buffers=used[slot.data_size // 8 :: self._used_stride],
            sm_utils=utils[slot.sm_util // 8 :: self._util_stride],
        )

    @staticmethod
    def _device(
        index: int,
        uuid: str,
        limit: int,
        sm_limit: int,
        processes: tuple[ProcessSlot, ...],
    ) -> VirtualDevice:
        def total(per_process: Callable[[ProcessSlot], tuple[int, ...]]) -> int:
            # Negative counters are reported by the sanity checks and count as 0 here.
            return sum(max(0, per_process(p)[index]) for p in processes)

        return VirtualDevice(
            index=index,
            uuid=uuid,
            limit=limit,
            sm_limit=sm_limit,
            used=total(lambda p: p.totals),
            context=total(lambda p: p.contexts),
            module=total(lambda p: p.modules),
            buffer=total(lambda p: p.buffers),
            sm_util=total(lambda p: p.sm_utils),
        )

    def close(self) -> None:
        # The ctypes views export the buffer; drop them before unmapping.
        del self._recent_kernel, self._utilization_switch
        self._map.close()
        os.close(self._fd)
