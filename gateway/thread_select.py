"""`select` and `extract` of a thread search, as LangGraph Platform answers them:
only the chosen fields of each thread, and values picked out of it by path
(`values.messages[-1].content`) under an `extracted` field."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, get_args

ThreadField = Literal[
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
]
THREAD_FIELDS = set(get_args(ThreadField))
# Where an extract path may start.
EXTRACTABLE = ("config", "interrupts", "metadata", "values")
MAX_EXTRACT_PATHS = 10
ALIAS = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
PATH_PARTS = re.compile(r"\.|\[")


def checked_extract(extract: dict[str, str]) -> dict[str, str]:
    """The platform's rules, with its words; raises ValueError."""
    reserved = sorted(extract.keys() & THREAD_FIELDS)
    if reserved:
        raise ValueError(f"Extract keys cannot use reserved field names: {reserved}")
    for alias, path in extract.items():
        if not ALIAS.match(alias):
            raise ValueError(
                f"Extract key '{alias}' must be a valid identifier (letters, digits, underscores)"
            )
        if path.split(".")[0].split("[")[0] not in EXTRACTABLE:
            raise ValueError(
                f"Extract path '{path}' must start with one of: {', '.join(EXTRACTABLE)}"
            )
    return extract


def path_value(thread: dict[str, Any], path: str) -> Any:
    """The value at `path` in the thread (dots for keys, `[i]` for list items), or None."""
    parts = PATH_PARTS.split(path)
    current: Any = thread.get(parts[0])
    for part in parts[1:]:
        if current is None or part.startswith("_"):
            return None
        if part.endswith("]"):
            current = _item(current, part[:-1])
        elif part:
            current = current.get(part) if isinstance(current, dict) else None
    return current


def _item(sequence: Any, index: str) -> Any:
    if not isinstance(sequence, list):
        return None
    try:
        return sequence[int(index)]
    except (ValueError, IndexError):
        return None


def shaped(
    thread: dict[str, Any], select: Sequence[str] | None, extract: dict[str, str] | None
) -> dict[str, Any]:
    """The thread as the search asked for it."""
    shown = {key: value for key, value in thread.items() if not select or key in select}
    if extract:
        shown["extracted"] = {alias: path_value(thread, path) for alias, path in extract.items()}
    return shown
