"""`pyhami demo --mode`: which nodes run the device plugin and which the DRA driver."""

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.sim.demo.cli import NodeMode, node_split
from pyhami.sim.demo.settings import DemoSettings


@pytest.mark.parametrize(
    "mode, nodes, split",
    [
        (NodeMode.DEVICE_PLUGIN, 3, (3, 0)),
        (NodeMode.DRA, 3, (0, 3)),
        (NodeMode.MIXED, 3, (2, 1)),
        (NodeMode.MIXED, 4, (2, 2)),
        (NodeMode.MIXED, 1, (1, 1)),
    ],
)
def test_the_mode_splits_the_nodes(mode: NodeMode, nodes: int, split: tuple[int, int]) -> None:
    assert node_split(mode, nodes) == split
    plugin, dra = split
    settings = DemoSettings(nodes=plugin, dra_nodes=dra, gpus=2)
    assert (len(settings.node_cards()), len(settings.dra_node_cards())) == split


def test_dra_modes_need_the_real_control_plane() -> None:
    result = CliRunner().invoke(app, ["demo", "--mode", "dra"])
    assert result.exit_code == 2
    assert "--mode dra needs --control-plane real" in result.output
