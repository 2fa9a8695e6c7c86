"""The directory scan of `$HOOK_PATH/containers/<podUID>_<container>/`.

Each tick: open the region of every directory whose pod is on this node, read its allocation
record where the DRA driver wrote one (`monitor.record`), drop the ones whose directory went
away, and delete orphaned directories once their grace period is over.

Where we differ from HAMi, on purpose:
* A loaded directory is looked at again every tick: a `.cache` file that appears later, or one
  replaced by a new file, is opened (HAMi keeps the first mapping and never notices).
* The grace period of an orphan runs from the newest change to the directory *or any file in
  it*, so a region that was just created in an old directory is not deleted under its writer.
* Rejected files are reported once per distinct reason (then quietly retried), not every tick.
* A `.cache` name that is not a regular file (a symlink, FIFO, device node, directory) is
  refused with that reason, never followed or opened: the container owns its directory, and a
  link to another container's region would otherwise be read and exported as its own.
"""

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from pyhami.model import ContainerDevices, PodUID
from pyhami.monitor.record import Identity, RecordError, read_record, record_identity
from pyhami.monitor.region import Region, RegionError

log = structlog.get_logger(__name__)

_PLACEHOLDER = "libvgpu.so"  # the empty mount point of the preloaded library
_MAX_MATCHING_FILES = 2


@dataclass(frozen=True, slots=True, order=True)
class ContainerKey:
    pod_uid: PodUID
    container: str


def parse_dir_name(name: str) -> ContainerKey | None:
    """`<podUID>_<containerName>`, split at the first `_`; None when a part is missing."""
    pod_uid, sep, container = name.partition("_")
    if not sep or not pod_uid or not container:
        return None
    return ContainerKey(PodUID(pod_uid), container)


class DirectoryError(Exception):
    """A container directory the monitor cannot use this tick (reason in the message)."""


class RegionDirectory:
    """The regions of every container directory under one root; call `update` every tick."""

    def __init__(self, root: Path, grace_seconds: float) -> None:
        self.root = root
        self.grace_seconds = grace_seconds
        self.loaded: dict[ContainerKey, Region] = {}
        # The last reason each directory was refused for, so the same reason is logged once.
        self.refused: dict[ContainerKey, str] = {}
        self._warned_names: set[str] = set()
        self.deleted: list[Path] = []  # orphans removed, newest last (for logs and tests)
        self.records = AllocationRecords()  # what the DRA driver gave each container

    def update(self, pods_on_node: set[PodUID], now: float) -> None:
        """One scan; `now` is wall-clock Unix time, compared with file mtimes."""
        try:
            entries = sorted(os.scandir(self.root), key=lambda entry: entry.name)
        except OSError as err:
            raise DirectoryError(f"cannot list {self.root}: {err}") from err
        present: set[ContainerKey] = set()
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            key = parse_dir_name(entry.name)
            if key is None:
                self._warn_name(entry.name)
                continue
            directory = Path(entry.path)
            on_node = key.pod_uid in pods_on_node
            if not on_node and self._orphan_expired(directory, now):
                self._delete(key, directory)
                continue
            present.add(key)
            if on_node:
                self._refresh(key, directory)
                self.records.refresh(key, directory)
        for key in self.loaded.keys() - present:
            self._forget(key)
        for key in self.refused.keys() - present:
            del self.refused[key]
        self.records.keep_only(present)

    def close(self) -> None:
        for key in list(self.loaded):
            self._forget(key)

    def _refresh(self, key: ContainerKey, directory: Path) -> None:
        try:
            cache = _cache_file(directory)
        except DirectoryError as err:
            self._refuse(key, str(err))
            return
        current = self.loaded.get(key)
        if cache is None:
            if current is not None:
                log.info("region gone; closed", pod_uid=key.pod_uid, container=key.container)
                self._forget(key)
            return
        if current is not None and current.path == cache and _same_file(current, cache):
            try:
                current.still_whole()  # the feedback loop writes near the file's end
            except RegionError as err:
                self._refuse(key, str(err))
            return
        if current is not None:
            log.info(
                "region replaced", pod_uid=key.pod_uid, container=key.container, path=str(cache)
            )
            self._forget(key)
        try:
            region = Region.open(cache)
        except RegionError as err:
            self._refuse(key, str(err))
            return
        self.refused.pop(key, None)
        self.loaded[key] = region
        log.info(
            "opened region",
            path=str(cache),
            layout=region.layout.version.name,
            pod_uid=key.pod_uid,
            container=key.container,
        )

    def _refuse(self, key: ContainerKey, reason: str) -> None:
        """Close the container's region, if open, and log why unless that reason was logged."""
        self._forget(key)
        report_refusal("region refused; retrying every tick", key, reason, self.refused)
        self.refused[key] = reason

    def _forget(self, key: ContainerKey) -> None:
        region = self.loaded.pop(key, None)
        if region is not None:
            region.close()

    def _orphan_expired(self, directory: Path, now: float) -> bool:
        try:
            newest = max(
                [directory.stat().st_mtime]
                + [entry.stat(follow_symlinks=False).st_mtime for entry in os.scandir(directory)]
            )
        except OSError:
            return False  # changing under us: look again next tick
        return now - newest >= self.grace_seconds

    def _delete(self, key: ContainerKey, directory: Path) -> None:
        self._forget(key)
        self.refused.pop(key, None)
        self.records.forget(key)
        try:
            shutil.rmtree(directory)
        except OSError as err:
            log.warning("cannot delete orphaned directory", path=str(directory), error=str(err))
            return
        self.deleted.append(directory)
        log.info("deleted orphaned directory", path=str(directory), pod_uid=key.pod_uid)

    def _warn_name(self, name: str) -> None:
        if name not in self._warned_names:
            self._warned_names.add(name)
            log.warning("skipping directory not named <podUID>_<container>", name=name)


