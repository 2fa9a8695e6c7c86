"""One log format for every pyhami component: console (logfmt-like) or JSON, one line per record.

structlog loggers and the standard library's (aiohttp's access log, kubernetes-asyncio, grpc) go
through the same processors and the same handler on stderr. Values are written as they are; a
value with spaces, quotes or `=` is quoted the JSON way, never as a Python repr.
"""

import json
import logging
import sys
from enum import StrEnum
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor

# Third-party loggers that stay at INFO even with debug logs on (their DEBUG is request bodies).
QUIET_LIBRARIES = ("kubernetes_asyncio", "asyncio", "grpc", "urllib3")
ACCESS_LOG = "aiohttp.access"
LOG_FORMAT_ENV = "PYHAMI_LOG_FORMAT"


class LogFormat(StrEnum):
    CONSOLE = "console"
    JSON = "json"


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c.isspace() or c in "\"'=" for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def render_console(_logger: Any, _name: str, event: EventDict) -> str:
    """`TIME LEVEL LOGGER: message key=value ...`, values quoted only where they must be."""
    time = event.pop("timestamp", "")
    level = str(event.pop("level", "info")).upper()
    logger = event.pop("logger", "")
    message = str(event.pop("event", ""))
    fields = " ".join(f"{key}={_text(value)}" for key, value in event.items())
    return " ".join(part for part in (time, f"{level:<7}", f"{logger}:", message, fields) if part)


def configure_logging(
    *, debug: bool, log_format: LogFormat | str = LogFormat.CONSOLE, stream: TextIO | None = None
) -> None:
    """Route every logger to one handler on `stream` (stderr) in `log_format`.

    structlog's records are filtered by the standard library's levels, so the one level the CLI
    sets from `-v`/`--debug` (or a later `setLevel`, as the demo's quiet mode does) decides for
    both kinds of logger.
    """
    level = logging.DEBUG if debug else logging.INFO
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # A traceback as one field, so a record stays one line in either format.
        structlog.processors.format_exc_info,
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if LogFormat(log_format) is LogFormat.JSON
        else render_console
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.INFO))
    # A line per HTTP request (kube-scheduler calls the extender twice per pod) only in debug.
    logging.getLogger(ACCESS_LOG).setLevel(level if debug else logging.WARNING)
