"""The directory scan: loading, late files, replaced files, bad names, orphans and grace."""

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from pyhami.model import PodUID
from pyhami.monitor.scan import ContainerKey, DirectoryError, RegionDirectory, parse_dir_name

from .regionfile import RegionSpec, uuid_of, write_region

GRACE = 300.0
POD = PodUID("0b3c6e1a-pod-a")


def _dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "libvgpu.so").touch()  # the library's mount placeholder
    return path


def _age(path: Path, seconds_ago: float, now: float) -> None:
    for item in [path, *path.iterdir()]:
        os.utime(item, (now - seconds_ago, now - seconds_ago))


@pytest.mark.parametrize(
    "name, want",
    [
        ("uid_main", ContainerKey(PodUID("uid"), "main")),
        ("uid_side_car", ContainerKey(PodUID("uid"), "side_car")),
        ("nounderscore", None),
        ("_main", None),
        ("uid_", None),
    ],
)
def test_dir_names(name: str, want: ContainerKey | None) -> None:
    assert parse_dir_name(name) == want


def test_maps_each_container_of_pods_on_the_node(tmp_path: Path) -> None:
    for container in ("main", "sidecar"):
        write_region(_dir(tmp_path, f"{POD}_{container}") / "x.cache", RegionSpec())
    (tmp_path / "stray-file").touch()
    _dir(tmp_path, "not-a-container-dir")
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    assert sorted(k.container for k in scan.loaded) == ["main", "sidecar"]
    scan.close()


def test_a_region_that_appears_later_in_a_loaded_dir_is_mapped(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    assert scan.loaded == {}, "only the placeholder: nothing to map yet"
    write_region(directory / "a.cache", RegionSpec(uuids=(uuid_of(0),)))
    scan.update({POD}, now=1e10)
    assert [r.path.name for r in scan.loaded.values()] == ["a.cache"]
    scan.close()


def test_a_replaced_region_file_is_remapped(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    path = write_region(directory / "a.cache", RegionSpec(uuids=(uuid_of(0),)))
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    first = scan.loaded[ContainerKey(POD, "main")]
    replacement = write_region(directory / "tmp", RegionSpec(uuids=(uuid_of(5),)))
    os.replace(replacement, path)  # a new inode under the same name
    scan.update({POD}, now=1e10)
    second = scan.loaded[ContainerKey(POD, "main")]
    assert second is not first
    assert second.snapshot().devices[0].uuid == uuid_of(5)
    scan.close()


def test_a_deleted_region_or_dir_is_unmapped(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    path = write_region(directory / "a.cache", RegionSpec())
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    path.unlink()
    scan.update({POD}, now=1e10)
    assert scan.loaded == {}
    write_region(directory / "a.cache", RegionSpec())
    scan.update({POD}, now=1e10)
    for item in directory.iterdir():
        item.unlink()
    directory.rmdir()
    scan.update({POD}, now=1e10)
    assert scan.loaded == {}
    scan.close()


def test_bad_files_are_refused_with_a_reason_and_retried(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    path = write_region(directory / "a.cache", RegionSpec(magic=7))
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    key = ContainerKey(POD, "main")
    assert key not in scan.loaded and "initializedFlag is 7" in scan.refused[key]
    write_region(path, RegionSpec())  # libvgpu finished initialising it
    scan.update({POD}, now=1e10)
    assert key in scan.loaded and key not in scan.refused
    scan.close()


def test_too_many_region_files_is_refused(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    for name in ("a.cache", "b.cache"):
        write_region(directory / name, RegionSpec())
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    assert (
        "more than 2 region/library files (a.cache, b.cache, libvgpu.so"
        in scan.refused[ContainerKey(POD, "main")]
    )
    scan.close()


def test_missing_root_is_an_error_for_the_tick(tmp_path: Path) -> None:
    with pytest.raises(DirectoryError):
        RegionDirectory(tmp_path / "absent", GRACE).update(set(), now=0)


def test_orphans_are_deleted_only_after_the_grace_period(tmp_path: Path) -> None:
    now = 2e9
    old = _dir(tmp_path, "gone-pod_main")
    write_region(old / "a.cache", RegionSpec())
    young = _dir(tmp_path, "new-pod_main")
    _age(old, GRACE + 1, now)
    _age(young, 10, now)
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update(set(), now=now)
    assert not old.exists() and young.exists()
    assert scan.deleted == [old]
    scan.close()


def test_a_late_file_in_an_old_orphan_dir_restarts_its_grace(tmp_path: Path) -> None:
    """HAMi looks only at the directory's mtime; a file written inside keeps it alive too."""
    now = 2e9
    directory = _dir(tmp_path, "pending-pod_main")
    path = write_region(directory / "a.cache", RegionSpec())
    _age(directory, GRACE * 10, now)
    os.utime(path, (now - 5, now - 5))  # the workload just wrote its region
    os.utime(directory, (now - GRACE * 10, now - GRACE * 10))
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update(set(), now=now)
    assert directory.exists()
    scan.update(set(), now=now + GRACE)
    assert not directory.exists()


def test_a_pod_leaving_the_node_unmaps_then_deletes(tmp_path: Path) -> None:
    now = 2e9
    directory = _dir(tmp_path, f"{POD}_main")
    write_region(directory / "a.cache", RegionSpec())
    _age(directory, 1, now)
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=now)
    assert scan.loaded
    scan.update(set(), now=now)
    assert directory.exists(), "within grace the directory stays"
    scan.update(set(), now=now + GRACE)
    assert scan.loaded == {} and not directory.exists()


def test_a_loaded_region_truncated_in_place_is_unmapped_before_any_write(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    path = write_region(directory / "a.cache", RegionSpec())
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    os.truncate(path, 100)
    scan.update({POD}, now=1e10)
    key = ContainerKey(POD, "main")
    assert key not in scan.loaded and "truncated" in scan.refused[key]
    scan.close()


def _link_to_a_neighbours_region(path: Path) -> None:
    neighbour = write_region(path.parent.parent / "other-pod_main" / "b.cache", RegionSpec())
    path.symlink_to(f"../{neighbour.parent.name}/{neighbour.name}")


@pytest.mark.parametrize(
    "make, kind",
    [
        pytest.param(_link_to_a_neighbours_region, "a symbolic link", id="symlink"),
        pytest.param(os.mkfifo, "a FIFO", id="fifo"),
        pytest.param(
            lambda path: os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5)),
            "a character device",
            id="device",
        ),
        pytest.param(os.mkdir, "a directory", id="directory"),
    ],
)
def test_a_region_name_that_is_not_a_regular_file_is_refused_with_a_reason(
    tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    make(directory / "a.cache")
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    key = ContainerKey(POD, "main")
    assert key not in scan.loaded
    assert f"is {kind}, not a regular file" in scan.refused[key]
    scan.close()


def test_a_loaded_region_replaced_by_a_symlink_is_dropped(tmp_path: Path) -> None:
    directory = _dir(tmp_path, f"{POD}_main")
    path = write_region(directory / "a.cache", RegionSpec())
    scan = RegionDirectory(tmp_path, GRACE)
    scan.update({POD}, now=1e10)
    key = ContainerKey(POD, "main")
    assert key in scan.loaded
    path.unlink()
    _link_to_a_neighbours_region(path)
    scan.update({POD}, now=1e10)
    assert key not in scan.loaded and "symbolic link" in scan.refused[key]
    scan.close()
