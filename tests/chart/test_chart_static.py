"""Static checks of the chart (no helm binary is obtainable here, so templates are not rendered).

They catch drift between the chart and the code: every flag the chart passes must be one that
pyhami's commands define, and every metric the dashboard queries must be one pyhami exports.
"""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pyhami"
SOURCES = "\n".join(p.read_text() for p in (ROOT / "src" / "pyhami").rglob("*.py"))


def test_chart_metadata_and_values_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert values["schedulerName"] == "hami-scheduler"
    assert values["resourceName"] == "nvidia.com/gpu"


def test_every_flag_in_the_templates_is_defined_by_a_pyhami_command() -> None:
    templates = "\n".join(p.read_text() for p in (CHART / "templates").glob("*.yaml"))
    pyhami_lines = [
        line for line in templates.splitlines()
        if "pyhami" in line or line.strip().startswith("- --")
    ]
    flags = {m for line in pyhami_lines for m in re.findall(r"(--[a-z_-]+)=", line)}
    flags -= {"--config", "--host", "--namespace", "--secret-name", "--webhook-name"}
    flags -= {"--patch-validating", "--patch-failure-policy"}
    assert flags, "no pyhami flags found in the templates"
    missing = sorted(flag for flag in flags if f'"{flag}"' not in SOURCES)
    assert not missing, f"chart passes flags pyhami does not define: {missing}"


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads((CHART / "dashboards" / "pyhami-overview.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    names = {name for expr in exprs for name in re.findall(r"\bhami_[a-z_]+", expr)}
    missing = sorted(name for name in names if name not in SOURCES)
    assert not missing, f"dashboard queries metrics nobody exports: {missing}"
