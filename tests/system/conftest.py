"""The built libvgpu, its stub driver and the test driver program, made once per session."""

from pathlib import Path

import pytest

from pyhami.testing.native_build import Native, NativeBuildError, build_native

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native" / "libvgpu"
__all__ = ["NATIVE", "ROOT", "Native"]


@pytest.fixture(scope="session")
def native() -> Native:
    try:
        return build_native(NATIVE)
    except NativeBuildError as err:
        pytest.fail(str(err))
