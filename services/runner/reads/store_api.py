"""The long-term store's RPCs: keys and put indexes checked (a clear 400 for bad
input), items returned in the JSON shape LangGraph Platform returns."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.store.base import SearchItem

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.v1 import runner_pb2


def store_key(item: runner_pb2.StoreKey) -> str:
    if not item.namespace:
        raise invalid("namespace must have at least one label.")
    if not item.key:
        raise invalid("key must not be empty.")
    return str(item.key)


def item_to_dict(item: Any) -> dict[str, Any]:
    found = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": codec.iso(item.created_at),
        "updated_at": codec.iso(item.updated_at),
    }
    if isinstance(item, SearchItem):
        found["score"] = item.score  # similarity to the query; None without one
    return found


def put_index(index_json: bytes) -> Literal[False] | list[str] | None:
    """A put's `index`: None (the configured fields), False, or JSON paths."""
    index = codec.loads(index_json, None)
    if index is None or index is False:
        return index
    if isinstance(index, list) and index and all(isinstance(p, str) and p for p in index):
        return index
    raise invalid('index: false, or a list of JSON paths such as ["text"].')
