"""What can be checked of the Dockerfile without a Docker daemon (the image is never built here):
its COPY sources exist and survive .dockerignore, libvgpu lands where the chart copies it from,
the Makefile target it runs exists, and the image's entrypoint runs commands our CLI has."""

from __future__ import annotations

import fnmatch
import json
import shlex
from pathlib import Path

from .commands import pyhami_command
from .render import ROOT, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = DOCKERFILE.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def ignored(path: str) -> bool:
    """.dockerignore semantics for the patterns used: last match wins, `!` re-includes."""
    verdict = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or any(
            fnmatch.fnmatch(part, pattern) for part in parts if "/" not in pattern
        ):
            verdict = not negate
    return verdict


def copies() -> list[tuple[str | None, list[str], str]]:
    """(from-stage or None, sources, destination) of every COPY."""
    found = []
    for name, rest in instructions():
        if name != "COPY":
            continue
        words = shlex.split(rest)
        stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
        paths = [w for w in words if not w.startswith("--")]
        found.append((stage, paths[:-1], paths[-1]))
    return found


def test_every_context_copy_source_exists_and_is_not_ignored() -> None:
    context = [(sources, dest) for stage, sources, dest in copies() if stage is None]
    assert context
    for sources, _ in context:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY source {source} missing"
            assert not ignored(source), f"COPY source {source} excluded by .dockerignore"
    # The wheel build needs the package sources; the native build its C sources.
    for needed in ("src/pyhami/cli.py", "native/libvgpu/src", "native/libvgpu/Makefile"):
        assert not ignored(needed), needed
    assert ignored("native/libvgpu/build/libvgpu.so")
    assert ignored("tests/chart/test_dockerfile.py")


def test_stages_named_in_copy_from_exist() -> None:
    stages = {
        rest.split()[-1] for name, rest in instructions() if name == "FROM" and " AS " in rest
    }
    used = {stage for stage, _, _ in copies() if stage is not None}
    assert used and used <= stages


def test_libvgpu_is_built_by_a_real_make_target_and_lands_where_the_chart_copies_it() -> None:
    makefile = (ROOT / "native" / "libvgpu" / "Makefile").read_text()
    (make,) = [rest for name, rest in instructions() if name == "RUN" and "make " in rest]
    words = shlex.split(make)
    target = words[words.index("-C") + 2]
    assert f"\n{target}:" in makefile
    build = next(w.split("=", 1)[1] for w in words if w.startswith("BUILD="))
    assert "LIB := $(BUILD)/libvgpu.so" in makefile
    (lib_copy,) = [(s, d) for stage, s, d in copies() if stage == "libvgpu"]
    assert lib_copy == ([f"{build}/libvgpu.so"], "/opt/pyhami/lib/libvgpu.so")
    script = next(
        c["command"][2] for _, c in render("defaults").containers() if c["name"] == "device-plugin"
    )
    assert shlex.split(script)[2] == lib_copy[1]


def test_entrypoint_and_chart_commands_are_pyhami_commands() -> None:
    (entrypoint,) = [json.loads(rest) for name, rest in instructions() if name == "ENTRYPOINT"]
    assert entrypoint == ["pyhami"]
    commands = set(pyhami_command().commands)
    used = set()
    for _, container in render("defaults").containers():
        argv = [*container.get("command", ()), *container.get("args", ())]
        if "pyhami" in argv:
            used.add(argv[argv.index("pyhami") + 1])
    assert used == {"scheduler", "device-plugin", "monitor"}
    assert used <= commands


def test_the_image_runs_as_a_non_root_user_the_chart_can_require() -> None:
    users = [rest for name, rest in instructions() if name == "USER"]
    assert users and users[-1].isdigit() and users[-1] != "0"
    extender = next(
        c for _, c in render("defaults").containers() if c["name"] == "vgpu-scheduler-extender"
    )
    assert extender["securityContext"]["runAsNonRoot"] is True
    port = next(p["containerPort"] for p in extender["ports"] if p["name"] == "http")
    assert port >= 1024, "a non-root extender cannot bind a privileged port"
