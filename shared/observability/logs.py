"""Structured JSON logs (python-json-logger) with the event being handled on every line.

``configure`` installs one JSON handler on the root logger. ``bind`` puts the current event's
function, id, type, tenant key and trace id into a context variable; a filter adds them to each
record, so handlers log plain messages and still say which Tenant they were about. Nothing
secret is ever put in the context.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from pythonjsonlogger.json import JsonFormatter

_EMPTY: Mapping[str, str] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("kubeopera_log_context", default=_EMPTY)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def configure(level: str = "INFO", **static: str) -> None:
    """JSON lines on stderr for the whole process; ``static`` fields go on every line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            static_fields=dict(static),
        )
    )
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("urllib3", "pyhelm3", "werkzeug", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


@contextmanager
def bind(**fields: str) -> Iterator[None]:
    """Add fields to every log line written inside the block."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)

