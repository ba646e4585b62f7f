"""Who may do what: API keys, scopes, owners, the internal principal, and the
order of StartRun's checks. One stack with auth on, on Postgres."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.auth_stack import INTERNAL_TOKEN, KEYS, AuthStack, as_user, running_auth_stack
from waybill.common import codec


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    with running_auth_stack(tmp_path_factory.mktemp("auth-stack")) as stack:
        yield stack


@pytest.fixture
async def alice(auth_stack: AuthStack) -> AsyncIterator[httpx.AsyncClient]:
    async with as_user(auth_stack, "alice") as client:
        yield client


@pytest.fixture
async def bob(auth_stack: AuthStack) -> AsyncIterator[httpx.AsyncClient]:
    async with as_user(auth_stack, "bob") as client:
        yield client


async def thread_with_a_run(client: httpx.AsyncClient, **run: Any) -> tuple[str, dict[str, Any]]:
    thread_id = (await client.post("/threads", json={})).json()["thread_id"]
    body = {"assistant_id": "whoami", "input": {"question": "who?"}, **run}
    reply = await client.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert reply.status_code == 200, reply.text
    return thread_id, reply.json()


# ---- keys ----------------------------------------------------------------------------


async def test_health_stays_open_and_the_api_needs_a_key(auth_stack: AuthStack) -> None:
    async with httpx.AsyncClient(base_url=auth_stack.url) as anonymous:
        assert (await anonymous.get("/ok")).status_code == 200
        missing = await anonymous.post("/threads/search", json={})
        assert missing.status_code == 401
        assert "x-api-key" in missing.json()["detail"]
        wrong = await anonymous.post("/threads/search", json={}, headers={"x-api-key": "nope"})
        assert wrong.status_code == 401
        assert wrong.json()["detail"] == "Invalid API key."
        bearer = await anonymous.post(
            "/threads/search", json={}, headers={"Authorization": f"Bearer {KEYS['alice']}"}
        )
        assert bearer.status_code == 200


async def test_a_scope_the_key_lacks_is_403_naming_it(auth_stack: AuthStack) -> None:
    async with as_user(auth_stack, "reader") as reader:
        refused = await reader.post("/threads", json={})
        assert refused.status_code == 403
        assert "threads:write" in refused.json()["detail"]
        assert (await reader.post("/threads/search", json={})).status_code == 200


async def test_a_join_that_cancels_on_disconnect_needs_the_cancel_scope(
    auth_stack: AuthStack,
) -> None:
    async with as_user(auth_stack, "creator") as creator:  # may create runs, cancel none
        thread_id, _ = await thread_with_a_run(creator)
        run_id = (await creator.get(f"/threads/{thread_id}/runs")).json()[0]["run_id"]
        for tail in ("join", "stream"):
            path = f"/threads/{thread_id}/runs/{run_id}/{tail}"
            refused = await creator.get(path, params={"cancel_on_disconnect": "true"})
            assert refused.status_code == 403
            assert "runs:cancel" in refused.json()["detail"]
            assert (await creator.get(path)).status_code == 200


def test_every_route_has_a_permission_rule() -> None:
    from fastapi.routing import APIRoute

    from waybill.gateway.app import create_app
    from waybill.gateway.auth import required_scope

    missing = [
        (method, route.path)
        for route in create_app().routes
        # Open by design: readiness, liveness, version, and Prometheus (counts only, no
        # user data).
        if isinstance(route, APIRoute) and route.path not in ("/ok", "/livez", "/info", "/metrics")
        for method in route.methods
        if required_scope(method, route.path) is None
    ]
    assert missing == []


# ---- owners -------------------------------------------------------------------------


async def test_another_users_thread_and_runs_are_404_on_every_endpoint(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    thread_id, _ = await thread_with_a_run(alice)
    run_id = (await alice.get(f"/threads/{thread_id}/runs")).json()[0]["run_id"]
    history = (await alice.post(f"/threads/{thread_id}/history", json={"limit": 1})).json()
    checkpoint_id = history[0]["checkpoint"]["checkpoint_id"]
    run_body = {"assistant_id": "whoami", "input": {"question": "mine now?"}}
    t, r = f"/threads/{thread_id}", f"/threads/{thread_id}/runs/{run_id}"
    attempts = [
        ("GET", t, None),
        ("PATCH", t, {"metadata": {"stolen": True}}),
        ("DELETE", t, None),
        ("GET", f"{t}/state", None),
        ("GET", f"{t}/state/{checkpoint_id}", None),
        ("POST", f"{t}/state/checkpoint", {"checkpoint": {"checkpoint_id": checkpoint_id}}),
        ("GET", f"{t}/stream", None),
        ("POST", f"{t}/state", {"values": {"question": "edited"}}),
        ("POST", f"{t}/history", {"limit": 5}),
        ("POST", f"{t}/copy", None),
        ("GET", f"{t}/runs", None),
        ("POST", f"{t}/runs", run_body),
        ("POST", f"{t}/runs/wait", run_body),
        ("POST", f"{t}/runs/stream", run_body),
        ("GET", r, None),
        ("GET", f"{r}/join", None),
        ("GET", f"{r}/stream", None),
        ("POST", f"{r}/cancel", None),
        ("GET", f"{r}/receipt", None),
        ("GET", f"{r}/workspace-changes", None),
        ("GET", f"{r}/deliveries", None),
        ("GET", f"{t}/outputs", None),
        ("GET", f"{t}/outputs/report.md", None),
        ("GET", f"{t}/webhooks", None),
        ("POST", f"{t}/webhooks", {"url": "https://example.com/hook"}),
        ("DELETE", r, None),
    ]
    for method, path, body in attempts:
        reply = await bob.request(method, path, json=body)
        assert reply.status_code == 404, (method, path, reply.status_code, reply.text)
    upload = await bob.post(f"{t}/uploads", files={"files": ("x.txt", b"planted")})
    assert upload.status_code == 404
    assert (await alice.get(f"{r}/receipt")).json()["verdict"] == "not_applicable"
    # Endpoints that name the thread or run in the body cannot reach it either.
    batch = [{**run_body, "thread_id": thread_id}]
    assert (await bob.post("/runs/batch", json=batch)).status_code == 404
    by_ids = {"thread_id": thread_id, "run_ids": [run_id]}
    assert (await bob.post("/runs/cancel", json=by_ids)).status_code == 404
    pruned = await bob.post("/threads/prune", json={"thread_ids": [thread_id]})
    assert pruned.json() == {"pruned_count": 0}  # not bob's: skipped, as a missing one
    # Nothing of alice's changed, and bob's searches do not show it.
    thread = (await alice.get(t)).json()
    assert "stolen" not in thread["metadata"]
    assert thread["values"]["question"] == "who?"
    assert len((await alice.get(f"{t}/runs")).json()) == 1
    found = (await bob.post("/threads/search", json={"limit": 1000})).json()
    assert thread_id not in {item["thread_id"] for item in found}
    ids_filter = {"ids": [thread_id]}
    assert (await bob.post("/threads/count", json=ids_filter)).json() == 0
    assert (await alice.post("/threads/count", json=ids_filter)).json() == 1


async def test_another_users_assistant_is_404_and_graph_defaults_are_everyones(
    auth_stack: AuthStack, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    """Built-in auth lets admins alone write assistants; an assistant is its
    creator's, as a thread is: other users get 404 wherever they name it."""
    name = f"admins-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"tone": "dry"}}
    async with as_user(auth_stack, "admin") as admin:
        created = await admin.post(
            "/assistants", json={"graph_id": "whoami", "name": name, "config": config}
        )
        assert created.status_code == 200, created.text
        assistant_id = created.json()["assistant_id"]
        a = f"/assistants/{assistant_id}"
        run_body = {"assistant_id": assistant_id, "input": {"question": "whose?"}}
        by_name = {"name": name, "limit": 100}
        for user in (alice, bob):
            own_thread = (await user.post("/threads", json={})).json()["thread_id"]
            attempts = [
                ("GET", a, None),
                ("POST", f"{a}/versions", {}),
                ("GET", f"{a}/graph", None),
                ("GET", f"{a}/schemas", None),
                ("GET", f"{a}/subgraphs", None),
                ("POST", f"/threads/{own_thread}/runs", run_body),
                ("POST", f"/threads/{own_thread}/runs/wait", run_body),
                ("POST", "/runs/wait", run_body),
                ("POST", "/runs/batch", [run_body]),
                ("POST", "/runs/crons", {**run_body, "schedule": "0 0 1 1 *"}),
            ]
            for method, path, body in attempts:
                reply = await user.request(method, path, json=body)
                assert reply.status_code == 404, (method, path, reply.status_code, reply.text)
            assert (await user.post("/assistants/search", json=by_name)).json() == []
            assert (await user.post("/assistants/count", json=by_name)).json() == 0
            assert (await user.get(f"/threads/{own_thread}/runs")).json() == []  # nothing ran
        # The creator (an admin, who sees everyone's) still has it, unchanged.
        mine = (await admin.post("/assistants/search", json=by_name)).json()
        assert [(found["assistant_id"], found["config"]) for found in mine] == [
            (assistant_id, config)
        ]
        # A graph's default assistant is everyone's: users read it, find it, run on it.
        system_id = codec.system_assistant_id("whoami")
        for user in (alice, bob):
            assert (await user.get(f"/assistants/{system_id}")).json()["graph_id"] == "whoami"
            listed = await user.post("/assistants/search", json={"graph_id": "whoami"})
            assert system_id in {found["assistant_id"] for found in listed.json()}
            assert (await user.get(f"/assistants/{system_id}/schemas")).status_code == 200
            await thread_with_a_run(user, assistant_id=system_id)
        assert (await admin.delete(a)).status_code == 204


