"""Every `helm install` / `helm upgrade` command in docs/operator-guide.md renders, passes the
strict schemas, and does what the text around it says."""

from __future__ import annotations

import functools
import re
import shlex

import kubernetes_validate
import yaml

from pyhami.devices.config import parse_device_config

from .render import ROOT, Rendered, helm

GUIDE = (ROOT / "docs" / "operator-guide.md").read_text()


def guide_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE, flags=re.DOTALL)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("helm ")]


def set_pairs(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]


@functools.cache
def rendered_commands() -> list[tuple[list[str], Rendered]]:
    """Each command rendered as `helm template` would apply it; `--reuse-values` upgrades carry
    the --set values of the install before them, as helm does for a live release."""
    previous: list[str] = []
    out = []
    for argv in guide_commands():
        assert argv[1] in {"install", "upgrade"}, argv
        assert argv[3] == "charts/pyhami", argv
        pairs = (previous if "--reuse-values" in argv else []) + set_pairs(argv)
        if argv[1] == "install":
            previous = pairs
        namespace = argv[argv.index("-n") + 1]
        flags = [flag for pair in pairs for flag in ("--set", pair)]
        text = helm("template", argv[2], "charts/pyhami", "-n", namespace, *flags)
        out.append((argv, Rendered(tuple(d for d in yaml.safe_load_all(text) if d))))
    return out


def test_every_guide_command_renders_valid_objects() -> None:
    commands = rendered_commands()
    assert len(commands) >= 5
    for argv, rendered in commands:
        for obj in rendered.objects:
            if obj["apiVersion"].startswith(("cert-manager.io", "monitoring.coreos.com")):
                continue  # CRD kinds: their schemas are checked in test_chart_render
            kubernetes_validate.validate(obj, "1.29.0", strict=True)
        assert rendered.objects, argv


def test_the_migration_steps_install_what_the_text_says() -> None:
    by_line = {" ".join(argv): rendered for argv, rendered in rendered_commands()}
    step1 = next(r for line, r in by_line.items() if "scheduler.enabled=false" in line)
    assert not step1.of_kind("Deployment") and not step1.of_kind("MutatingWebhookConfiguration")
    selector = step1.one("DaemonSet")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"pyhami": "on"}  # HAMi's plugin keeps the gpu=on nodes
    step2 = next(r for line, r in by_line.items() if "scheduler.enabled=true" in line)
    assert step2.one("Deployment") and step2.one("MutatingWebhookConfiguration")
    assert step2.one("DaemonSet")["spec"]["template"]["spec"]["nodeSelector"] == selector
    cert_manager = next(r for line, r in by_line.items() if "certManager.enabled=true" in line)
    assert cert_manager.one("Certificate") and not cert_manager.of_kind("Job")
    ha = next(r for line, r in by_line.items() if "replicas=3" in line)
    assert ha.one("PodDisruptionBudget")


def test_the_core_policy_upgrade_reaches_the_device_config_and_rolls_the_pods() -> None:
    commands = rendered_commands()
    by_line = {" ".join(argv): rendered for argv, rendered in commands}
    upgrade = next(r for line, r in by_line.items() if "gpuCorePolicy=force" in line)
    text = upgrade.one("ConfigMap", "-device")["data"]["device-config.yaml"]
    assert parse_device_config(text).nvidia.gpu_core_policy == "force"
    install = next(
        r for argv, r in commands if argv[1] == "install" and "scheduler.replicas=3" in argv
    )
    key = "checksum/hami-scheduler-device-config"
    for kind in ("Deployment", "DaemonSet"):
        before = install.one(kind)["spec"]["template"]["metadata"]["annotations"][key]
        assert upgrade.one(kind)["spec"]["template"]["metadata"]["annotations"][key] != before
