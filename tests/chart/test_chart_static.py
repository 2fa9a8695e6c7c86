"""Checks of the chart's own files: metadata, and the Grafana dashboard (querying only metrics
pyhami exports, shipped unchanged in its ConfigMap). Evaluated against live metrics in
tests/system/test_whole_system.py; rendered manifests in test_chart_render.py."""

import json
import re
from pathlib import Path

import yaml

from .render import render

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pyhami"
SOURCES = "\n".join(p.read_text() for p in (ROOT / "src" / "pyhami").rglob("*.py"))


def test_chart_metadata_and_values_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert values["schedulerName"] == "hami-scheduler"
    assert values["resourceName"] == "nvidia.com/gpu"


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads((CHART / "dashboards" / "pyhami-overview.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    names = {name for expr in exprs for name in re.findall(r"\bhami_[a-z_]+", expr)}
    missing = sorted(name for name in names if name not in SOURCES)
    assert not missing, f"dashboard queries metrics nobody exports: {missing}"


def test_the_dashboards_configmap_carries_every_dashboard_unchanged() -> None:
    rendered = render("everything-on")
    configmap = rendered.one("ConfigMap", "-dashboards")
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = {path.name: path.read_text() for path in (CHART / "dashboards").glob("*.json")}
    assert configmap["data"] == files
    names = [o["metadata"]["name"] for o in render("defaults").of_kind("ConfigMap")]
    assert not [name for name in names if name.endswith("-dashboards")], "off by default"
