"""structlog set-up: JSON lines on stderr, one format for every process.

Every string of an event, the rendered traceback included, passes through
``redact`` first: an error that quotes ``redis://:password@host`` or a
provider's key is logged masked. A traceback names its frames, never their
local variables: a local may hold a key in no shape ``redact`` knows (a
local server's own), and its repr may be megabytes (a job, a vector).
``JSONRenderer`` escapes control characters, so an event is one line
whatever its fields hold.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, WrappedLogger

from shared_state.redact import redact


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """A processor masking secrets in every string value, nested ones included."""
    return _redacted(event_dict)


class _LineLogger(structlog.WriteLogger):
    """Each line in one write, and a write that never raises.

    One write: workers share the supervisor's stderr, and a line written as
    text then newline interleaves with another process's. Never raises: after
    the terminal hangs up, stderr answers EIO, and a lost log line must not
    stop a task.
    """

    def msg(self, message: str) -> None:
        with contextlib.suppress(OSError):
            super().msg(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


# structlog's ``dict_tracebacks``, without the frames' locals it shows by default.
_TRACEBACKS = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))


def _chain() -> list[Any]:
    """The processors every line passes, ours and a library's: level, time, traceback, redaction."""
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _TRACEBACKS,
        redact_secrets,
    ]


def configure(level: str = "info") -> None:
    structlog.configure(
        processors=[*_chain(), structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=lambda *_: _LineLogger(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # RQ logs through the stdlib ("rq.worker": a slot's lost connection, its retries):
    # with a handler here it adds none of its own, and its lines are JSON like ours.
    route_stdlib("rq")


def route_stdlib(*names: str) -> None:
    """Have these stdlib loggers (a library's: uvicorn's) write the same JSON lines as ours.

    Their levels stay the library's to set; each record gets the logger's
    name, and its message and traceback are redacted like any event.
    """
    handler = logging.StreamHandler(sys.stderr)  # one write per line, as _LineLogger
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *_chain()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    for name in names:
        library = logging.getLogger(name)
        library.handlers = [handler]
        library.propagate = False
