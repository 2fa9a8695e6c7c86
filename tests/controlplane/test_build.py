"""`pyhami control-plane build` against a stand-in `go` command: the wrapper module, reuse,
progress and the one-line errors. (The real build is exercised by tests/cluster.)"""

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyhami.cli import app
from pyhami.controlplane.build import (
    BINARIES,
    BuildError,
    default_cache_root,
    find_built,
    staging_modules,
    staging_version,
    version_ldflags,
    wrapper_gomod,
)

KUBERNETES_GOMOD = """\
module k8s.io/kubernetes

go 1.26.0

require (
\tgo.etcd.io/etcd/client/v3 v3.7.0
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

require (
\tgo.etcd.io/etcd/server/v3 v3.7.0 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
\tgithub.com/example/forked => github.com/example/forked v1.2.3
)
"""

# A stand-in for the Go command: answers `env GOVERSION`, `mod download -json` and `build -o`
# as the real one does, or fails the way FAKE_GO_FAIL says; every call is logged.
FAKE_GO = """\
#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
fail = os.environ.get("FAKE_GO_FAIL", "")
if args[:2] == ["env", "GOVERSION"]:
    print("go1.26.8")
elif args[:2] == ["mod", "download"]:
    if fail == "fetch":
        print(json.dumps({{"Path": "k8s.io/kubernetes", "Error": "k8s.io/kubernetes@v1.37.2: "
              "reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.37.2.info: "
              "404 Not Found\\n\\tserver response: not found"}}))
        sys.exit(1)
    print(json.dumps({{"Path": "k8s.io/kubernetes", "GoMod": os.environ["FAKE_GO_GOMOD"]}}))
elif args[:1] == ["build"]:
    if fail == "build-fetch":
        print("go: downloading k8s.io/api v0.37.2")
        print("go: k8s.io/api@v0.37.2: reading https://proxy.golang.org/k8s.io/api/@v/v0.37.2.zip:"
              " dial tcp: lookup proxy.golang.org: no such host")
        sys.exit(1)
    if fail == "compile":
        print("# k8s.io/kubernetes/cmd/kube-apiserver")
        print("cmd/kube-apiserver/apiserver.go:10:2: undefined: app")
        sys.exit(1)
    target = args[args.index("-o") + 1]
    with open(target, "w") as out:
        out.write("#!/bin/sh\\n")
    os.chmod(target, 0o755)
"""


@pytest.fixture
def fake_go(tmp_path: Path) -> dict[str, str]:
    tools = tmp_path / "tools"
    tools.mkdir()
    go = tools / "go"
    go.write_text(FAKE_GO.format(python=sys.executable))
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    gomod = tmp_path / "kubernetes.mod"
    gomod.write_text(KUBERNETES_GOMOD)
    return {
        "PATH": str(tools),
        "FAKE_GO_LOG": str(tmp_path / "go-calls.log"),
        "FAKE_GO_GOMOD": str(gomod),
        "HOME": str(tmp_path / "home"),
        "PYHAMI_CACHE": str(tmp_path / "cache"),
        "XDG_CACHE_HOME": "",
        "GOFLAGS": "",
    }


