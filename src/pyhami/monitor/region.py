"""One HAMi-core shared-region file (layout in monitor/layout.py), read and written by offset.

The file lives in a directory the container writes, so everything in it, its size included, is
the container's to change at any moment. The monitor therefore never touches it through a
mapping: a file shrunk under a mapping faults the reader (SIGBUS) on the next access, which
no check beforehand can rule out. Reads copy bytes out with `pread` (a shrunk file is a short
read, refused); the two fields the monitor writes back, `recentKernel` and `utilizationSwitch`,
go in with `pwrite` at their fixed offsets, into the same page cache libvgpu's `MAP_SHARED`
mapping sees, at once. The file is opened without following a link, and only when it is a
regular file (a device node is never even opened).

A file that cannot be used raises `RegionError` with a `RejectReason` and a sentence naming the
file and the bad value; the caller logs it and tries again later, it never crashes the monitor.
"""

import enum
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

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
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")

log = structlog.get_logger(__name__)


class RejectReason(enum.StrEnum):
    UNREADABLE = "unreadable"  # cannot open, stat or read
    NOT_REGULAR = "not_regular"  # a symlink, directory, FIFO, socket or device node
    TOO_SMALL = "too_small"  # shorter than any known layout
    BAD_MAGIC = "bad_magic"  # initializedFlag is not 19920718
    BAD_VERSION = "bad_version"  # v1-sized but majorVersion is not 1
    COUNT_OUT_OF_RANGE = "count_out_of_range"  # device_num > 16 or proc_num outside 0..1024
    SHRUNK = "shrunk"  # the file became shorter than its layout after it was opened


