"""The real-control-plane tier: Kubernetes' own binaries, built (or reused) once per session.

Never skipped: without the binaries the session builds them with `pyhami control-plane build`
(which needs Go and the Go module proxy the first time); a build that fails fails the tests."""

import pytest

from pyhami.controlplane import BuildError, BuiltBinaries, build_control_plane


@pytest.fixture(scope="session")
def kubernetes() -> BuiltBinaries:
    lines: list[str] = []
    try:
        return build_control_plane(progress=lines.append)
    except BuildError as err:
        pytest.fail(f"pyhami control-plane build failed: {err}\n" + "\n".join(lines))
