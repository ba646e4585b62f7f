"""Graph state beyond runs (past checkpoints, update_state, copy) and the long-term store."""

from __future__ import annotations

import uuid

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import says


async def test_read_a_past_checkpoint(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "lead_agent", input=says("one"))
    first = await client.threads.get_state(thread["thread_id"])
    await client.runs.wait(thread["thread_id"], "lead_agent", input=says("two"))

    then = await client.threads.get_state(thread["thread_id"], checkpoint_id=first["checkpoint_id"])
    assert then["values"] == first["values"]
    missing = await http.get(f"/threads/{thread['thread_id']}/state/{uuid.uuid4()}")
    assert missing.status_code == 404


async def test_update_state_as_a_node(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "approval", input={"action": "ship"})
    written = await client.threads.update_state(
        thread["thread_id"], {"decision": "ship: by hand"}, as_node="ask"
    )
    state = await client.threads.get_state(thread["thread_id"])
    assert state["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
    assert state["values"]["decision"] == "ship: by hand"
    assert state["next"] == []


async def test_update_state_refuses_a_bad_node(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "approval", input={"action": "x"})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client.threads.update_state(thread["thread_id"], {"decision": "y"}, as_node="nope")
    assert refused.value.response.status_code == 400  # as LangGraph Platform answers
    assert refused.value.response.json()["detail"] == "Node nope does not exist"
    fresh = await client.threads.create()
    with pytest.raises(httpx.HTTPStatusError) as no_graph:
        await client.threads.update_state(fresh["thread_id"], {"decision": "y"})
    assert no_graph.value.response.status_code == 400  # as LangGraph Platform answers


async def test_copy_a_thread(client: LangGraphClient) -> None:
    thread = await client.threads.create(metadata={"origin": "copy-test"})
    await client.runs.wait(thread["thread_id"], "lead_agent", input=says("remember me"))
    copy = await client.threads.copy(thread["thread_id"])
    assert copy["thread_id"] != thread["thread_id"]
    assert copy["metadata"]["origin"] == "copy-test"
    original = await client.threads.get_state(thread["thread_id"])
    copied = await client.threads.get_state(copy["thread_id"])
    assert copied["values"] == original["values"]

    continued = await client.runs.wait(copy["thread_id"], "lead_agent", input=says("and me"))
    assert len(continued["messages"]) == 4
    untouched = await client.threads.get_state(thread["thread_id"])
    assert len(untouched["values"]["messages"]) == 2


async def test_store_items(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    user = uuid.uuid4().hex
    await client.store.put_item(["users", user, "prefs"], key="color", value={"v": "green"})
    await client.store.put_item(["users", user, "prefs"], key="size", value={"v": "L"})
    await client.store.put_item(["users", user, "notes"], key="n1", value={"text": "hi"})

    item = await client.store.get_item(["users", user, "prefs"], key="color")
    assert item["value"] == {"v": "green"}
    assert item["namespace"] == ["users", user, "prefs"]

    found = await client.store.search_items(["users", user], filter={"v": "L"})
    assert [i["key"] for i in found["items"]] == ["size"]
    everything = await client.store.search_items(["users", user], limit=10)
    assert len(everything["items"]) == 3

    spaces = await client.store.list_namespaces(prefix=["users", user])
    assert sorted(spaces["namespaces"]) == [["users", user, "notes"], ["users", user, "prefs"]]
    shallow = await client.store.list_namespaces(prefix=["users", user], max_depth=2)
    assert shallow["namespaces"] == [["users", user]]

    await client.store.delete_item(["users", user, "prefs"], key="color")
    gone = await http.get(
        "/store/items", params={"namespace": f"users.{user}.prefs", "key": "color"}
    )
    assert (gone.status_code, gone.json()) == (200, None)  # no such item: `null`

    bad = await http.put("/store/items", json={"namespace": [], "key": "k", "value": {}})
    assert bad.status_code == 422
    not_object = await http.put(
        "/store/items", json={"namespace": ["a"], "key": "k", "value": [1, 2]}
    )
    assert not_object.status_code == 422


async def test_graphs_write_the_same_store_the_api_reads(client: LangGraphClient) -> None:
    owner = uuid.uuid4().hex
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "memory", input={"owner": owner, "text": "hello"})
    item = await client.store.get_item(["notes", owner], key="last")
    assert item["value"] == {"text": "hello"}