class RegionError(Exception):
    """A region file the monitor will not use (this time); `reason` is for machines."""

    def __init__(self, path: Path, reason: RejectReason, detail: str) -> None:
        super().__init__(f"shared region {path}: {detail}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """One device slot of a region with its usage summed over live process slots."""

    index: int  # vdevice_index: the slot 0..num-1 in the region
    uuid: str  # the first 40 bytes of the slot UUID (the exported label)
    limit: int  # bytes; 0 = unlimited
    sm_limit: int  # percent
    # Zero for a device known only from its allocation (no region yet).
    used: int = 0  # Σ used[i].total
    context: int = 0
    module: int = 0
    buffer: int = 0
    sm_util: int = 0  # Σ deviceUtil[i].smUtil


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
    priority: int
    recent_kernel: int
    utilization_switch: int
    last_kernel_time: int  # Unix seconds; 0 when unknown (always for v0)


def choose_layout(path: Path, size: int, major_version: int) -> RegionLayout:
    """HAMi's rule: by size first, v0 whatever the header says."""
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
    """An open region file. Not thread-safe; the monitor serialises access under one lock."""

    def __init__(
        self, path: Path, fd: int, layout: RegionLayout, identity: tuple[int, int]
    ) -> None:
        self.path = path
        self.layout = layout
        self.identity = identity  # (st_dev, st_ino) of the file opened
        self._fd = fd
        used_stride, util_stride = layout.slot.used_stride // 8, layout.slot.device_util_stride // 8
        self._used = struct.Struct(f"<{MAX_DEVICES * used_stride}q")
        self._utils = struct.Struct(f"<{MAX_DEVICES * util_stride}q")
        self._used_stride, self._util_stride = used_stride, util_stride
        self._limits = struct.Struct(f"<{MAX_DEVICES}Q")

    @classmethod
    def open(cls, path: Path) -> "Region":
        fd = _open_regular(path)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_BYTES:
                raise RegionError(
                    path, RejectReason.TOO_SMALL, f"{size} bytes cannot hold the 12-byte header"
                )
            magic, major = struct.unpack("<iI", os.pread(fd, 8, 0).ljust(8, b"\0"))
            if magic != MAGIC:
                raise RegionError(
                    path, RejectReason.BAD_MAGIC, f"initializedFlag is {magic}, want {MAGIC}"
                )
            layout = choose_layout(path, size, major)
            stat_now = os.fstat(fd)
        except RegionError:
            os.close(fd)
            raise
        except OSError as err:
            os.close(fd)
            raise RegionError(path, RejectReason.UNREADABLE, f"cannot read: {err}") from err
        return cls(path, fd, layout, (stat_now.st_dev, stat_now.st_ino))

    def _copy(self, target: memoryview, offset: int) -> None:
        """Fill `target` from the file at `offset`; a short read means the file shrank."""
        try:
            got = os.preadv(self._fd, [target], offset)
        except OSError as err:
            raise RegionError(self.path, RejectReason.UNREADABLE, f"cannot read: {err}") from err
        if got < len(target):
            raise RegionError(
                self.path,
                RejectReason.SHRUNK,
                f"shorter than its {self.layout.size}-byte layout since it was opened",
            )

    def _read(self, offset: int, length: int) -> bytes:
        buffer = bytearray(length)
        self._copy(memoryview(buffer), offset)
        return bytes(buffer)

    def _write_i32(self, offset: int, value: int) -> None:
        # A file shrunk since the check is grown back by pwrite (a hole up to the field), never
        # a fault; the next scan's `still_whole` then sees whatever the container left there.
        self.still_whole()
        try:
            written = os.pwrite(self._fd, _I32.pack(value), offset)
        except OSError as err:
            raise RegionError(self.path, RejectReason.UNREADABLE, f"cannot write: {err}") from err
        if written != _I32.size:
            raise RegionError(
                self.path, RejectReason.UNREADABLE, f"short write at offset {offset}: {written}"
            )

    def write_recent_kernel(self, value: int) -> None:
        self._write_i32(self.layout.recent_kernel, value)

    def write_utilization_switch(self, value: int) -> None:
        self._write_i32(self.layout.utilization_switch, value)

    def still_whole(self) -> None:
        """Raise if the file is now shorter than its layout (a container truncated it)."""
        try:
            size = os.fstat(self._fd).st_size
        except OSError as err:
            raise RegionError(self.path, RejectReason.UNREADABLE, f"cannot stat: {err}") from err
        if size < self.layout.size:
            raise RegionError(
                self.path,
                RejectReason.SHRUNK,
                f"truncated to {size} bytes after it was opened ({self.layout.size} needed)",
            )

    def feedback(self) -> "FeedbackFields":
        """The fields the feedback loop needs, read once (two small reads)."""
        layout = self.layout
        tail = self._read(layout.proc_num, layout.priority + 4 - layout.proc_num)
        switch, recent, priority = struct.unpack_from("<iii", tail, 4)
        uuids = self._read(layout.uuids, MAX_DEVICES * UUID_BYTES)
        keys = tuple(
            uuids[start : start + UUID_BYTES]
            for start in range(0, len(uuids), UUID_BYTES)
            if uuids[start] != 0
        )
        return FeedbackFields(self, priority, recent, switch, keys)

    def snapshot(self) -> RegionSnapshot:
        """A private copy of the header, the tail and the live slot range, then parsed."""
        layout = self.layout
        data = bytearray(layout.size)
        view = memoryview(data)
        self._copy(view[: layout.procs], 0)
        self._copy(view[layout.proc_num :], layout.proc_num)
        num = _U64.unpack_from(data, layout.device_num)[0]
        proc_num = _I32.unpack_from(data, layout.proc_num)[0]
        if num > MAX_DEVICES or not 0 <= proc_num <= MAX_PROCS:
            raise RegionError(
                self.path,
                RejectReason.COUNT_OUT_OF_RANGE,
                f"device_num {num} (at most {MAX_DEVICES}) / proc_num {proc_num} (0..{MAX_PROCS})",
            )
        self._copy(view[layout.procs : layout.slot_offset(proc_num)], layout.procs)
        processes = tuple(filter(None, (self._slot(data, index) for index in range(proc_num))))
        limits = self._limits.unpack_from(data, layout.limit)
        sm_limits = self._limits.unpack_from(data, layout.sm_limit)
        # A slot whose UUID is empty or not UTF-8 is left out.
        labels = ((index, self._uuid_label(data, index)) for index in range(num))
        devices = tuple(
            self._device(index, uuid, limits[index], sm_limits[index], processes)
            for index, uuid in labels
            if uuid is not None
        )
        last_kernel = (
            0
            if layout.last_kernel_time is None
            else _I64.unpack_from(data, layout.last_kernel_time)[0]
        )
        return RegionSnapshot(
            version=layout.version,
            devices=devices,
            processes=processes,
            priority=_I32.unpack_from(data, layout.priority)[0],
            recent_kernel=_I32.unpack_from(data, layout.recent_kernel)[0],
            utilization_switch=_I32.unpack_from(data, layout.utilization_switch)[0],
            last_kernel_time=last_kernel,
        )

    def _uuid_label(self, data: bytearray, index: int) -> str | None:
        start = self.layout.uuids + index * UUID_BYTES
        raw = bytes(data[start : start + UUID_LABEL_BYTES])
        if raw[:1] == b"\x00":
            return None
        try:
            # HAMi keeps the 40 bytes as they are; we cut at the first NUL so that a short
            # UUID does not put NUL characters into a Prometheus label.
            return raw.split(b"\x00", 1)[0].decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _slot(self, data: bytearray, index: int) -> ProcessSlot | None:
        slot, base = self.layout.slot, self.layout.slot_offset(index)
        status = _I32.unpack_from(data, base + slot.status)[0]
        if status == 0:
            return None
        used = self._used.unpack_from(data, base + slot.used)
        utils = self._utils.unpack_from(data, base + slot.device_util)
        return ProcessSlot(
            slot=index,
            pid=_I32.unpack_from(data, base + slot.pid)[0],
            hostpid=_I32.unpack_from(data, base + slot.hostpid)[0],
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
        os.close(self._fd)


@dataclass(slots=True)
class FeedbackFields:
    """One region as the feedback loop sees it in one tick (a `FeedbackTarget`).

    Values are read once; a write goes to the file and is remembered here. A write that fails
    (the file shrank or cannot be written) is logged and skipped: the loop goes on for the
    other containers, and the next scan refuses this file with its reason.
    """

    region: Region
    priority: int
    recent_kernel: int
    utilization_switch: int
    device_keys: tuple[bytes, ...]  # the full 96-byte UUID of every device slot that holds one

    def write_recent_kernel(self, value: int) -> None:
        if self._write(self.region.write_recent_kernel, value):
            self.recent_kernel = value

    def write_utilization_switch(self, value: int) -> None:
        if self._write(self.region.write_utilization_switch, value):
            self.utilization_switch = value

    @staticmethod
    def _write(write: Callable[[int], None], value: int) -> bool:
        try:
            write(value)
        except RegionError as err:
            log.warning("feedback write skipped", error=str(err))
            return False
        return True


_FILE_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFileError(Exception):
    """The name is something other than a regular file; the message says what it is."""


def open_regular(path: Path, flags: int) -> int:
    """Open `path` with `flags` only if it is a regular file itself, not a link to anything.

    The container can put anything under that name, and swap it at any moment. `O_PATH`
    opens the name without opening what it is (a device's open has effects of its own), and
    `O_NOFOLLOW` makes a symlink the thing opened, not its target; once that inode is known to
    be a regular file it is reopened through `/proc/self/fd`, which reaches that same inode
    whatever the name points to by then. Raises NotRegularFileError or OSError.
    """
    handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
            raise NotRegularFileError(f"is {kind}, not a regular file; not read")
        return os.open(f"/proc/self/fd/{handle}", flags | os.O_CLOEXEC)
    finally:
        os.close(handle)


def _open_regular(path: Path) -> int:
    """The region file opened read-write (see `open_regular`), or a RegionError."""
    try:
        return open_regular(path, os.O_RDWR)
    except NotRegularFileError as err:
        raise RegionError(path, RejectReason.NOT_REGULAR, str(err)) from err
    except OSError as err:
        raise RegionError(path, RejectReason.UNREADABLE, f"cannot open: {err}") from err
