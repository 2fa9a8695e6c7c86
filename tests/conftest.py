"""What every test shares: a command that sets up logging for its process (pyhami's CLI does, once
per process) must not change logging for the tests that run after it in this one; the built
libvgpu for the tests that run a real process under it (system and cluster tiers)."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from pyhami.testing.native_build import Native, NativeBuildError, build_native

NATIVE = Path(__file__).resolve().parents[1] / "native" / "libvgpu"


@pytest.fixture(scope="session")
def native() -> Native:
    """The built libvgpu, its stub driver and the test driver program, made once per session."""
    try:
        return build_native(NATIVE)
    except NativeBuildError as err:
        pytest.fail(str(err))


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    structlog_config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
    structlog.configure(**structlog_config)