async def test_a_bulk_cancel_by_status_reaches_only_the_callers_runs(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    thread_id = (await alice.post("/threads", json={})).json()["thread_id"]
    slow = {
        "assistant_id": "lead_agent",
        "input": {"messages": ['/tool wait {"seconds": 30}']},
    }
    run = (await alice.post(f"/threads/{thread_id}/runs", json=slow)).json()
    await bob.post("/runs/cancel", json={"status": "all"})
    assert (await alice.get(f"/threads/{thread_id}/runs/{run['run_id']}")).json()["status"] in (
        "pending",
        "running",
    )
    cancel = f"/threads/{thread_id}/runs/{run['run_id']}/cancel"
    assert (
        await alice.post(cancel, params={"wait": "true"})
    ).status_code == 200  # as LangGraph Platform (was 204)


async def test_an_admin_sees_every_users_threads(
    auth_stack: AuthStack, alice: httpx.AsyncClient
) -> None:
    thread_id, _ = await thread_with_a_run(alice)
    async with as_user(auth_stack, "admin") as admin:
        assert (await admin.get(f"/threads/{thread_id}")).status_code == 200


async def test_store_namespaces_belong_to_their_user(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    item = {"namespace": ["prefs"], "key": "theme", "value": {"color": "green"}}
    assert (await alice.put("/store/items", json=item)).status_code == 204
    mine = await alice.get("/store/items", params={"namespace": "prefs", "key": "theme"})
    assert mine.json()["value"] == {"color": "green"}
    assert mine.json()["namespace"] == ["prefs"]
    theirs = await bob.get("/store/items", params={"namespace": "prefs", "key": "theme"})
    assert (theirs.status_code, theirs.json()) == (200, None)  # no such item: `null`
    searched = await bob.post("/store/items/search", json={"namespace_prefix": ["prefs"]})
    assert searched.json()["items"] == []
    listed = (await bob.post("/store/namespaces", json={})).json()["namespaces"]
    assert ["prefs"] not in listed
    # A graph at run time sees the same, per-user store as its run's owner.
    await thread_with_a_run(bob, context={"note": "bob was here"})
    note = await bob.get("/store/items", params={"namespace": "notes", "key": "last"})
    assert note.json()["value"] == {"text": "bob was here"}
    unseen = await alice.get("/store/items", params={"namespace": "notes", "key": "last"})
    assert unseen.json() is None or unseen.json()["value"] != {"text": "bob was here"}


# ---- identity in the run ---------------------------------------------------------------


async def test_the_server_injects_identity_and_the_client_cannot_forge_it(
    bob: httpx.AsyncClient,
) -> None:
    _, values = await thread_with_a_run(
        bob,
        context={"user_id": "alice", "role": "admin", "unknown_key": 1},
        config={"configurable": {"user_id": "alice"}},
    )
    assert values["identity"] == {"user_id": "bob", "role": "user", "channel": None}
    assert "unknown_key" not in values["context_keys"]


async def test_the_internal_principal_acts_only_as_the_owner_it_names(
    auth_stack: AuthStack, alice: httpx.AsyncClient
) -> None:
    thread_id, _ = await thread_with_a_run(alice)
    internal = {"x-api-key": INTERNAL_TOKEN}
    async with httpx.AsyncClient(base_url=auth_stack.url, timeout=30) as raw:
        nameless = await raw.get(f"/threads/{thread_id}", headers=internal)
        assert nameless.status_code == 403
        for_bob = {**internal, "x-waybill-on-behalf-of": "bob"}
        assert (await raw.get(f"/threads/{thread_id}", headers=for_bob)).status_code == 404
        channel = '{"platform": "telegram", "chat_user": "4711"}'
        for_alice = {**internal, "x-waybill-on-behalf-of": "alice", "x-waybill-channel": channel}
        assert (await raw.get(f"/threads/{thread_id}", headers=for_alice)).status_code == 200
        reply = await raw.post(
            f"/threads/{thread_id}/runs/wait",
            headers=for_alice,
            json={"assistant_id": "whoami", "input": {"question": "from chat"}},
        )
    assert reply.json()["identity"] == {
        "user_id": "alice",
        "role": "user",
        "channel": {"platform": "telegram", "chat_user": "4711"},
    }


async def test_the_internal_token_is_no_master_key(
    auth_stack: AuthStack, alice: httpx.AsyncClient
) -> None:
    """It acts for non-admin owners only, and only as chats and schedules do."""
    thread_id, _ = await thread_with_a_run(alice)
    internal = {"x-api-key": INTERNAL_TOKEN}
    for_admin = {**internal, "x-waybill-on-behalf-of": "admin"}
    for_alice = {**internal, "x-waybill-on-behalf-of": "alice"}
    async with httpx.AsyncClient(base_url=auth_stack.url, timeout=30) as raw:
        refused = await raw.post("/threads/search", headers=for_admin, json={})
        assert refused.status_code == 403
        assert "cannot act for an admin" in refused.json()["detail"]
        assert (await raw.delete(f"/threads/{thread_id}", headers=for_alice)).status_code == 403
        item = {"namespace": ["notes"], "key": "k", "value": {"v": 1}}
        assert (await raw.put("/store/items", headers=for_alice, json=item)).status_code == 403
        cron = {"assistant_id": "lead_agent", "schedule": "0 0 1 1 *"}
        assert (await raw.post("/runs/crons", headers=for_alice, json=cron)).status_code == 403
        assert (await raw.get(f"/threads/{thread_id}", headers=for_alice)).status_code == 200
    assert (await alice.get(f"/threads/{thread_id}")).status_code == 200  # not deleted


async def test_request_secrets_are_sealed_at_rest_and_redacted_in_reads(
    auth_stack: AuthStack, alice: httpx.AsyncClient
) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    thread_id, values = await thread_with_a_run(alice, context={"secrets": {"github": secret}})
    assert values["secret_digests"] == {"github": hashlib.sha256(secret.encode()).hexdigest()}
    run = (await alice.get(f"/threads/{thread_id}/runs")).json()[0]
    assert run["kwargs"]["context"]["secrets"] == {"github": "[redacted]"}
    with psycopg.connect(auth_stack.database_url) as conn:
        stored = conn.execute(
            "SELECT kwargs::text FROM runs WHERE run_id = %s", (run["run_id"],)
        ).fetchone()
    assert stored is not None and secret not in stored[0]


# ---- StartRun: each check in its place, and nothing written on refusal --------------------


async def test_start_run_checks_come_in_order_and_write_nothing(
    auth_stack: AuthStack, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    alices_thread, _ = await thread_with_a_run(alice)
    bobs_thread = (await bob.post("/threads", json={})).json()["thread_id"]
    secret_metadata = {"api_key": "x"}
    cases: list[tuple[str, httpx.AsyncClient | None, str, dict[str, Any], int, str]] = [
        # 1. interrupt/rollback need runs:cancel, before any other check
        (
            "creator",
            None,
            bobs_thread,
            {"multitask_strategy": "interrupt", "metadata": secret_metadata},
            403,
            "runs:cancel",
        ),
        # 2. thread id shape (path parameter)
        ("bob", bob, "not-a-uuid", {"metadata": secret_metadata}, 422, "thread_id"),
        # 3. the secret scan comes before the model allowlist
        (
            "bob",
            bob,
            bobs_thread,
            {
                "assistant_id": "lead_agent",
                "metadata": secret_metadata,
                "context": {"model_name": "gpt-99"},
            },
            422,
            "metadata.api_key",
        ),
        (
            "bob",
            bob,
            bobs_thread,
            {"config": {"configurable": {"note": "sk-" + "a" * 40}}},
            422,
            "config.configurable.note",
        ),
        # 4. the model allowlist (the built-in agent's) comes before ownership
        (
            "bob",
            bob,
            alices_thread,
            {"assistant_id": "lead_agent", "context": {"model_name": "gpt-99"}},
            400,
            "scripted",
        ),
        # 5. someone else's thread, before the checkpoint is looked at
        ("bob", bob, alices_thread, {"checkpoint_id": str(uuid.uuid4())}, 404, "not found"),
        # 7. the checkpoint must belong to the thread
        ("bob", bob, bobs_thread, {"checkpoint_id": str(uuid.uuid4())}, 404, "Checkpoint"),
        (
            "bob",
            bob,
            bobs_thread,
            {"checkpoint": {"thread_id": alices_thread, "checkpoint_id": "x"}},
            400,
            "belongs",
        ),
    ]
    runs_before, threads_before = auth_stack.count("runs"), auth_stack.count("threads")
    for user, client, thread_id, extra, status, words in cases:
        body = {"assistant_id": "whoami", "input": {"question": "?"}, **extra}
        if client is None:
            async with as_user(auth_stack, user) as own:
                reply = await own.post(f"/threads/{thread_id}/runs", json=body)
        else:
            reply = await client.post(f"/threads/{thread_id}/runs", json=body)
        assert reply.status_code == status, (user, extra, reply.text)
        assert words in str(reply.json()["detail"]), (words, reply.text)
    assert auth_stack.count("runs") == runs_before
    assert auth_stack.count("threads") == threads_before


async def test_a_roles_tool_list_limits_what_its_runs_may_call(auth_stack: AuthStack) -> None:
    async def call_tool(user: str, command: str) -> dict[str, Any]:
        async with as_user(auth_stack, user) as client:
            thread_id = (await client.post("/threads", json={})).json()["thread_id"]
            body = {"assistant_id": "lead_agent", "input": {"messages": [command]}}
            reply = await client.post(f"/threads/{thread_id}/runs/wait", json=body)
            assert reply.status_code == 200, reply.text
            return next(m for m in reply.json()["messages"] if m["type"] == "tool")

    add = '/tool add {"a": 1, "b": 2}'
    assert (await call_tool("alice", add))["content"] == "3.0"
    refused = await call_tool("creator", add)
    assert refused["status"] == "error" and "add" in refused["content"]
    echoed = await call_tool("creator", '/tool echo {"text": "allowed"}')
    assert echoed["content"] == "allowed"


async def test_a_user_whose_id_holds_a_dot_has_a_store_of_their_own(auth_stack: AuthStack) -> None:
    item = {"namespace": ["notes"], "key": "k", "value": {"v": "jane's"}}
    async with as_user(auth_stack, "jane.doe") as jane, as_user(auth_stack, "alice") as alice:
        assert (await jane.put("/store/items", json=item)).status_code == 204
        got = await jane.get("/store/items", params={"namespace": "notes", "key": "k"})
        assert got.status_code == 200, got.text
        assert got.json()["value"] == {"v": "jane's"}
        found = await jane.post("/store/items/search", json={"namespace_prefix": ["notes"]})
        assert [i["value"] for i in found.json()["items"]] == [{"v": "jane's"}]
        listed = await jane.post("/store/namespaces", json={})
        assert listed.json()["namespaces"] == [["notes"]]
        theirs = await alice.post("/store/items/search", json={"namespace_prefix": ["notes"]})
        assert {"v": "jane's"} not in [i["value"] for i in theirs.json()["items"]]
