"""klog's `-v` flag as HAMi's charts pass it (`-v=4`, `--v=4`, `-v 4`), for typer commands.

Click reads `-v=4` as the short option `-v` with the attached value `=4`; the parser drops that
`=` so the spelling Go's flag package accepts works here too, and anything else that is not a
Go integer is refused with the flag named.
"""

from typing import Annotated

import typer

from pyhami.protocol.goparse import GoNumError, atoi


def parse_klog_verbosity(text: str | int) -> int:
    if isinstance(text, int):  # the default, which typer also hands to the parser
        return text
    try:
        level = atoi(text.removeprefix("="))
    except GoNumError as err:
        raise typer.BadParameter(str(err), param_hint="-v") from err
    if level < 0:
        raise typer.BadParameter(f"{level} is negative", param_hint="-v")
    return level


KlogVerbosity = Annotated[
    int,
    typer.Option(
        "-v",
        "--v",
        parser=parse_klog_verbosity,
        metavar="N",
        help="klog verbosity, as -v=N, --v=N or -v N (N >= 4: debug logs)",
    ),
]

DEBUG_VERBOSITY = 4
