"""`pyhami chart convert-values` on HAMi v2.10's own values.yaml and on a customised copy: every
HAMi key is reported once, and the output passes our chart's schema (helm lint --strict) and
renders what the HAMi values asked for."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from pyhami.cli import app

from .render import CHART, NAMESPACE, RELEASE, Rendered, helm

HAMI_VALUES = Path(__file__).parent / "fixtures" / "hami-v2.10-values.yaml"
HAMI_DEFAULTS: dict[str, Any] = yaml.safe_load(HAMI_VALUES.read_text())


def leaves(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict) and value:
        return [leaf for key, item in value.items() for leaf in leaves(item, f"{path}{key}.")]
    return [path.rstrip(".")]


def convert(tmp_path: Path, values: dict[str, Any]) -> tuple[Result, Path]:
    source = tmp_path / "hami-values.yaml"
    source.write_text(yaml.safe_dump(values))
    out = tmp_path / "pyhami-values.yaml"
    result = CliRunner().invoke(app, ["chart", "convert-values", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result, out


def report(result: Result) -> dict[str, str]:
    lines = result.stderr.splitlines()[:-1]  # the last is the summary
    return {line.split()[1].rstrip(":"): line for line in lines}


def test_hamis_own_values_convert_to_nothing_and_every_key_is_reported(tmp_path: Path) -> None:
    result, out = convert(tmp_path, HAMI_DEFAULTS)
    assert yaml.safe_load(out.read_text()) == {}, "HAMi's defaults: pyhami's defaults apply"
    lines = report(result)
    for leaf in leaves(HAMI_DEFAULTS):  # a map value (labels, selectors) is one key
        covering = [key for key in lines if leaf == key or leaf.startswith(f"{key}.")]
        assert len(covering) == 1, f"{leaf} reported as {covering}"
    assert len(result.stderr.splitlines()) == len(lines) + 1, "no key reported twice"
    verdicts = {line.split()[0] for line in lines.values()}
    assert verdicts == {"mapped", "changed", "dropped"}
    assert "dropped" not in lines["scheduler.leaderElect"]
    assert lines["global.imageTag"].startswith("dropped  global.imageTag: pyhami runs one image")
    assert lines["devicePlugin.extraEnvs"] == (
        "changed  devicePlugin.extraEnvs: a map in HAMi (which its template cannot render), a "
        "list of {name, value} here (HAMi's default: not written)")
    summary = result.stderr.splitlines()[-1]
    assert summary.startswith(f"{len(lines)} HAMi keys: ") and summary.endswith(
        "0 values differ from HAMi's defaults, written")
    helm("lint", "--strict", str(CHART), "-f", str(out))


def customised() -> dict[str, Any]:
    values = yaml.safe_load(HAMI_VALUES.read_text())
    values["global"]["imageTag"] = "v2.10.1"
    values["scheduler"]["nodeLabelSelector"] = {"gpu": "on"}
    values["scheduler"]["defaultSchedulerPolicy"]["gpuSchedulerPolicy"] = "binpack"
    values["scheduler"]["patch"]["imageNew"]["tag"] = "v1.1.2"
    values["scheduler"]["admissionWebhook"]["whitelistNamespaces"] = ["kube-system"]
    values["devicePlugin"]["deviceSplitCount"] = 4
    values["devicePlugin"]["extraEnvs"] = {"HEALTH_RECOVERY_SECONDS": 60}
    values["devicePlugin"]["monitor"]["extraEnvs"] = [{"name": "X", "value": "1"}]
    values["devicePlugin"]["nodeConfiguration"]["config"] = '{"nodeconfig": []}\n'
    values["mluResourceName"] = "cambricon.com/mlu"
    values["somethingElse"] = {"nested": 1}
    return values


def test_customised_values_are_carried_over_and_render(tmp_path: Path) -> None:
    result, out = convert(tmp_path, customised())
    written = yaml.safe_load(out.read_text())
    assert written == {
        "scheduler": {
            "nodeLabelSelector": {"gpu": "on"},
            "defaultSchedulerPolicy": {"gpuSchedulerPolicy": "binpack"},
            "patch": {"image": {"tag": "v1.1.2"}},
            "admissionWebhook": {"whitelistNamespaces": ["kube-system"]},
        },
        "devicePlugin": {
            "deviceSplitCount": 4,
            "extraEnvs": [{"name": "HEALTH_RECOVERY_SECONDS", "value": "60"}],
            "monitor": {"extraEnvs": [{"name": "X", "value": "1"}]},
            "nodeConfiguration": {"config": '{"nodeconfig": []}\n'},
        },
    }
    lines = report(result)
    assert lines["global.imageTag"].endswith("(your value is not carried over)")
    assert lines["mluResourceName"].endswith("(your value is not carried over)")
    assert lines["scheduler.patch.imageNew.tag"] == (
        "changed  scheduler.patch.imageNew.tag -> scheduler.patch.image.tag: the cert Job's image")
    assert lines["somethingElse.nested"] == (
        "dropped  somethingElse.nested: not a key of HAMi v2.10's chart, nor of pyhami's")
    helm("lint", "--strict", str(CHART), "-f", str(out))
    text = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(out))
    rendered = Rendered(tuple(doc for doc in yaml.safe_load_all(text) if doc))
    plugin = rendered.one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "HEALTH_RECOVERY_SECONDS", "value": "60"} in plugin["env"]
    assert "--node-label-selector=gpu=on" in " ".join(
        arg for _, c in rendered.containers() for arg in (*c.get("command", ()), *c.get("args", ()))
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [("a: [unclosed\n", "not valid YAML"), ("- 1\n", "expected a mapping of values, got list")],
)
def test_bad_input_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(content)
    result = CliRunner().invoke(app, ["chart", "convert-values", str(path)])
    assert result.exit_code == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_stdin_and_stdout() -> None:
    result = CliRunner().invoke(app, ["chart", "convert-values", "-", "-q"],
                                input="devicePlugin:\n  deviceSplitCount: 3\n")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == {"devicePlugin": {"deviceSplitCount": 3}}
    assert result.stderr == (
        "1 HAMi keys: 1 mapped, 0 changed, 0 dropped; 1 values differ from HAMi's defaults, "
        "written\n")
