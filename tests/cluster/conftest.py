"""The real-control-plane tier: Kubernetes' own binaries, built (or reused) once per session.
The demo cluster runs our components there under the chart's RBAC (`DemoCluster` applies it);
`assert_none_refused` fails a test whose components were refused a request.

Never skipped: without the binaries the session builds them with `pyhami control-plane build`
(which needs Go and the Go module proxy the first time); a build that fails fails the tests."""

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyhami.controlplane import (
    KUBERNETES_VERSION,
    BuildError,
    BuiltBinaries,
    build_control_plane,
    default_cache_root,
    find_built,
)
from pyhami.sim.demo.cluster import COMPONENT_NAMESPACE, DemoCluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "pyhami"
HERE = Path(__file__).resolve().parent
FIRST_BUILD_TIMEOUT_S = 3600  # a cold build is minutes of compiling (13 on 2 cores)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """When the binaries are not built yet, the first test of this tier builds them in its
    setup: that test alone gets the time a cold build takes."""
    if find_built(KUBERNETES_VERSION, default_cache_root()) is not None:
        return
    for item in items:
        if HERE in item.path.parents and "kubernetes" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(FIRST_BUILD_TIMEOUT_S))
            return


@pytest.fixture(scope="session")
def kubernetes() -> BuiltBinaries:
    lines: list[str] = []
    try:
        return build_control_plane(progress=lines.append)
    except BuildError as err:
        pytest.fail(f"pyhami control-plane build failed: {err}\n" + "\n".join(lines))


def render_chart(*values: str) -> list[dict[str, Any]]:
    """The chart as helm renders it into the demo's component namespace; its accounts are
    named as the demo's components (pyhami-scheduler, pyhami-device-plugin)."""
    sets = [flag for value in ("fullnameOverride=pyhami", *values) for flag in ("--set", value)]
    command = ["helm", "template", "pyhami", str(CHART), "--namespace", COMPONENT_NAMESPACE]
    done = subprocess.run([*command, *sets], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"helm template failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_rbac_with(*values: str) -> str:
    """The chart's ServiceAccounts, roles and bindings as `render_chart` renders them (YAML)."""
    return yaml.safe_dump_all([obj for obj in render_chart(*values) if obj["kind"] in RBAC_KINDS])


def assert_none_refused(demo: DemoCluster) -> None:
    """The real authorizer and admission refused no request of our components or kubelets: the
    chart grants what they use."""
    refused = demo.refused_requests()
    assert refused == [], "the API server refused requests:\n" + "\n".join(refused)
