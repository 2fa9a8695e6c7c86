"""The allocation record the DRA driver leaves in a container's folder (format in
`pyhami.protocol.allocation_record`), read with the care a region gets: never through a link,
never more than the record's bound, and a bad one is refused with a reason, never a crash."""

import os
from pathlib import Path

from pyhami.model import ContainerDevices
from pyhami.monitor.region import NotRegularFileError, open_regular
from pyhami.protocol import RECORD_FILE_NAME, ProtocolError, decode_allocation_record
from pyhami.protocol.allocation_record import MAX_RECORD_BYTES

Identity = tuple[int, int, int, int]


class RecordError(Exception):
    """A record the monitor will not use; the message names the file and the problem."""


def record_identity(directory: Path) -> Identity | None:
    """(device, inode, size, mtime ns) of the record's name, None when there is none; a record
    with the same identity need not be read again."""
    try:
        found = (directory / RECORD_FILE_NAME).stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RecordError(f"allocation record in {directory}: cannot stat: {err}") from err
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


def read_record(directory: Path) -> ContainerDevices:
    """The devices the record in `directory` lists (raises RecordError)."""
    path = directory / RECORD_FILE_NAME
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (NotRegularFileError, OSError) as err:
        raise RecordError(f"allocation record {path}: {err}") from err
    try:
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError as err:
        raise RecordError(f"allocation record {path}: cannot read: {err}") from err
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"allocation record {path}: larger than {MAX_RECORD_BYTES} bytes")
    try:
        return decode_allocation_record(data.decode())
    except UnicodeDecodeError as err:
        raise RecordError(f"allocation record {path}: not UTF-8: {err}") from err
    except ProtocolError as err:
        raise RecordError(f"allocation record {path}: {err}") from err
