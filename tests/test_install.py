"""`pip install .` without the dev extras is enough for the demo and the services: every
third-party module the package imports comes from a declared runtime dependency, and the wheel
carries the package data and both console scripts."""

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return match.group(0).lower().replace("_", "-")


def imported_modules() -> set[str]:
    modules = set()
    for path in (ROOT / "src" / "pyhami").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"pyhami"}


def test_every_import_is_a_runtime_dependency() -> None:
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    providers = packages_distributions()
    missing = {}
    for module in sorted(imported_modules()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & runtime:
            missing[module] = sorted(dists)
    assert missing == {}, "imported by src/pyhami but only installed with the dev extras"


def test_the_wheel_has_the_data_and_the_commands(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("pyhami-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names
                            if n.endswith("entry_points.txt"))
    assert {"pyhami/sim/demo/pods.yaml", "pyhami/py.typed",
            "pyhami/deviceplugin/api/api.proto"} <= names
    assert "pyhami = pyhami.cli:main" in entry_points
    assert "kubectl-pyhami = pyhami.cli:kubectl_plugin" in entry_points
