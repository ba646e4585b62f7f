"""Does a decoded JSON answer fit a type declared in `langgraph_sdk.schema`?

`shape_errors(value, declared)` lists what does not fit (empty when it fits): a
TypedDict's required keys must be present and every key it declares must hold a
value of its declared type; a Literal's value must be one of the allowed ones;
lists, dicts and unions are checked through. Keys the SDK does not declare are
allowed (LangGraph Platform sends some too, e.g. a run's `kwargs`).

Where LangGraph Platform itself leaves out a key the SDK marks required, the key
may be absent (`REFERENCE_OMITS`); when present, it must still have its type.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import (
    Any,
    ForwardRef,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from langgraph_sdk import schema
from typing_extensions import is_typeddict

SEQUENCES = {list, Sequence}

# Keys the SDK marks required that LangGraph Platform (langgraph-api 0.16.7) omits.
REFERENCE_OMITS: dict[Any, set[str]] = {
    # langgraph_api/state.py `runnable_config_to_checkpoint` sets checkpoint_map only
    # when the config has one, and checkpoint_ns only when the config has that.
    schema.Checkpoint: {"checkpoint_map", "checkpoint_ns"},
}
MAPPINGS = {dict, Mapping}


def shape_errors(value: Any, declared: Any, where: str = "answer") -> list[str]:
    declared = resolved(declared)
    origin = get_origin(declared)
    if declared is Any:
        return []
    if declared is None or declared is type(None):
        return [] if value is None else [f"{where}: {short(value)} is not null"]
    if origin is Literal:
        allowed = get_args(declared)
        return [] if value in allowed else [f"{where}: {short(value)} is not one of {allowed}"]
    if origin in (Union, types.UnionType):
        return union_errors(value, get_args(declared), where)
    if is_typeddict(declared):
        return typed_dict_errors(value, declared, where)
    if is_protocol(declared):
        # Input's Pydantic/dataclass protocols describe Python objects, never JSON.
        return [f"{where}: a JSON value is not a {declared.__name__}"]
    if origin in SEQUENCES or declared in SEQUENCES:
        return sequence_errors(value, get_args(declared), where)
    if origin in MAPPINGS or declared in MAPPINGS:
        return mapping_errors(value, get_args(declared), where)
    return scalar_errors(value, declared, where)


def typed_dict_errors(value: Any, declared: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {short(value)} is not an object ({declared.__name__})"]
    missing = sorted(required_keys(declared) - value.keys())
    errors = [f"{where}: missing {key!r} ({declared.__name__})" for key in missing]
    hints = get_type_hints(declared, vars(schema))
    for key, hint in hints.items():
        if key in value:
            errors += shape_errors(value[key], hint, f"{where}.{key}")
    return errors


def required_keys(declared: Any) -> set[str]:
    """`__required_keys__`, less the keys marked NotRequired: the SDK's schema module
    defers its annotations (`from __future__ import annotations`), so on Python 3.11
    TypedDict cannot see a NotRequired when it builds `__required_keys__`."""
    hints = get_type_hints(declared, vars(schema), include_extras=True)
    optional = {key for key, hint in hints.items() if get_origin(hint) is NotRequired}
    return set(declared.__required_keys__) - optional - REFERENCE_OMITS.get(declared, set())


def union_errors(value: Any, arms: tuple[Any, ...], where: str) -> list[str]:
    """Fits if any arm fits; otherwise the errors of the arm that came closest."""
    json_arms = [arm for arm in arms if not is_protocol(resolved(arm))]
    attempts = [shape_errors(value, arm, where) for arm in json_arms]
    if any(not errors for errors in attempts):
        return []
    return min(attempts, key=len)


def sequence_errors(value: Any, args: tuple[Any, ...], where: str) -> list[str]:
    if not isinstance(value, list):
        return [f"{where}: {short(value)} is not a list"]
    item_type = args[0] if args else Any
    return [
        e for i, item in enumerate(value) for e in shape_errors(item, item_type, f"{where}[{i}]")
    ]


def mapping_errors(value: Any, args: tuple[Any, ...], where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {short(value)} is not an object"]
    value_type = args[1] if args else Any
    return [e for k, item in value.items() for e in shape_errors(item, value_type, f"{where}.{k}")]


def scalar_errors(value: Any, declared: Any, where: str) -> list[str]:
    if declared is datetime:
        # JSON carries a datetime as an ISO 8601 string.
        if isinstance(value, str) and parses_as_datetime(value):
            return []
        return [f"{where}: {short(value)} is not an ISO 8601 datetime"]
    if declared is float and isinstance(value, int) and not isinstance(value, bool):
        return []
    if declared is int and isinstance(value, bool):
        return [f"{where}: {short(value)} is a bool, not an int"]
    if isinstance(declared, type) and not isinstance(value, declared):
        return [f"{where}: {short(value)} is not a {declared.__name__}"]
    return []


def resolved(declared: Any) -> Any:
    """A name the SDK wrote as a string (a forward reference) as the type it names."""
    if isinstance(declared, str):
        return vars(schema)[declared]
    if isinstance(declared, ForwardRef):
        return vars(schema)[declared.__forward_arg__]
    return declared


def is_protocol(declared: Any) -> bool:
    return isinstance(declared, type) and bool(getattr(declared, "_is_protocol", False))


def parses_as_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
