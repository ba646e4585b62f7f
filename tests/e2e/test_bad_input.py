"""Bad input gets a clear 4xx and leaves nothing behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.helpers import says
from waybill.common.settings import Settings


async def new_thread(http: httpx.AsyncClient) -> str:
    return str((await http.post("/threads", json={})).json()["thread_id"])


async def runs_of(http: httpx.AsyncClient, thread_id: str) -> list:
    return list((await http.get(f"/threads/{thread_id}/runs")).json())


async def test_unknown_graph_is_422_and_creates_nothing(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    reply = await http.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "no_such_graph", "input": says("x")}
    )
    assert reply.status_code == 422
    assert "no_such_graph" in reply.json()["detail"]
    assert "lead_agent" in reply.json()["detail"]
    assert await runs_of(http, thread_id) == []


async def test_unconfigured_model_is_400_naming_the_allowed(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    reply = await http.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "lead_agent", "input": says("x"), "context": {"model_name": "gpt-9"}},
    )
    assert reply.status_code == 400
    assert "gpt-9" in reply.json()["detail"] and "scripted" in reply.json()["detail"]
    assert await runs_of(http, thread_id) == []


async def test_run_on_unknown_thread_is_404(http: httpx.AsyncClient) -> None:
    reply = await http.post(
        f"/threads/{uuid.uuid4()}/runs/stream", json={"assistant_id": "lead_agent"}
    )
    assert reply.status_code == 404
    assert "not found" in reply.json()["detail"]


async def test_if_not_exists_create_makes_the_thread(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    reply = await http.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "lead_agent", "input": says("new"), "if_not_exists": "create"},
    )
    assert reply.status_code == 200
    assert reply.json()["messages"][-1]["content"] == "You said: new"
    assert (await http.get(f"/threads/{thread_id}")).status_code == 200


async def test_envelope_errors_are_422_naming_the_field(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    cases = {
        "stream_mode": {"assistant_id": "lead_agent", "stream_mode": "telepathy"},
        "multitask_strategy": {"assistant_id": "lead_agent", "multitask_strategy": "shrug"},
        "assistant_id": {"input": says("x")},
        "metadata": {"assistant_id": "lead_agent", "metadata": "not an object"},
    }
    for field, body in cases.items():
        reply = await http.post(f"/threads/{thread_id}/runs", json=body)
        assert reply.status_code == 422, field
        assert field in str(reply.json()["detail"]), field
    not_json = await http.post(
        f"/threads/{thread_id}/runs", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422
    assert await runs_of(http, thread_id) == []


async def test_malformed_run_id_is_422(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    reply = await http.get(f"/threads/{thread_id}/runs/123")
    assert reply.status_code == 422
    assert "run_id" in str(reply.json()["detail"])


async def test_unknown_assistant_is_404(http: httpx.AsyncClient) -> None:
    assert (await http.get(f"/assistants/{uuid.uuid4()}")).status_code == 404
    assert (await http.get("/assistants/nope/graph")).status_code == 404


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


UNENCODABLE = {"integer beyond 64 bits": 2**70, "nesting 300 deep": nested(300)}


@pytest.mark.parametrize("what", UNENCODABLE)
async def test_a_value_json_cannot_carry_is_422_and_nothing_is_written(
    http: httpx.AsyncClient, what: str
) -> None:
    value = UNENCODABLE[what]
    tag = {"probe": uuid.uuid4().hex}
    thread_id = await new_thread(http)
    namespace = ["unencodable", tag["probe"]]
    # The session's stack may hold other tests' crons: none is added here.
    crons_before = (await http.post("/runs/crons/count", json={})).json()
    requests = [
        ("POST", "/threads", {"metadata": {**tag, "x": value}}),
        ("PATCH", f"/threads/{thread_id}", {"metadata": {"x": value}}),
        ("POST", "/threads/search", {"metadata": {"x": value}}),
        ("PUT", "/store/items", {"namespace": namespace, "key": "k", "value": {"x": value}}),
        ("POST", f"/threads/{thread_id}/runs", {"assistant_id": "lead_agent", "input": value}),
        ("POST", "/assistants", {"graph_id": "lead_agent", "metadata": {**tag, "x": value}}),
        (
            "POST",
            "/runs/crons",
            {"assistant_id": "lead_agent", "schedule": "0 0 1 1 *", "input": value},
        ),
    ]
    for method, path, body in requests:
        # The standard library writes what orjson refuses, as a client's encoder would.
        content = json.dumps(body)
        reply = await http.request(
            method, path, content=content, headers={"content-type": "application/json"}
        )
        assert reply.status_code == 422, (method, path, reply.text)
        assert "cannot be stored as JSON" in reply.json()["detail"]

    assert (await http.post("/threads/search", json={"metadata": tag})).json() == []
    assert (await http.get(f"/threads/{thread_id}")).json()["metadata"] == {}
    assert await runs_of(http, thread_id) == []
    assert (await http.post("/assistants/search", json={"metadata": tag})).json() == []
    stored = await http.post("/store/items/search", json={"namespace_prefix": namespace})
    assert stored.json()["items"] == []
    assert (await http.post("/runs/crons/count", json={})).json() == crons_before


async def test_an_error_echoing_a_huge_value_is_still_a_clear_422(http: httpx.AsyncClient) -> None:
    schedule = "* " * 6000  # its error message quotes it
    reply = await http.post(
        "/runs/crons", json={"assistant_id": "lead_agent", "schedule": schedule}
    )
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert "five fields" in detail and len(detail) <= 1000


MiB = 1024 * 1024


async def test_a_request_over_the_size_limit_is_413_before_anything_is_written(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    body = {"assistant_id": "lead_agent", "input": says("x" * (9 * MiB))}  # the limit is 8 MiB
    reply = await http.post(f"/threads/{thread_id}/runs", json=body)
    assert reply.status_code == 413, reply.text
    assert "WAYBILL_MAX_REQUEST_BYTES" in reply.json()["detail"]

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        yield json.dumps(body).encode()

    reply = await http.post(
        f"/threads/{thread_id}/runs",
        content=chunked(),
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 413, reply.text
    big_metadata = {"metadata": {"notes": "y" * (9 * MiB)}}
    assert (await http.patch(f"/threads/{thread_id}", json=big_metadata)).status_code == 413
    assert await runs_of(http, thread_id) == []
    thread = (await http.get(f"/threads/{thread_id}")).json()
    assert thread["status"] == "idle" and thread["metadata"] == {}


async def test_a_run_larger_than_grpcs_default_message_is_served_whole(
    http: httpx.AsyncClient,
) -> None:
    """5 MiB of input: under the request limit, over gRPC's 4 MiB default, so every
    channel and server on its way must take it; the run can be read and deleted."""
    thread_id = await new_thread(http)
    text = "z" * (5 * MiB)
    reply = await http.post(
        f"/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", "input": says(text)}
    )
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["messages"][0]["content"] == text
    (run,) = await runs_of(http, thread_id)
    assert run["status"] == "success"
    assert len((await http.get(f"/threads/{thread_id}/state")).content) > 5 * MiB
    assert (await http.delete(f"/threads/{thread_id}")).status_code == 204


def test_grpc_messages_must_fit_what_the_gateway_admits() -> None:
    with pytest.raises(ValueError, match="twice max_request_bytes"):
        Settings(max_request_bytes=40 * MiB, grpc_max_message_bytes=64 * MiB)
    Settings(max_request_bytes=32 * MiB, grpc_max_message_bytes=64 * MiB)


async def test_store_labels_and_filter_keys_langgraph_refuses_are_422(
    http: httpx.AsyncClient,
) -> None:
    put = {"namespace": ["a\x00b"], "key": "k", "value": {"x": 1}}
    assert (await http.put("/store/items", json=put)).status_code == 422
    for key in ("a'; drop", "a.b$c", "名前"):
        search = {"namespace_prefix": ["notes"], "filter": {key: 1}}
        reply = await http.post("/store/items/search", json=search)
        assert reply.status_code == 422, (key, reply.text)
    for offset in (-1, 2**31):
        reply = await http.post("/store/items/search", json={"offset": offset})
        assert reply.status_code == 422, (offset, reply.text)
    fine = {"namespace_prefix": ["notes"], "filter": {"a.b_c-d": 1}}
    assert (await http.post("/store/items/search", json=fine)).status_code == 200


async def test_numbers_past_what_the_services_carry_are_422(http: httpx.AsyncClient) -> None:
    """Counts and positions are int32 on the wire, event ids int64: past them is
    the client's mistake (these were 500s), and so are negative ones."""
    thread_id = await new_thread(http)
    done = await http.post(
        f"/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", "input": says("x")}
    )
    assert done.status_code == 200, done.text
    (run,) = await runs_of(http, thread_id)
    runs, big, huge = f"/threads/{thread_id}/runs", 2**40, 2**70
    assistant = (await http.post("/assistants", json={"graph_id": "lead_agent"})).json()
    for method, path, body in [
        ("GET", f"{runs}?limit=-1", None),
        ("GET", f"{runs}?offset=-1", None),
        ("GET", f"{runs}?offset={big}", None),
        ("GET", f"{runs}/{run['run_id']}/events?after={huge}", None),
        ("GET", f"{runs}/{run['run_id']}/events?offset={big}", None),
        ("POST", f"/assistants/{assistant['assistant_id']}/latest", {"version": big}),
        ("POST", f"/assistants/{assistant['assistant_id']}/versions", {"offset": big}),
        ("POST", "/threads/search", {"offset": big}),
        ("POST", "/assistants/search", {"offset": big}),
        ("POST", "/runs/crons/search", {"offset": big}),
    ]:
        reply = await http.request(method, path, json=body)
        assert reply.status_code == 422, (method, path, reply.text)
    stream = await http.get(f"{runs}/{run['run_id']}/stream", headers={"Last-Event-ID": str(huge)})
    assert stream.status_code == 422, stream.text


