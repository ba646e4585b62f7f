"""A request's `command` as LangGraph's `Command`, as LangGraph Platform maps it
(`langgraph_api.command.map_cmd`): JSON has no `Send` and no tuples."""

from __future__ import annotations

from typing import Any

from langgraph.types import Command, Send


def as_command(command: dict[str, Any]) -> Command:
    return Command(
        update=_update(command.get("update")),
        goto=_goto(command.get("goto")),
        resume=command.get("resume"),
    )


def _goto(goto: Any) -> list[Send | str]:
    """A node's name stays a name; `{"node", "input"}` is a `Send` of that input."""
    if not goto:
        return []
    targets = goto if isinstance(goto, list) else [goto]
    return [it if isinstance(it, str) else Send(it["node"], it["input"]) for it in targets]


def _update(update: Any) -> Any:
    """`[["key", value], ...]` as the key/value tuples LangGraph takes; else as sent."""
    if isinstance(update, list) and all(_is_pair(item) for item in update):
        return [tuple(item) for item in update]
    return update


def _is_pair(item: Any) -> bool:
    return isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str)
