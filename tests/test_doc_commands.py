"""Every `pyhami` command in the fenced shell blocks of the README and the guides runs as
written, offline, against the demo's cluster (dumped as `kubectl get nodes,pods -A -o yaml`
would) and the HAMi values fixture; where a block shows a command's output, the output matches.
Commands that cannot run here are listed with the reason, so a new one is never silently skipped.
"""

import asyncio
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.kube.resources import NODES, PODS
from pyhami.sim.demo.cluster import DemoCluster
from pyhami.sim.demo.pods import load_pods
from pyhami.sim.demo.run import submit_all
from pyhami.sim.demo.settings import DemoSettings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/user-guide.md", "docs/operator-guide.md", "docs/from-hami.md",
        "docs/protocol.md")
HAMI_VALUES = ROOT / "tests" / "chart" / "fixtures" / "hami-v2.10-values.yaml"
# Synopses (a placeholder in capitals as a word, an [--option]) cannot run as written.
PLACEHOLDER = re.compile(r"[A-Z][A-Z_/]+|\[--.*")


def is_synopsis(command: str) -> bool:
    return any(PLACEHOLDER.fullmatch(word) for word in shlex.split(command))


def shell_blocks(text: str) -> Iterator[list[str]]:
    """The lines of each fenced block whose language is a shell's, a transcript's or none."""
    block: list[str] | None = None
    shell = False
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            if block is None:
                block, shell = [], fence[3:] in ("", "bash", "sh", "text", "console")
            else:
                if shell:
                    yield block
                block = None
        elif block is not None:
            block.append(line)


def doc_commands() -> Iterator[tuple[str, str, list[str]]]:
    """(doc, command line, the output lines the doc shows after it)."""
    for doc in DOCS:
        for block in shell_blocks((ROOT / doc).read_text()):
            lines = [line.strip() for line in block]
            for number, line in enumerate(lines):
                command = line.removeprefix("$ ")
                if not command.startswith("pyhami "):
                    continue
                shown = []
                if line.startswith("$ "):  # a transcript: the output follows, up to the next $
                    for following in lines[number + 1:]:
                        if following.startswith("$ "):
                            break
                        shown.append(following)
                yield doc, command.split("  #")[0].strip(), shown


COMMANDS = list(doc_commands())
RUNNABLE = [c for c in COMMANDS if not is_synopsis(c[1])]


def test_the_docs_have_commands_to_run() -> None:
    assert {command for _, command, _ in RUNNABLE} >= {
        "pyhami demo",
        "pyhami explain default/wants-an-h100 -f cluster.yaml",
        "pyhami simulate -f cluster.yaml -o table",
        "pyhami chart convert-values hami-values.yaml --out pyhami-values.yaml",
    }
    synopses = {command for _, command, _ in COMMANDS} - {c for _, c, _ in RUNNABLE}
    assert synopses == {
        "pyhami annotations decode KEY VALUE [--table]",
        "pyhami annotations encode KEY JSON",
    }, "only synopses are left out"


async def _dump_demo(path: Path) -> None:
    """The demo's cluster after its example pods, as `kubectl get nodes,pods -A -o yaml`."""
    async with DemoCluster(DemoSettings()) as cluster:
        await submit_all(cluster, load_pods())
        nodes = await cluster.client.list(NODES)
        pods = await cluster.client.list(PODS)
    items = [{"apiVersion": "v1", "kind": "Node", **n} for n in nodes.items] + [
        {"apiVersion": "v1", "kind": "Pod", **p} for p in pods.items
    ]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("docs")
    asyncio.run(_dump_demo(where / "cluster.yaml"))
    (where / "hami-values.yaml").write_text(HAMI_VALUES.read_text())
    return where


@pytest.mark.parametrize(("doc", "command", "shown"), RUNNABLE,
                         ids=[f"{d}: {c}" for d, c, _ in RUNNABLE])
def test_doc_command_runs(
    doc: str, command: str, shown: list[str], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, f"{doc}: {command}\n{result.output}"
    if shown:
        assert result.stdout.splitlines() == shown, f"{doc} shows other output for {command}"