async def test_a_wrong_type_where_an_object_or_an_id_belongs_is_422(
    http: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(http)
    for path, body, says_what in [
        (
            f"/threads/{thread_id}/runs",
            {"assistant_id": "lead_agent", "config": {"configurable": "x"}},
            "config.configurable must be a JSON object",
        ),
        (
            "/runs/crons",
            {"assistant_id": "lead_agent", "schedule": "0 0 1 1 *", "config": {"configurable": 1}},
            "config.configurable must be a JSON object",
        ),
        (
            f"/threads/{thread_id}/runs",
            {"assistant_id": "lead_agent", "checkpoint": {"checkpoint_id": 5}},
            "checkpoint_id must be a string",
        ),
        (
            f"/threads/{thread_id}/history",
            {"before": {"configurable": {"checkpoint_id": 5}}},
            "checkpoint_id must be a string",
        ),
    ]:
        reply = await http.post(path, json=body)
        assert reply.status_code == 422, (path, reply.text)
        assert says_what in json.dumps(reply.json()["detail"]), (path, reply.text)
    assert await runs_of(http, thread_id) == []


async def test_credentials_in_thread_metadata_are_refused_like_a_runs(
    http: httpx.AsyncClient,
) -> None:
    tag = {"probe": uuid.uuid4().hex}
    created = await http.post("/threads", json={"metadata": {**tag, "api_key": "hunter2"}})
    assert created.status_code == 422, created.text
    assert "metadata.api_key: credential-like key name" in created.json()["detail"]
    assert (await http.post("/threads/search", json={"metadata": tag})).json() == []
    thread_id = await new_thread(http)
    token = "ghp_0123456789abcdefABCDEF0123456789abcd"
    patched = await http.patch(f"/threads/{thread_id}", json={"metadata": {"note": token}})
    assert patched.status_code == 422, patched.text
    assert "metadata.note" in patched.json()["detail"]
    assert (await http.get(f"/threads/{thread_id}")).json()["metadata"] == {}


async def test_credentials_in_store_values_are_refused_naming_the_path(
    http: httpx.AsyncClient,
) -> None:
    namespace = ["probe", uuid.uuid4().hex]
    token = "ghp_0123456789abcdefABCDEF0123456789abcd"
    for value, path in [
        ({"profile": {"password": "hunter2"}}, "value.profile.password"),
        ({"notes": ["fine", f"token {token}"]}, "value.notes[1]"),
    ]:
        put = {"namespace": namespace, "key": "k", "value": value}
        reply = await http.put("/store/items", json=put)
        assert reply.status_code == 422, reply.text
        assert reply.json()["detail"].startswith(f"{path}: "), reply.text
        assert token not in reply.text and "hunter2" not in reply.text
    got = await http.get("/store/items", params={"namespace": ".".join(namespace), "key": "k"})
    assert got.json() is None  # nothing was written
    # Key names that only look like one pass, as in run metadata.
    fine = {"namespace": namespace, "key": "k", "value": {"max_tokens": 5, "sort_key": "a"}}
    assert (await http.put("/store/items", json=fine)).status_code == 204


NUL_REQUESTS = [
    ("GET", "/assistants/lead%00agent"),
    ("GET", "/store/items?namespace=notes&key=k%00"),
    ("GET", "/store/namespaces?prefix=a%00b"),
    ("GET", "/threads/{thread_id}/runs?status=pending%00"),
    ("POST", "/threads/{thread_id}%00/runs"),
    ("GET", "/threads/{thread_id}/state?subgraphs=%00"),
]


@pytest.mark.parametrize(("method", "target"), NUL_REQUESTS)
async def test_a_nul_character_in_the_path_or_query_is_422(
    http: httpx.AsyncClient, method: str, target: str
) -> None:
    """PostgreSQL refuses NUL in text: a NUL in the request line reached it and
    came back a 5xx (found by the fuzz on Postgres)."""
    thread_id = await new_thread(http)
    reply = await http.request(
        method, target.format(thread_id=thread_id), json={} if method == "POST" else None
    )
    assert reply.status_code == 422, reply.text
    assert "NUL character" in reply.json()["detail"]
    assert await runs_of(http, thread_id) == []
