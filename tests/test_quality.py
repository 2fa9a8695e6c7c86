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
    """Backticked relative file paths: `a/b.py`, not `/usr/local/...`, `<podUID>/...` or globs."""
    names = set()
    for token in re.findall(r"`([^`\s]+)`", doc.read_text()):
        path = token.split(":")[0].rstrip(",.")
        if (
            "/" in path
            and path.endswith(SOURCE_SUFFIXES)
            and not re.search(r"^/|[<>*{$]", path)
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


# HAMi's behaviour was specified outside this repository; the code states the facts it relies on
# and docs/hami-compatibility.md gathers them. A reference to that outside text (its section
# signs, its folder, its file names, its numbered HAMi deviations) means nothing to a reader here.
OUTSIDE_SPEC_FILES = (
    "device-plugin", "dra", "hami-core", "landscape", "nvidia-fit-score", "ops", "protocol",
    "scheduler", "monitor", "libvgpu", "webhook",
)
OUTSIDE_SPEC_REFERENCES = re.compile(
    "\N{SECTION SIGN}"
    r"|shared/" "spec"
    r"|(?<![\w./-])(?P<file>(?:" + "|".join(map(re.escape, OUTSIDE_SPEC_FILES)) + r")\.md)\b"
    r"|\b(?:protocol|HAMi|bug|ambiguity)[ ]A\d{1,2}\b|\bA\d{1,2}(?= —)"
)
CHECKED_FOR_SPEC_REFERENCES = ["src", "tests", "docs", "native", "charts", "benchmarks", ".ci"]
TOP_LEVEL_TEXT = ["README.md", "pyproject.toml", "Dockerfile"]
NOT_TEXT = (".so", ".o", ".a", ".pyc", ".png", ".gz", ".tgz")


def _repository_text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_LEVEL_TEXT if (ROOT / name).exists()]
    for folder in CHECKED_FOR_SPEC_REFERENCES:
        files.extend(
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.is_file()
            and "__pycache__" not in path.parts
            and not path.name.endswith(NOT_TEXT)
        )
    return files


def spec_references_in(path: Path) -> list[str]:
    """`line: text` of every reference to the outside specification in one file.

    A file name counts only where it does not name a file beside the citing one (docs/ links
    each other by bare name, `docs/protocol.md` is this repository's own page).
    """
    data = path.read_bytes()
    if b"\0" in data:
        return []
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1)
        if any(
            match.group("file") is None or not (path.parent / match.group("file")).exists()
            for match in OUTSIDE_SPEC_REFERENCES.finditer(line)
        )
    ]


def test_nothing_cites_the_specification_kept_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in _repository_text_files()
        for hit in spec_references_in(path)
    ]
    assert not found, (
        "state the fact in a short comment or link a page of docs/ instead of citing the "
        f"outside specification ({len(found)}):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "# HAMi caches the value (\N{SECTION SIGN}9.4)",
        '"""Node lock (protocol' '.md 3.6)."""',
        "# the spec: shared" "/spec/ops" ".md",  # split, so that this file does not cite
        "One fix (HAMi bug 9.11 / protocol " "A10)",
        "trailing `;` growth (scheduler" ".md)",
        "* **A4" " — JSON `mode`.**",
    ],
)
def test_the_spec_reference_check_catches(text: str, tmp_path: Path) -> None:
    cited = tmp_path / "cited.py"
    cited.write_text(f"x = 1\n{text}\n")
    assert len(spec_references_in(cited)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "see docs/protocol.md",
        "an NVIDIA A10 or A100 card (A30, A100)",
        "README.md and docs/operator-guide.md",
    ],
)
def test_the_spec_reference_check_lets_through(text: str, tmp_path: Path) -> None:
    cited = tmp_path / "cited.py"
    cited.write_text(f"{text}\n")
    assert spec_references_in(cited) == []
