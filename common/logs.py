"""Structured logs: one JSON object a line, with the run it concerns.

`bind_run(...)` puts run_id / thread_id / user_id in context variables; every
line logged afterwards in that task (and the tasks it starts) carries them, so
`grep <run_id>` over every service's log finds a run's whole story. Secrets are
redacted from the message and the fields before a line is written.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from typing import Any

from waybill.common.sealed import REDACTED

RUN_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("run_id", default=None)
THREAD_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("thread_id", default=None)
USER_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("user_id", default=None)

# key=value / "key": "value" pairs whose key names a secret, bearer tokens, and
# the common provider key shapes.
_SECRET_PAIR = re.compile(
    r"(?i)((?:authorization|api[_-]?key|x-api-key|token|secret|password|secrets_key)"
    r"[\"']?\s*[:=]\s*[\"']?)(?!\[redacted\]|bearer\s)([^\s\"',}&]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_KEY_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|xox[bpas]-[\w-]{8,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Z0-9])"
)
_SECRET_FIELD = re.compile(r"(?i)(secret|token|password|api_?key|authorization)")
# LogRecord attributes that are not a caller's `extra` fields.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def bind_run(
    run_id: str | None = None, thread_id: str | None = None, user_id: str | None = None
) -> None:
    """Tag every later log line of this task with the run it concerns."""
    if run_id:
        RUN_ID.set(run_id)
    if thread_id:
        THREAD_ID.set(thread_id)
    if user_id:
        USER_ID.set(user_id)


def redact(text: str) -> str:
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SECRET_PAIR.sub(lambda m: m.group(1) + REDACTED, text)
    return _KEY_SHAPES.sub(REDACTED, text)


def _field(name: str, value: Any) -> Any:
    if _SECRET_FIELD.search(name):
        return REDACTED
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, var in (("run_id", RUN_ID), ("thread_id", THREAD_ID), ("user_id", USER_ID)):
            value = getattr(record, key, None) or var.get()
            if value:
                line[key] = value
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in line:
                line[name] = _field(name, value)
        if record.exc_info:
            line["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, for a terminal; still redacted, still tagged with the run."""

    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        run_id = RUN_ID.get()
        text = redact(super().format(record))
        return f"{text} [run {run_id}]" if run_id else text


def text_wanted(fmt: str) -> bool:
    """`auto` is text on a terminal (a person reads it), JSON otherwise."""
    return fmt == "text" or (fmt == "auto" and sys.stderr.isatty())


def level_of(name: str) -> int:
    """A level's name (any case: LangGraph Platform's LOG_LEVEL is upper case)."""
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        raise ValueError(f"log level {name!r}: use debug, info, warning or error")
    return level


def configure_logging(service: str, fmt: str = "json", level: str = "info") -> None:
    """Every line of this process to stderr, in `fmt` (auto | json | text), from `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter(service) if text_wanted(fmt) else JsonFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_of(level))
