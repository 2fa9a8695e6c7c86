"""Build Kubernetes' control-plane binaries and etcd from the Go module proxy, once per version.

The Go command refuses `go install k8s.io/kubernetes/cmd/...@v1.x`: the kubernetes module
replaces its `k8s.io/*` staging modules with folders of its own repository, and `go install
pkg@version` refuses any module with replace directives. So the build writes a small wrapper
module that requires `k8s.io/kubernetes` at the release and pins each staging module to the
matching `v0.<minor>.<patch>` release, and builds the commands inside it. etcd is built in the
same module, at the etcd server release Kubernetes' own go.mod requires, so one dependency
graph serves every binary.

Layout of a version's folder (`<cache root>/<kubernetes version>/`):

    module/   the wrapper module (go.mod, go.sum)
    bin/      kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd
    bin/.built.json   which version each binary was built at: a binary listed there is reused
    build.log         the Go command's output, named in any error
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyhami.controlplane.versions import KUBERNETES_VERSION

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_SERVER_MODULE = "go.etcd.io/etcd/server/v3"
WRAPPER_MODULE = "pyhami.local/controlplane"
# binary name -> the package whose main it is; etcd's main package is its server module's root.
BINARIES: Mapping[str, str] = {
    "kube-apiserver": f"{KUBERNETES_MODULE}/cmd/kube-apiserver",
    "kube-controller-manager": f"{KUBERNETES_MODULE}/cmd/kube-controller-manager",
    "kube-scheduler": f"{KUBERNETES_MODULE}/cmd/kube-scheduler",
    "kubectl": f"{KUBERNETES_MODULE}/cmd/kubectl",
    "etcd": ETCD_SERVER_MODULE,
}
STAMP = ".built.json"
HEARTBEAT_S = 30.0
_RELEASE = re.compile(r"^v1\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.MULTILINE)
_GO_DIRECTIVE = re.compile(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)
_GO_VERSION = re.compile(r"go(\d+)\.(\d+)(?:\.(\d+))?")
# How the Go command says a module could not be downloaded or verified.
_FETCH_FAILURE = re.compile(
    r"reading https?://|dial tcp|proxyconnect|no such host|unknown revision|"
    r"verifying .*: checksum mismatch|no matching versions|410 Gone|404 Not Found"
)

Progress = Callable[[str], None]


class BuildError(Exception):
    """The build cannot go on; the message is one line naming what is missing or failed."""


@dataclass(frozen=True, slots=True)
class BuiltBinaries:
    """The bin folder of one version, every binary in it built."""

    kubernetes_version: str
    bin_dir: Path

    def path(self, name: str) -> Path:
        if name not in BINARIES:
            raise KeyError(f"no control-plane binary {name!r}; known: {', '.join(BINARIES)}")
        return self.bin_dir / name


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$PYHAMI_CACHE/control-plane`, else `$XDG_CACHE_HOME/pyhami/control-plane`, else
    `~/.cache/pyhami/control-plane`."""
    env = os.environ if environ is None else environ
    if env.get("PYHAMI_CACHE"):
        return Path(env["PYHAMI_CACHE"]) / "control-plane"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "pyhami" / "control-plane"


def staging_version(kubernetes_version: str) -> str:
    """The staging modules' release for a Kubernetes release: v1.37.2 -> v0.37.2."""
    match = _RELEASE.match(kubernetes_version)
    if match is None:
        raise BuildError(
            f"Kubernetes version {kubernetes_version!r} is not a release like {KUBERNETES_VERSION}"
        )
    minor, patch, suffix = match.groups()
    return f"v0.{minor}.{patch}{suffix or ''}"


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The modules Kubernetes' go.mod replaces with its own staging folders."""
    return sorted(set(_STAGING.findall(kubernetes_gomod)))


def go_directive(gomod: str) -> str:
    match = _GO_DIRECTIVE.search(gomod)
    if match is None:
        raise BuildError("Kubernetes' go.mod has no `go` line")
    return match.group(1)


def required_version(gomod: str, module: str) -> str:
    """The version `gomod` requires of `module` (in a require block or a one-line require)."""
    match = re.search(
        rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod, flags=re.MULTILINE
    )
    if match is None:
        raise BuildError(f"Kubernetes' go.mod requires no {module}")
    return match.group(1)


