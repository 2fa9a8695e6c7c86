"""The rendered chart, whole, is accepted by the real API server (`kubectl apply
--dry-run=server`: schema, defaulting, validation and admission, nothing stored)."""

import pytest
import yaml

from pyhami.controlplane import BuiltBinaries
from pyhami.testing.real_cluster import RealControlPlane

from .conftest import render_chart


@pytest.mark.parametrize(
    "values",
    [
        pytest.param((), id="defaults"),
        pytest.param(("scheduler.leaderElect=true", "scheduler.replicas=3"), id="leader-election"),
        pytest.param(("scheduler.admissionWebhook.enabled=false",), id="webhook-off"),
        pytest.param(("dashboards.enabled=true",), id="dashboards"),
        pytest.param(("dra.mode=selected", "dra.deviceClass.create=true"), id="dra-selected"),
        pytest.param(("dra.mode=all", "dra.deviceClass.create=true"), id="dra-all"),
    ],
)
async def test_the_rendered_chart_passes_a_server_side_dry_run(
    kubernetes: BuiltBinaries, values: tuple[str, ...]
) -> None:
    objects = render_chart(*values)
    async with RealControlPlane(kubernetes) as plane:
        out = await plane.apply(yaml.safe_dump_all(objects), dry_run=True)
    kinds = {obj["kind"] for obj in objects}
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration"} & kinds
    if "dra.deviceClass.create=true" in values:
        names = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "DaemonSet"}
        assert "pyhami-dra-driver" in names and "DeviceClass" in kinds
    assert out.count("(server dry run)") == len(objects)
