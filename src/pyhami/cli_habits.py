"""kubectl's habits for every pyhami command: `-h`, `--version`, `-o`, `-n`, `-f -`.

`PyhamiGroup` gives every sub-command (nested ones too) the root's `--version`; the option
types here are shared by the commands that print data or name pods.
"""

import copy
import json
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from typer.core import TyperGroup

from pyhami.logs import LOG_FORMAT_ENV, LogFormat
from pyhami.protocol import GpuPolicy


class Output(StrEnum):
    JSON = "json"
    YAML = "yaml"
    TABLE = "table"
    WIDE = "wide"


OutputOption = Annotated[
    Output, typer.Option("-o", "--output", help="json, yaml, table or wide (more columns)")
]
NamespaceOption = Annotated[
    str | None,
    typer.Option("-n", "--namespace", metavar="NAMESPACE", help="the namespace of the pods named"),
]


DebugOption = Annotated[
    bool, typer.Option("--debug", help="debug logs, and a traceback on failure")
]
LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar=LOG_FORMAT_ENV,
        help="console (one line per record, key=value) or json (one object per line)",
    ),
]


def as_data(data: Any, output: Output) -> str:
    """`data` as JSON or YAML text, ending in a newline."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    if output is Output.YAML:  # through JSON: str enums and tuples become plain YAML
        return str(yaml.safe_dump(json.loads(text), sort_keys=False, allow_unicode=True))
    return text + "\n"


GPU_POLICY_METAVAR = "|".join(GpuPolicy) + "[,...]"


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML parse error on one line: what is wrong, and where."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(err).split())


def parse_gpu_policy(text: str | GpuPolicy) -> str:
    """A GPU policy as `hami.io/gpu-scheduler-policy` takes it: one name, or a comma chain of
    them (`binpack,numa`), checked so that a typo is named rather than silently ignored."""
    names = [item.strip() for item in str(text).split(",")]
    unknown = [name for name in names if name not in tuple(GpuPolicy)]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(repr(n) for n in unknown)} is not one of {', '.join(GpuPolicy)} "
            "(a chain such as binpack,numa is accepted)"
        )
    return ",".join(names)


def qualified_pod(pod: str, namespace: str | None) -> str:
    """NAME with `-n NAMESPACE` as NAMESPACE/NAME; NAMESPACE/NAME as it is."""
    if namespace is None or "/" in pod:
        if namespace is not None and not pod.startswith(f"{namespace}/"):
            raise typer.BadParameter(f"{pod} names another namespace than -n {namespace}")
        return pod
    return f"{namespace}/{pod}"


def command_group(name: str, help_text: str) -> typer.Typer:
    """A pyhami command group: plain help (long flags in full, no <bool> metavars), -h, and
    `--version` on every sub-command."""
    return typer.Typer(
        name=name,
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        cls=PyhamiGroup,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )


class PyhamiGroup(TyperGroup):
    """A command group whose sub-commands also take the root's `--version`."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        root_params = ctx.find_root().command.params
        version = next((p for p in root_params if p.name == "version"), None)
        if command is None or version is None or any(p.name == "version" for p in command.params):
            return command
        shared = copy.copy(version)
        shared.expose_value = False  # the command's function does not take it
        command.params.append(shared)
        return command


def show_version(value: bool) -> None:
    if value:
        from pyhami import __version__

        typer.echo(f"pyhami {__version__}")
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version", callback=show_version, is_eager=True, help="print the version and exit"
    ),
]