def wrapper_gomod(kubernetes_version: str, kubernetes_gomod: str) -> str:
    """The wrapper module's go.mod for one Kubernetes release (given that release's go.mod)."""
    staging = staging_modules(kubernetes_gomod)
    if not staging:
        raise BuildError(
            f"{KUBERNETES_MODULE}@{kubernetes_version}'s go.mod names no staging module"
        )
    pinned = staging_version(kubernetes_version)
    etcd = required_version(kubernetes_gomod, ETCD_SERVER_MODULE)
    replaces = "".join(f"\t{name} => {name} {pinned}\n" for name in staging)
    return (
        f"{_header(kubernetes_version)}\n"
        f"module {WRAPPER_MODULE}\n\n"
        f"go {go_directive(kubernetes_gomod)}\n\n"
        "require (\n"
        f"\t{KUBERNETES_MODULE} {kubernetes_version}\n"
        f"\t{ETCD_SERVER_MODULE} {etcd}\n"
        ")\n\n"
        f"replace (\n{replaces})\n"
    )


def _header(kubernetes_version: str) -> str:
    return f"// Generated by `pyhami control-plane build` for Kubernetes {kubernetes_version}."


def version_ldflags(kubernetes_version: str) -> str:
    """-s -w, and the version Kubernetes' own release build stamps into its binaries."""
    match = _RELEASE.match(kubernetes_version)
    if match is None:
        raise BuildError(f"Kubernetes version {kubernetes_version!r} is not a release")
    values = {"gitVersion": kubernetes_version, "gitMajor": "1", "gitMinor": match.group(1)}
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in values.items()]
    return " ".join(flags)


# ----- what is built already -------------------------------------------------------------------


def _read_stamp(bin_dir: Path) -> dict[str, str]:
    try:
        stamp = json.loads((bin_dir / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in stamp.items()} if isinstance(stamp, dict) else {}


def _built(bin_dir: Path, kubernetes_version: str) -> set[str]:
    stamp = _read_stamp(bin_dir)
    return {
        name
        for name in BINARIES
        if stamp.get(name) == kubernetes_version and os.access(bin_dir / name, os.X_OK)
    }


def find_built(kubernetes_version: str, cache_root: Path) -> BuiltBinaries | None:
    """The version's binaries when every one is built already, else None."""
    bin_dir = cache_root / kubernetes_version / "bin"
    if _built(bin_dir, kubernetes_version) == set(BINARIES):
        return BuiltBinaries(kubernetes_version, bin_dir)
    return None


# ----- the Go command ---------------------------------------------------------------------------


def _go_command() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "no `go` command on PATH: install Go (https://go.dev/dl/) to build Kubernetes' binaries"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The wrapper's go.sum is filled in by the first build; GOTOOLCHAIN stays as the user set
    # it (by default an older go fetches the toolchain Kubernetes' go line asks for).
    env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} -mod=mod".strip()
    return env


def _run_go(go: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [go, *args], cwd=cwd, capture_output=True, text=True, check=False, env=_go_env()
    )


def _version_tuple(text: str) -> tuple[int, int, int]:
    match = _GO_VERSION.search(f"go{text}" if text[:1].isdigit() else text)
    if match is None:
        return (0, 0, 0)
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _check_go_version(go: str, needed: str, progress: Progress) -> None:
    done = _run_go(go, "env", "GOVERSION")
    have = done.stdout.strip()
    if done.returncode != 0 or not have:
        raise BuildError(f"`go env GOVERSION` failed: {_error_line(done.stderr)}")
    if _version_tuple(have) < (1, 21, 0):
        raise BuildError(f"{have} is too old: Kubernetes needs go {needed} (go1.21+ fetches it)")
    if _version_tuple(have) < _version_tuple(needed):
        progress(f"{have} is older than the go {needed} Kubernetes needs: go fetches it")


