"""The feedback loop on real region files, driven tick by tick by direct calls; the simulated
workload maps its file MAP_SHARED as libvgpu does."""

import mmap
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.monitor import feedback
from pyhami.monitor.feedback import Verdict
from pyhami.monitor.region import Region

from .regionfile import SPEC_V1, RegionSpec, read_i32, uuid_of, write_region


class SimulatedContainer:
    """A workload under libvgpu: a launch sets recentKernel = 2 unless the monitor froze it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("r+b") as file:
            self._view = mmap.mmap(file.fileno(), 0)  # libvgpu's own mapping of the same file

    def launch(self) -> bool:
        if struct.unpack_from("<i", self._view, SPEC_V1["recent_kernel"])[0] < 0:
            return False  # libvgpu sleeps in 1 s steps while frozen
        struct.pack_into("<i", self._view, SPEC_V1["recent_kernel"], 2)
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


def observe(regions: Sequence[Region]) -> list[Verdict]:
    """One tick as the service runs it: each region's fields read afresh."""
    return feedback.observe([region.feedback() for region in regions])


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


def test_a_huge_priority_costs_nothing_and_ranks_last(tmp_path: Path) -> None:
    """The priority is the container's to write: 2**31 - 1 once made the census allocate a
    counter per level up to it (16 GiB), enough to get the monitor killed."""
    paths = [
        write_region(
            tmp_path / "a.cache",
            RegionSpec(uuids=(uuid_of(0),), priority=2**31 - 1, recent_kernel=5),
        ),
        write_region(
            tmp_path / "b.cache", RegionSpec(uuids=(uuid_of(0),), priority=0, recent_kernel=5)
        ),
    ]
    regions = [Region.open(p) for p in paths]
    last, first = observe(regions)
    assert last.active and last.blocked and not first.blocked
    for region in regions:
        region.close()


class _Target:
    """An in-memory FeedbackTarget for the property test."""

    def __init__(self, recent: int, switch: int, priority: int, keys: tuple[bytes, ...]) -> None:
        self.recent_kernel, self.utilization_switch = recent, switch
        self.priority, self.device_keys = priority, keys

    def write_recent_kernel(self, value: int) -> None:
        self.recent_kernel = value

    def write_utilization_switch(self, value: int) -> None:
        self.utilization_switch = value


_CONTAINER = st.tuples(
    st.integers(-2, 3),  # recentKernel
    st.integers(0, 1),  # utilizationSwitch
    st.integers(-1, 3),  # priority
    st.sets(st.sampled_from([b"A".ljust(96, b"\0"), b"B".ljust(96, b"\0"), b"C".ljust(96, b"\0")])),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_CONTAINER, max_size=6))
def test_feedback_matches_the_spec_text(containers: list[tuple[int, int, int, set[bytes]]]) -> None:
    targets = [_Target(rk, sw, p, tuple(sorted(keys))) for rk, sw, p, keys in containers]
    feedback.observe(targets)
    # HAMi's rule, read literally: decremented rk; active = still > 0 with priority >= 0.
    after = [rk - 1 if rk > 0 else rk for rk, _, _, _ in containers]
    active = [a > 0 and p >= 0 for a, (_, _, p, _) in zip(after, containers, strict=True)]
    for i, (_, _, p, keys) in enumerate(containers):
        peers = [j for j, c in enumerate(containers) if active[j] and keys & c[3]]
        blocking = any(containers[j][2] < p for j in peers)
        contended = blocking or any(
            sum(1 for j in peers if containers[j][2] == p and key in containers[j][3]) > 1
            for key in keys
        )
        want_rk = (
            -1 if blocking and after[i] >= 0 else (0 if not blocking and after[i] < 0 else after[i])
        )
        assert targets[i].recent_kernel == want_rk, (i, containers)
        assert targets[i].utilization_switch == (1 if contended else 0), (i, containers)
