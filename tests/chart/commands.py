"""The pyhami command line as click parses it, for checking what the chart and the image run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from unittest import mock

import typer
import typer.core
import typer.main

from pyhami.cli import app
from pyhami.monitor.settings import parse_flags
from pyhami.scheduler.cli import _settings
from pyhami.scheduler.settings import SchedulerSettings


def pyhami_command() -> typer.core.TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return group


def parse_pyhami(argv: list[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parse with the real typer/click command, without running it; errors fail the test.

    `env`: the container's environment, which options with an envvar read as kubelet sets it.
    """
    group = pyhami_command()
    parent = typer.Context(group, info_name="pyhami")
    sub = group.get_command(parent, argv[1])
    assert sub is not None, f"no pyhami command {argv[1]!r}"
    with mock.patch.dict(os.environ, env or {}):
        ctx = sub.make_context(argv[1], argv[2:], parent=parent)
    if argv[1] == "monitor":
        flags = parse_flags(ctx.args)
        return {
            "metrics_bind_address": flags.metrics_bind_address,
            "legacy_metrics": flags.legacy_metrics,
            "verbosity": flags.verbosity,
        }
    return dict(ctx.params)


def scheduler_settings(argv: list[str], env: Mapping[str, str]) -> SchedulerSettings:
    """What `pyhami scheduler` would run with: its flags and the container's environment
    (HAMI_NODELOCK_EXPIRE, POD_NAME, ...), checked as at start-up."""
    params = parse_pyhami(argv, env)
    flags = {k: v for k, v in params.items() if k not in ("debug", "verbosity")}
    with mock.patch.dict(os.environ, {"POD_NAME": "scheduler-0", **env}):
        return _settings(**flags)
