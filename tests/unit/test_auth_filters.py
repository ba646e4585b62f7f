"""The project's auth filters as admission applies them in SQL, on SQLite and on
Postgres: plain values, `$eq`, `$contains` (one value or several), `$or`, `$and`;
and the principal that carries the project's user to the services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException

from tests.support.admission_stores import BACKENDS, admission_stores
from waybill.common.identity import Principal
from waybill.gateway.project_auth import _checked_filter, _normalized
from waybill.services.admission.threads.thread_queries import ThreadQuery
from waybill.services.admission.threads.thread_store import ThreadStore

THREADS = {
    "a": {"owner": "alice", "tags": ["red", "blue"], "level": 1},
    "b": {"owner": "bob", "tags": ["blue"], "level": 2},
    "c": {"owner": "carol", "tags": [], "level": 1},
}
IDS = {
    "a": "00000000-0000-4000-8000-00000000000a",
    "b": "00000000-0000-4000-8000-00000000000b",
    "c": "00000000-0000-4000-8000-00000000000c",
}


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    async with admission_stores(tmp_path, request.param) as opened:
        store = opened.threads
        for name, metadata in THREADS.items():
            await store.create_thread(IDS[name], metadata, "raise", metadata["owner"])
        yield store


async def visible(store: ThreadStore, auth: dict[str, Any]) -> set[str]:
    found = await store.search_threads(ThreadQuery(), 100, 0, auth=auth)
    by_id = {thread_id: name for name, thread_id in IDS.items()}
    return {by_id[record.thread_id] for record in found}


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ({"owner": "alice"}, {"a"}),
        ({"owner": {"$eq": "bob"}}, {"b"}),
        ({"level": 1}, {"a", "c"}),
        ({"tags": {"$contains": "blue"}}, {"a", "b"}),
        ({"tags": {"$contains": ["red", "blue"]}}, {"a"}),
        ({"$or": [{"owner": "alice"}, {"owner": "carol"}]}, {"a", "c"}),
        ({"$and": [{"level": 1}, {"tags": {"$contains": "red"}}]}, {"a"}),
        ({"level": 1, "$or": [{"owner": "bob"}, {"owner": "carol"}]}, {"c"}),
        ({"owner": "nobody"}, set()),
    ],
)
async def test_filters_select_in_sql(
    store: ThreadStore, auth: dict[str, Any], expected: set[str]
) -> None:
    assert await visible(store, auth) == expected
    assert await store.count_threads(ThreadQuery(), auth=auth) == len(expected)


async def test_an_excluded_thread_is_not_found_and_not_written(store: ThreadStore) -> None:
    alice_only = {"owner": "alice"}
    assert (await store.get_thread(IDS["a"], auth=alice_only)).metadata["owner"] == "alice"
    with pytest.raises(Exception, match="not found"):
        await store.get_thread(IDS["b"], auth=alice_only)
    with pytest.raises(Exception, match="not found"):
        await store.patch_thread(IDS["b"], {"owner": "alice"}, auth=alice_only)
    with pytest.raises(Exception, match="not found"):
        await store.delete_thread(IDS["b"], auth=alice_only)
    assert (await store.get_thread(IDS["b"])).metadata == THREADS["b"]


def test_the_project_user_travels_in_grpc_metadata() -> None:
    user = {
        "identity": "alice",
        "display_name": "Alice",
        "is_authenticated": True,
        "permissions": ["read"],
        "org": {"id": 7},
    }
    sent = Principal("alice", "user", frozenset({"threads:read"}), user=user, permissions=("read",))
    received = Principal.from_metadata(sent.to_metadata())
    assert received == sent
    assert received is not None and received.owner_filter is None  # the handlers decide
    plain = Principal.from_metadata(Principal("bob", "user").to_metadata())
    assert plain is not None and plain.user is None and plain.owner_filter == "bob"


def test_an_identity_beyond_ascii_travels_in_grpc_metadata() -> None:
    user = {"identity": "José 山田", "team": "équipe", "is_authenticated": True}
    sent = Principal("José 山田", "user", user=user, permissions=("écrire",))
    pairs = sent.to_metadata()
    assert all(value.isascii() for _, value in pairs)  # what gRPC accepts
    assert Principal.from_metadata(pairs) == sent


@pytest.mark.parametrize(
    "handed",
    [
        {"teams": []},
        {"teams": {"$contains": []}},
        {"teams": {"$eq": {}}},
        {"$or": [{}, {"owner": "alice"}]},
        {"score": float("nan")},
    ],
)
def test_a_filter_that_would_match_everything_is_refused(
    handed: dict[str, Any],
) -> None:
    """Containing nothing is true of every row: such a filter fails closed (a 500
    naming the handler), it never lets every resource through."""
    with pytest.raises(HTTPException) as refused:
        _checked_filter(handed, "threads.search")
    assert refused.value.status_code == 500
    assert "threads.search" in str(refused.value.detail)


def test_a_single_permission_given_as_a_string_is_one_permission() -> None:
    permissions, user = _normalized({"identity": "alice", "permissions": "admin"})
    assert permissions == ("admin",)
    assert user["permissions"] == ["admin"]
