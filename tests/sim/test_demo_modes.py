"""`pyhami demo --mode`: which nodes run the device plugin and which the DRA driver, and what
a DRA node's pod is shown to hold."""

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.devices.nvidia.dra_claims import DRIVER
from pyhami.kube import KubeError
from pyhami.kube.manifests import ClaimUse, PodManifest, PodState
from pyhami.model import ContainerView, PodView
from pyhami.sim.demo.cli import NodeMode, _endpoints, node_split
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.results import CardShare
from pyhami.sim.demo.run import claimed_cards
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


async def test_a_dra_pods_cards_are_its_claims_devices_with_what_they_consume() -> None:
    def result(device: str, memory: str, request: str = "gpu") -> dict[str, object]:
        consumed = {"memory": memory, "cores": "30"}
        return {"request": request, "driver": DRIVER, "pool": "n1", "device": device} | {
            "consumedCapacity": consumed
        }

    claims = {
        "c1": [result("gpu-0", "4Gi"), result("gpu-1", "1Gi", "other/a")],
        "c2": [result("gpu-1", "lots")],  # unreadable: the card shows without its use
    }

    class Client:
        async def get(self, resource: object, name: str, namespace: str) -> dict[str, object]:
            if name not in claims:
                raise KubeError(404, "NotFound", name)
            return {"status": {"allocation": {"devices": {"results": claims[name]}}}}

    gpus = [SimpleNamespace(uuid=f"GPU-{n}", name="A100") for n in range(2)]
    node = SimpleNamespace(name="n1", nvml=SimpleNamespace(gpus=gpus))
    cluster = SimpleNamespace(client=Client(), nodes=[], dra_nodes=[node])
    pod = PodView(
        key="p",
        namespace="ml",
        name="p",
        containers=(
            ContainerView("a", claims=(("first", "gpu"),)),
            ContainerView("b", claims=(("second", ""),)),
            ContainerView("c", claims=(("third", ""),)),
        ),
        resource_claims={"first": "c1", "second": "c2", "third": "gone"},
    )
    state = PodState(pod)
    assert state.claims == (ClaimUse("a", "c1", "gpu"), ClaimUse("b", "c2"), ClaimUse("c", "gone"))
    shares = await claimed_cards(cast(DemoCluster, cluster), state)
    assert shares == (
        CardShare("a", "n1", "GPU-0", "A100", 0, 4096, 30),
        CardShare("b", "n1", "GPU-1", "A100", 1, 0, 0),
    )


def test_the_printed_top_command_watches_every_nodes_monitor(tmp_path: Path) -> None:
    def node(name: str, port: int) -> SimpleNamespace:
        return SimpleNamespace(name=name, metrics_url=f"http://127.0.0.1:{port}/metrics")

    pair = SimpleNamespace(cert_file=tmp_path / "c.crt", key_file=tmp_path / "c.key")
    cluster = SimpleNamespace(
        workdir=tmp_path,
        ca_pem=b"ca",
        client_certificate=pair,
        real=None,
        api=SimpleNamespace(url="https://127.0.0.1:1"),
        scheduler_url="https://127.0.0.1:2",
        scheduler_metrics_url="http://127.0.0.1:3/metrics",
        nodes=[node("gpu-node-1", 4)],
        dra_nodes=[node("dra-node-1", 5)],
    )
    pod = PodManifest("default", "last", {})
    text = _endpoints(cast(DemoCluster, cluster), [pod])
    top = next(line for line in text.splitlines() if "pyhami top" in line).split()
    monitors = [top[i + 1] for i, word in enumerate(top) if word == "--monitor"]
    assert monitors == ["http://127.0.0.1:4/metrics", "http://127.0.0.1:5/metrics"]
