"""Thread CRUD and search through langgraph-sdk, in both storage modes."""

from __future__ import annotations

import uuid

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient


async def test_create_get_patch_delete(client: LangGraphClient) -> None:
    thread = await client.threads.create(metadata={"team": "blue"})
    assert uuid.UUID(thread["thread_id"])
    assert thread["status"] == "idle"
    assert thread["metadata"] == {"team": "blue"}

    fetched = await client.threads.get(thread["thread_id"])
    assert fetched["thread_id"] == thread["thread_id"]

    patched = await client.threads.update(thread["thread_id"], metadata={"stage": "review"})
    assert patched["metadata"] == {"team": "blue", "stage": "review"}

    await client.threads.delete(thread["thread_id"])
    with pytest.raises(httpx.HTTPStatusError) as missing:
        await client.threads.get(thread["thread_id"])
    assert missing.value.response.status_code == 404
    assert "not found" in missing.value.response.json()["detail"]


async def test_create_with_chosen_id_and_if_exists(client: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    created = await client.threads.create(thread_id=thread_id, metadata={"n": 1})
    assert created["thread_id"] == thread_id

    with pytest.raises(httpx.HTTPStatusError) as taken:
        await client.threads.create(thread_id=thread_id)
    assert taken.value.response.status_code == 409

    same = await client.threads.create(thread_id=thread_id, if_exists="do_nothing")
    assert same["metadata"] == {"n": 1}


async def test_search_by_metadata_and_status(client: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    first = await client.threads.create(metadata={"tag": tag, "kind": "a"})
    second = await client.threads.create(metadata={"tag": tag, "kind": "b"})
    await client.threads.create(metadata={"tag": "someone-else"})

    both = await client.threads.search(metadata={"tag": tag}, limit=10)
    assert {t["thread_id"] for t in both} == {first["thread_id"], second["thread_id"]}

    only_b = await client.threads.search(metadata={"tag": tag, "kind": "b"})
    assert [t["thread_id"] for t in only_b] == [second["thread_id"]]

    idle = await client.threads.search(metadata={"tag": tag}, status="idle")
    assert len(idle) == 2
    busy = await client.threads.search(metadata={"tag": tag}, status="busy")
    assert busy == []

    page = await client.threads.search(metadata={"tag": tag}, limit=1, offset=1)
    assert len(page) == 1


async def test_unknown_and_malformed_thread_ids(http: httpx.AsyncClient) -> None:
    unknown = await http.get(f"/threads/{uuid.uuid4()}")
    assert unknown.status_code == 404
    assert "detail" in unknown.json()

    malformed = await http.get("/threads/not-a-uuid")
    assert malformed.status_code == 422
    assert "thread_id" in str(malformed.json()["detail"])

    bad_body = await http.post("/threads", json={"thread_id": "nope"})
    assert bad_body.status_code == 422
    assert "thread_id" in bad_body.json()["detail"]

    bad_search = await http.post("/threads/search", json={"limit": 0})
    assert bad_search.status_code == 422
    assert "limit" in str(bad_search.json()["detail"])
