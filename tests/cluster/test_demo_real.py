"""`pyhami demo --control-plane real`: the demo's pods on Kubernetes' own control plane, and
`--keep-running` hands the user a kubeconfig for the built kubectl."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from pyhami.controlplane import BuiltBinaries
from pyhami.testing.native_build import Native

PYHAMI = (sys.executable, "-c", "from pyhami.cli import main; main()")
ENVIRONMENT = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_the_demo_runs_its_pods_on_kubernetes_own_control_plane(
    kubernetes: BuiltBinaries,
) -> None:
    """(test_parity.py holds each pod's outcome equal to the embedded control plane's.)"""
    # its own process, as a user runs it (the command sets up logging for the whole process)
    demo = subprocess.run(
        [*PYHAMI, "demo", "--control-plane", "real"],
        capture_output=True, text=True, check=False, env=ENVIRONMENT, timeout=240,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Kubernetes' own control plane" in demo.stdout
    assert "(kube-apiserver v1.37.2, etcd, kube-controller-manager;" in demo.stdout
    assert "  ok   two-whole-cards        -> gpu-node-2, 2 cards" in demo.stdout
    assert "15 pods: 13 running, 2 not schedulable" in demo.stdout
    # the reason comes from Kubernetes' kube-scheduler, carrying our words
    assert "kube-scheduler: 0/3 nodes are available: 3 4/4 CardInsufficientMemory." in demo.stdout
    assert demo.stderr == "", "the services' logs stay quiet unless --verbose"


def test_the_demo_in_dra_mode_shows_each_pods_claimed_cards_and_their_use(
    kubernetes: BuiltBinaries, native: Native,
) -> None:
    """Every GPU node runs the DRA driver: kube-scheduler places the translated pods, and the
    table shows the cards their claims were given and the use the node's monitor exports (the
    demo runs each pod's program under the checkout's built libvgpu, so `native` builds it)."""
    demo = subprocess.run(
        [*PYHAMI, "demo", "--control-plane", "real", "--mode", "dra"],
        capture_output=True, text=True, check=False, env=ENVIRONMENT, timeout=240,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # kube-scheduler picks among nodes and cards that fit alike, so rows may name any of them
    row = re.search(
        r"^two-whole-cards +dra-node-\d +\S+ +#\d +(\d+) MiB +100% +Running +(\d+)/(\d+) MiB$",
        demo.stdout,
        re.MULTILINE,
    )
    assert row is not None, demo.stdout
    card, used, limit = (int(group) for group in row.groups())
    assert limit == 2 * card, "a whole card's memory on each of the two cards"
    assert used > 0, "the monitor on the DRA node exported the workload's use"
    assert re.search(r"^slice-3g-30pct +dra-node-\d .* 3000 MiB +30% +Running", demo.stdout, re.M)
    for too_much in ("too-big-200g", "wants-an-h100"):
        assert re.search(rf"^{too_much} +- +- +not scheduled$", demo.stdout, re.M), demo.stdout
    assert "(no GPU)" not in demo.stdout


def test_keep_running_prints_the_admin_kubeconfig_for_kubectl(kubernetes: BuiltBinaries) -> None:
    command = [*PYHAMI, "demo", "--nodes", "1", "--control-plane", "real", "--keep-running"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENVIRONMENT
    ) as demo:
        assert demo.stdout is not None
        try:
            kubeconfig = _kubeconfig_line(demo.stdout)
            done = subprocess.run(
                [str(kubernetes.path("kubectl")), f"--kubeconfig={kubeconfig}", "get", "pods"],
                capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "slice-3g-30pct" in done.stdout
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(timeout=60)
    assert demo.returncode == 0
    assert not kubeconfig.exists()  # Ctrl-C removed the cluster and its folder


def _kubeconfig_line(output: IO[str], timeout_s: float = 120) -> Path:
    """The path on the first output line that names the kubeconfig."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = output.readline()
        assert line, "the demo ended early:\n" + "".join(seen)
        seen.append(line)
        if "kubeconfig" in line:
            path = Path(line.split()[-1])
            assert path.is_file(), "".join(seen)
            return path
    raise AssertionError("no kubeconfig line:\n" + "".join(seen))