def report_refusal(
    event: str, key: ContainerKey, reason: str, reported: Mapping[ContainerKey, str]
) -> None:
    """Log a refused region, unless `reported` shows this reason was the last one logged."""
    if reported.get(key) != reason:
        log.warning(event, pod_uid=key.pod_uid, container=key.container, reason=reason)


def _cache_file(directory: Path) -> Path | None:
    """HAMi's choice: the first `.cache` name; more than two library/cache names is an error.

    Entries of every type count, so that a symlink or FIFO under the region's name is refused
    by `Region.open` with a reason instead of being skipped without a word. Only matching names
    are kept, and the listing stops at the first one too many: the container fills this
    directory, and a million names must not cost the monitor a million-entry list each tick."""
    matching: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if _PLACEHOLDER in entry.name or entry.name.endswith(".cache"):
                    matching.append(entry.name)
                    if len(matching) > _MAX_MATCHING_FILES:
                        raise DirectoryError(
                            f"{directory} holds more than {_MAX_MATCHING_FILES} region/library "
                            f"files ({', '.join(sorted(matching))}, ...)"
                        )
    except OSError as err:
        raise DirectoryError(f"cannot list {directory}: {err}") from err
    caches = sorted(n for n in matching if n.endswith(".cache") and _PLACEHOLDER not in n)
    return directory / caches[0] if caches else None


def _same_file(region: Region, path: Path) -> bool:
    try:
        stat = path.stat(follow_symlinks=False)
    except OSError:
        return False
    return (stat.st_dev, stat.st_ino) == region.identity


class AllocationRecords:
    """The records of the container folders of this node's pods; `refresh` each tick."""

    def __init__(self) -> None:
        self.devices: dict[ContainerKey, ContainerDevices] = {}
        # The reason each refused record was refused for, so the same reason is logged once.
        self.refused: dict[ContainerKey, str] = {}
        self._read: dict[ContainerKey, Identity] = {}

    def refresh(self, key: ContainerKey, directory: Path) -> None:
        """Read the folder's record again if it is new or changed; drop it if it is gone."""
        try:
            identity = record_identity(directory)
            if identity is None:
                self.forget(key)
                return
            if self._read.get(key) == identity:
                return  # unchanged: keep the devices, or the refusal, of the last read
            self._read[key] = identity
            self.devices[key] = read_record(directory)
        except RecordError as err:
            self.devices.pop(key, None)
            report_refusal("allocation record refused", key, str(err), self.refused)
            self.refused[key] = str(err)
            return
        if self.refused.pop(key, None) is not None:
            log.info("allocation record accepted", pod_uid=key.pod_uid, container=key.container)

    def forget(self, key: ContainerKey) -> None:
        self.devices.pop(key, None)
        self.refused.pop(key, None)
        self._read.pop(key, None)

    def keep_only(self, keys: set[ContainerKey]) -> None:
        for key in (self._read.keys() | self.refused.keys()) - keys:
            self.forget(key)
