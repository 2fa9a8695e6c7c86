"""The demo on Kubernetes' own control plane runs its components under the chart's RBAC: the
packaged copy it applies (src/pyhami/sim/demo/chart-rbac.yaml, applied by the demo) is what
helm renders for the demo's names, labels aside.

After a change to the chart's RBAC, refresh the copy: REFRESH below."""

from __future__ import annotations

from typing import Any

import yaml

from pyhami.sim.demo.cluster import CHART_RBAC_FILE, COMPONENT_NAMESPACE

from .render import CHART, helm, set_flags

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# The demo's components are named as the chart names them with fullnameOverride=pyhami; with
# DRA on (its --mode dra and mixed translate pods into ResourceClaimTemplates and watch
# ResourceSlices; the device-plugin mode leaves those grants unused).
DEMO_VALUES = ("fullnameOverride=pyhami", "dra.mode=selected")
REFRESH = "cd tests && python3 -m chart.test_demo_rbac"


def rendered_rbac() -> list[dict[str, Any]]:
    out = helm("template", "pyhami", str(CHART), "--namespace", COMPONENT_NAMESPACE,
               *set_flags(DEMO_VALUES))  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(out) if doc and doc["kind"] in RBAC_KINDS]
    for obj in objects:
        obj["metadata"].pop("labels", None)  # the chart's version is in them
    return objects


def test_the_demo_applies_the_charts_rbac_as_helm_renders_it() -> None:
    packaged = [obj for obj in yaml.safe_load_all(CHART_RBAC_FILE.read_text()) if obj]
    assert packaged == rendered_rbac(), (
        f"{CHART_RBAC_FILE} is not the chart's RBAC; refresh it: {REFRESH}"
    )


if __name__ == "__main__":
    header = "# The chart's RBAC for the demo's names (helm template, labels dropped), written by\n"
    header += f"# `{REFRESH}`; tests/chart/test_demo_rbac.py checks it.\n"
    CHART_RBAC_FILE.write_text(header + yaml.safe_dump_all(rendered_rbac(), sort_keys=False))
    print(f"wrote {CHART_RBAC_FILE}")
