"""The project's own static checks run as part of the one test command."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run(sys.executable, "-m", "mypy", "src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers_point_down() -> None:
    lint_imports = shutil.which("lint-imports")
    if lint_imports is None:
        pytest.fail("import-linter is part of the dev install; run pip install -e '.[dev]'")
    result = _run(lint_imports)
    assert result.returncode == 0, result.stdout + result.stderr


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "native/libvgpu/README.md",
]
# Where a doc's short paths start: the repository, the package, the native library, the chart.
DOC_PATH_BASES = [ROOT, ROOT / "src/pyhami", ROOT / "native/libvgpu", ROOT / "charts/pyhami"]
SOURCE_SUFFIXES = (".py", ".md", ".c", ".h", ".proto", ".yaml", ".json", ".map", ".sh", ".tpl")


def repository_paths_named_in(doc: Path) -> set[str]:
    """Backticked relative file paths: `a/b.py`, not `/usr/local/...`, `<podUID>/...` or globs.

    `shared/spec/...` is the specification the code cites, kept beside the repository.
    """
    names = set()
    for token in re.findall(r"`([^`\s]+)`", doc.read_text()):
        path = token.split(":")[0].rstrip(",.")
        if (
            "/" in path
            and path.endswith(SOURCE_SUFFIXES)
            and not re.search(r"^/|^shared/|[<>*{$]", path)
        ):
            names.add(path)
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_file_a_doc_names_exists(doc: Path) -> None:
    missing = [
        path
        for path in sorted(repository_paths_named_in(doc))
        if not any((base / path).exists() for base in DOC_PATH_BASES)
    ]
    assert not missing, f"{doc.name} names files that are not in the repository: {missing}"
