"""The feedback loop on real mapped files, driven tick by tick by direct calls."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyhami.monitor.feedback import observe
from pyhami.monitor.region import Region

from .regionfile import SPEC_V1, RegionSpec, read_i32, uuid_of, write_region


class SimulatedContainer:
    """A workload under libvgpu: a launch sets recentKernel = 2 unless the monitor froze it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._view = Region.open(path)  # libvgpu's own mapping of the same file

    def launch(self) -> bool:
        if self._view.recent_kernel < 0:
            return False  # libvgpu sleeps in 1 s steps while frozen
        self._view.write_recent_kernel(2)
        return True

    @property
    def recent_kernel(self) -> int:
        return read_i32(self.path, SPEC_V1["recent_kernel"])

    @property
    def switch(self) -> int:
        return read_i32(self.path, SPEC_V1["utilization_switch"])

    def close(self) -> None:
        self._view.close()


Node = tuple[list[Region], dict[str, SimulatedContainer]]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """Three containers: high (p0) and low (p1) share GPU 0; peer (p1) shares GPU 0 too."""
    specs = {
        "high": RegionSpec(uuids=(uuid_of(0),), priority=0, recent_kernel=0),
        "low": RegionSpec(uuids=(uuid_of(0),), priority=1, recent_kernel=0),
        "peer": RegionSpec(uuids=(uuid_of(0), uuid_of(1)), priority=1, recent_kernel=0),
        "alone": RegionSpec(uuids=(uuid_of(7),), priority=1, recent_kernel=0),
    }
    paths = {name: write_region(tmp_path / f"{name}.cache", spec) for name, spec in specs.items()}
    monitor = [Region.open(path) for path in paths.values()]
    containers = {name: SimulatedContainer(path) for name, path in paths.items()}
    yield monitor, containers
    for region in monitor:
        region.close()
    for container in containers.values():
        container.close()


def _pick(
    monitor: list[Region], containers: dict[str, SimulatedContainer], *names: str
) -> list[Region]:
    return [r for r in monitor if any(r.path == containers[n].path for n in names)]


def test_low_priority_is_frozen_while_high_runs_and_released_after(node: Node) -> None:
    monitor, c = node
    regions = _pick(monitor, c, "high", "low")
    assert c["high"].launch() and c["low"].launch()
    high, low = observe(regions)
    assert high.active and low.active
    assert low.blocked and c["low"].recent_kernel == -1, "the p1 task must be frozen"
    assert not high.blocked and c["high"].recent_kernel == 1
    assert c["low"].switch == 1, "blocked counts as contended"
    assert c["high"].switch == 0, "alone at its level: no throttling"

    for _ in range(3):  # high keeps running; low stays frozen and cannot launch
        assert c["high"].launch()
        assert not c["low"].launch()
        observe(regions)
        assert c["low"].recent_kernel == -1

    # high stops: the next tick decays its recentKernel 1 -> 0 (inactive) and releases low.
    assert c["high"].recent_kernel == 1
    high, low = observe(regions)
    assert not high.active and not low.blocked
    assert c["low"].recent_kernel == 0 and c["low"].switch == 0
    assert c["low"].launch(), "released: libvgpu launches again"


def test_two_active_at_one_level_on_a_shared_gpu_flip_the_switch(node: Node) -> None:
    monitor, c = node
    regions = _pick(monitor, c, "low", "peer", "alone")
    for name in ("low", "peer", "alone"):
        assert c[name].launch()
    verdicts = observe(regions)
    assert [v.contended for v in verdicts] == [True, True, False]
    assert (c["low"].switch, c["peer"].switch, c["alone"].switch) == (1, 1, 0)
    assert c["low"].recent_kernel == 1, "same level never freezes"

    # peer goes idle: low is alone again, the switch goes back to 0.
    c["low"].launch()
    observe(regions)
    c["low"].launch()
    observe(regions)
    assert (c["low"].switch, c["peer"].switch) == (0, 0)


def test_idle_containers_are_neither_active_nor_written(node: Node) -> None:
    monitor, c = node
    regions = _pick(monitor, c, "high", "low")
    verdicts = observe(regions)
    assert not any(v.active or v.blocked or v.contended for v in verdicts)
    assert c["high"].recent_kernel == 0 and c["low"].recent_kernel == 0
    assert c["high"].switch == 0, "initial 1 becomes 0 without contention"


def test_negative_priority_is_never_counted_active(tmp_path: Path) -> None:
    paths = [
        write_region(tmp_path / "a.cache", RegionSpec(uuids=(uuid_of(0),), priority=-1)),
        write_region(tmp_path / "b.cache", RegionSpec(uuids=(uuid_of(0),), priority=1)),
    ]
    regions = [Region.open(p) for p in paths]
    first, second = observe(regions)
    assert not first.active and second.active and not second.blocked
    for region in regions:
        region.close()