def _error_line(output: str) -> str:
    """The first line of Go's output that says what went wrong: not a download note, not a
    `# package` heading."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(("go: downloading", "go: finding", "#")):
            return line
    return lines[-1] if lines else "no output"


def _fetch_kubernetes_gomod(go: str, kubernetes_version: str, workdir: Path) -> str:
    """Kubernetes' go.mod at the release, fetched (with the module) through the Go proxy."""
    module = f"{KUBERNETES_MODULE}@{kubernetes_version}"
    done = _run_go(go, "mod", "download", "-json", module, cwd=workdir)
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        answer = {}
    if answer.get("Error") or done.returncode != 0 or not answer.get("GoMod"):
        why = answer.get("Error") or _error_line(done.stderr)
        raise BuildError(f"cannot fetch module {module}: {' '.join(str(why).split())}")
    return Path(answer["GoMod"]).read_text()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One build per version folder at a time (two test runs may start together); closing the
    file releases the lock."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _go_build(go: str, name: str, folder: Path, ldflags: str, progress: Progress) -> None:
    """`name` into the version folder's bin/, built in its module/, the output in build.log."""
    target = folder / "bin" / name
    log = folder / "build.log"
    command = [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(target), BINARIES[name]]
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, cwd=folder / "module", stdout=out, stderr=subprocess.STDOUT, env=_go_env()
        )
        while True:
            try:
                code = process.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                progress(f"{name}: still building ({_elapsed(time.monotonic() - started)})")
    if code != 0:
        section = log.read_text().rsplit("\n$ ", 1)[-1].split("\n", 1)[-1]
        fetch = [line.strip() for line in section.splitlines() if _FETCH_FAILURE.search(line)]
        if fetch:
            raise BuildError(f"{name}: cannot fetch a module: {fetch[0]} (full output: {log})")
        raise BuildError(f"{name}: go build failed: {_error_line(section)} (full output: {log})")
    progress(f"{name}: built in {_elapsed(time.monotonic() - started)}")


def build_control_plane(
    kubernetes_version: str = KUBERNETES_VERSION,
    cache_root: Path | None = None,
    progress: Progress = print,
) -> BuiltBinaries:
    """Build what is missing of the version's binaries; reuse the rest. Raises BuildError."""
    staging_version(kubernetes_version)  # a bad version fails before anything is fetched
    root = cache_root if cache_root is not None else default_cache_root()
    folder = root / kubernetes_version
    bin_dir = folder / "bin"
    with _locked(folder):
        done = _built(bin_dir, kubernetes_version)
        for name in BINARIES:
            if name in done:
                progress(f"{name}: built already for Kubernetes {kubernetes_version}, reused")
        missing = [name for name in BINARIES if name not in done]
        if missing:
            _build_missing(kubernetes_version, folder, missing, progress)
    return BuiltBinaries(kubernetes_version, bin_dir)


def _build_missing(
    kubernetes_version: str, folder: Path, missing: list[str], progress: Progress
) -> None:
    go = _go_command()
    started = time.monotonic()
    progress(f"fetching {KUBERNETES_MODULE}@{kubernetes_version} through the Go module proxy")
    kubernetes_gomod = _fetch_kubernetes_gomod(go, kubernetes_version, folder)
    _check_go_version(go, go_directive(kubernetes_gomod), progress)
    module_dir = folder / "module"
    module_dir.mkdir(exist_ok=True)
    gomod = module_dir / "go.mod"
    header = _header(kubernetes_version)
    # `-mod=mod` adds the dependency graph's requirements to go.mod; keep that once written.
    if not gomod.exists() or not gomod.read_text().startswith(header):
        gomod.write_text(wrapper_gomod(kubernetes_version, kubernetes_gomod))
        (module_dir / "go.sum").unlink(missing_ok=True)
    (module_dir / "wrapper.go").write_text(
        "// Package controlplane only holds the requirements; it has no code.\n"
        "package controlplane\n"
    )
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    ldflags = version_ldflags(kubernetes_version)
    for name in missing:
        progress(f"{name}: building {BINARIES[name]} (the first build takes many minutes)")
        _go_build(go, name, folder, ldflags, progress)
        stamp = _read_stamp(bin_dir)
        stamp[name] = kubernetes_version
        (bin_dir / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    progress(f"built {', '.join(missing)} in {_elapsed(time.monotonic() - started)}")