def go_calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["FAKE_GO_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run_build(env: dict[str, str], *args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(app, ["control-plane", "build", *args], env=env)
    return result.exit_code, result.stdout.splitlines(), result.stderr


def test_the_wrapper_pins_every_staging_module_to_the_matching_release() -> None:
    gomod = wrapper_gomod("v1.37.2", KUBERNETES_GOMOD)
    assert "go 1.26.0\n" in gomod
    assert "\tk8s.io/kubernetes v1.37.2\n" in gomod
    # etcd at the server release Kubernetes' go.mod requires
    assert "\tgo.etcd.io/etcd/server/v3 v3.7.0\n" in gomod
    for name in ("k8s.io/api", "k8s.io/client-go", "k8s.io/kube-scheduler"):
        assert f"\t{name} => {name} v0.37.2\n" in gomod
    # only the staging replaces: the fork is Kubernetes' business, not a module to pin
    assert "github.com/example/forked" not in gomod
    assert staging_modules(KUBERNETES_GOMOD) == [
        "k8s.io/api",
        "k8s.io/client-go",
        "k8s.io/kube-scheduler",
    ]


@pytest.mark.parametrize(
    ("release", "staging"),
    [("v1.37.2", "v0.37.2"), ("v1.40.0-rc.1", "v0.40.0-rc.1"), ("v1.9.11", "v0.9.11")],
)
def test_staging_releases_follow_the_kubernetes_release(release: str, staging: str) -> None:
    assert staging_version(release) == staging


@pytest.mark.parametrize("bad", ["1.37.2", "v2.0.0", "v1.37", "latest", "v1.37.2; rm -rf /"])
def test_a_version_that_is_not_a_release_is_refused(bad: str) -> None:
    with pytest.raises(BuildError, match="is not a release"):
        staging_version(bad)


def test_a_go_mod_without_staging_modules_or_etcd_is_refused() -> None:
    with pytest.raises(BuildError, match="names no staging module"):
        wrapper_gomod("v1.37.2", "module k8s.io/kubernetes\n\ngo 1.26.0\n")
    no_etcd = KUBERNETES_GOMOD.replace("go.etcd.io/etcd/server/v3", "go.etcd.io/other")
    with pytest.raises(BuildError, match=r"requires no go\.etcd\.io/etcd/server/v3"):
        wrapper_gomod("v1.37.2", no_etcd)


def test_binaries_report_their_release() -> None:
    flags = version_ldflags("v1.37.2")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.37.2" in flags
        assert f"-X {package}.gitMinor=37" in flags


def test_the_cache_root_follows_the_environment(tmp_path: Path) -> None:
    assert default_cache_root({"PYHAMI_CACHE": "/c"}) == Path("/c/control-plane")
    assert default_cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/pyhami/control-plane")
    home = default_cache_root({})
    assert home == Path.home() / ".cache" / "pyhami" / "control-plane"


def test_a_build_makes_every_binary_then_reuses_them(fake_go: dict[str, str]) -> None:
    code, lines, _ = run_build(fake_go)
    assert code == 0
    folder = Path(fake_go["PYHAMI_CACHE"]) / "control-plane" / "v1.37.2"
    assert lines[-1] == str(folder / "bin")
    for name in BINARIES:
        assert os.access(folder / "bin" / name, os.X_OK)
        assert any(line.startswith(f"{name}: built in ") for line in lines)
    builds = [call for call in go_calls(fake_go) if call[0] == "build"]
    assert [call[-1] for call in builds] == list(BINARIES.values())
    assert all("-trimpath" in call for call in builds)
    gomod = (folder / "module" / "go.mod").read_text()
    assert gomod == wrapper_gomod("v1.37.2", KUBERNETES_GOMOD)
    assert find_built("v1.37.2", folder.parent) is not None

    # Reused without calling Go at all: a machine without go runs the tests once built.
    Path(fake_go["FAKE_GO_LOG"]).unlink()
    code, lines, _ = run_build({**fake_go, "PATH": "/nonexistent"})
    assert code == 0
    assert lines[-1] == str(folder / "bin")
    assert sum("reused" in line for line in lines) == len(BINARIES)
    assert go_calls(fake_go) == []


def test_only_what_is_missing_is_built(fake_go: dict[str, str]) -> None:
    assert run_build(fake_go)[0] == 0
    folder = Path(fake_go["PYHAMI_CACHE"]) / "control-plane" / "v1.37.2"
    (folder / "bin" / "kube-scheduler").unlink()
    Path(fake_go["FAKE_GO_LOG"]).unlink()
    assert run_build(fake_go)[0] == 0
    builds = [call for call in go_calls(fake_go) if call[0] == "build"]
    assert [call[-1] for call in builds] == [BINARIES["kube-scheduler"]]


def test_a_cache_dir_flag_wins(fake_go: dict[str, str], tmp_path: Path) -> None:
    code, lines, _ = run_build(fake_go, "--cache-dir", str(tmp_path / "elsewhere"))
    assert code == 0
    assert lines[-1] == str(tmp_path / "elsewhere" / "v1.37.2" / "bin")


def test_no_go_is_one_clear_line_and_exit_2(fake_go: dict[str, str]) -> None:
    code, _, err = run_build({**fake_go, "PATH": "/nonexistent"})
    assert code == 2
    assert err.strip().splitlines() == [
        "pyhami control-plane build: no `go` command on PATH: install Go "
        "(https://go.dev/dl/) to build Kubernetes' binaries"
    ]


def test_a_module_the_proxy_cannot_give_is_named(fake_go: dict[str, str]) -> None:
    code, _, err = run_build({**fake_go, "FAKE_GO_FAIL": "fetch"})
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(
        "pyhami control-plane build: cannot fetch module k8s.io/kubernetes@v1.37.2: "
    )
    assert line.endswith("404 Not Found server response: not found")


def test_a_dependency_the_build_cannot_download_is_named(fake_go: dict[str, str]) -> None:
    code, _, err = run_build({**fake_go, "FAKE_GO_FAIL": "build-fetch"})
    assert code == 2
    [line] = err.strip().splitlines()
    assert "kube-apiserver: cannot fetch a module: go: k8s.io/api@v0.37.2: reading" in line
    assert "build.log" in line
    folder = Path(fake_go["PYHAMI_CACHE"]) / "control-plane" / "v1.37.2"
    assert find_built("v1.37.2", folder.parent) is None


def test_a_compile_error_names_its_line(fake_go: dict[str, str]) -> None:
    code, _, err = run_build({**fake_go, "FAKE_GO_FAIL": "compile"})
    assert code == 2
    [line] = err.strip().splitlines()
    assert "kube-apiserver: go build failed: cmd/kube-apiserver/apiserver.go:10:2" in line
