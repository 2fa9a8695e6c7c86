"""Pair scores from NVML link facts."""

from pyhami.deviceplugin.config import DeviceFilter
from pyhami.deviceplugin.inventory import discover
from pyhami.deviceplugin.topology import read_pair_scores
from pyhami.nvml import TopologyLevel
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import a100_80g


def scores_of(nvml: FakeNVML) -> dict[str, dict[str, int]]:
    result = read_pair_scores(nvml, discover(nvml, DeviceFilter()))
    return {row.uuid: dict(row.scores) for row in result.scores}


def test_pcie_levels_and_direct_nvlinks() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g(numa=1))
    nvml.link(0, 1, nvlinks=4)
    nvml.set_topology(0, 1, TopologyLevel.SINGLE)
    u = [nvml.device_uuid(i) for i in range(3)]
    scores = scores_of(nvml)
    assert scores[u[0]] == {u[1]: 50 + 400, u[2]: 10}
    assert scores[u[1]][u[0]] == 450
    assert scores[u[2]] == {u[0]: 10, u[1]: 10}


def test_nvswitch_counts_the_smaller_link_set() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    nvml.connect_switch(0, nvlinks=12)
    nvml.connect_switch(1, nvlinks=6)
    u = [nvml.device_uuid(i) for i in range(2)]
    assert scores_of(nvml)[u[0]] == {u[1]: 20 + 600}


def test_asymmetric_links_score_zero_and_are_reported() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g())
    nvml.link(0, 1, nvlinks=2, one_way=True)
    result = read_pair_scores(nvml, discover(nvml, DeviceFilter()))
    u = [nvml.device_uuid(i) for i in range(2)]
    assert [dict(r.scores) for r in result.scores] == [{u[1]: 0}, {u[0]: 0}]
    assert result.asymmetric == ((u[0], u[1]),)


def test_single_gpu_has_an_empty_row() -> None:
    nvml = FakeNVML.with_gpus(a100_80g())
    assert scores_of(nvml) == {nvml.device_uuid(0): {}}
