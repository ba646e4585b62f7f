"""Auth from the project: `auth` in langgraph.json, LangGraph's "resource owner"
example (authenticate a bearer token; `@auth.on` stamps `owner` and returns
`{"owner": identity}`), served on SQLite and on Postgres. Two users are isolated
completely; the handlers' other answers (False, exceptions, `$contains`, the most
specific handler) behave as on LangGraph Platform."""

from __future__ import annotations

import hashlib
import json
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, PermissionDeniedError

from tests.support.helpers import wait_for_status
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

ADMIN_KEY = "operator-key-0000"
OPERATOR = {"x-api-key": ADMIN_KEY}
# A principal of Waybill's own config beside the project's auth: an ordinary user.
DAVE_KEY = "dave-key-0000"
DAVE_CONFIG = f"""
auth:
  principals:
    - user_id: dave
      role: user
      key_sha256: {hashlib.sha256(DAVE_KEY.encode()).hexdigest()}
"""

AUTH_PY = """
from langgraph_sdk import Auth

auth = Auth()

USERS = {
    "alice-token": {"identity": "alice", "permissions": ["write"], "team": "red"},
    "bob-token": {"identity": "bob", "permissions": ["write"], "team": "blue"},
    # carol reads the threads of her team: a `$contains` filter
    "carol-token": {"identity": "carol", "permissions": ["team-reader"], "team": "red"},
    # an identity beyond ASCII (it travels to the services as gRPC metadata)
    "jose-token": {"identity": "Jos\u00e9 \u5c71\u7530", "permissions": ["write"], "team": "red"},
    # a user too big for gRPC's metadata (8 KiB soft limit, 16 KiB hard)
    "big-token": {"identity": "big", "permissions": ["write"], "team": "red", "bio": "x" * 20000},
    "roomy-token": {"identity": "roomy", "permissions": ["write"], "bio": "x" * 5000},
}


@auth.authenticate
async def authenticate(authorization: str | None, path: str, method: str):
    scheme, _, token = (authorization or "").partition(" ")
    if token == "teapot":
        raise Auth.exceptions.HTTPException(status_code=418, detail="I am a teapot")
    if token == "crash":
        raise RuntimeError("internal secret: db password hunter2")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return USERS[token]


@auth.on
async def add_owner(ctx: Auth.types.AuthContext, value: dict):
    if "team-reader" in ctx.permissions:
        return {"teams": {"$contains": ctx.user["team"]}}
    filters = {"owner": ctx.user.identity}
    metadata = value.setdefault("metadata", {})
    metadata.update(filters)
    return filters


@auth.on.crons
async def own_crons(ctx: Auth.types.AuthContext, value: dict):
    # more specific than @auth.on: it also marks what it stamped
    metadata = value.setdefault("metadata", {})
    metadata.update({"owner": ctx.user.identity, "stamped_by": "crons"})
    return {"owner": {"$eq": ctx.user.identity}}


@auth.on.assistants.delete
async def no_deletes(ctx: Auth.types.AuthContext, value: dict):
    return False  # more specific than @auth.on: nobody deletes an assistant


@auth.on.store()
async def own_namespace(ctx: Auth.types.AuthContext, value: dict):
    namespace = tuple(value.get("namespace") or ())
    if namespace[:1] == ("limited",):
        raise Auth.exceptions.HTTPException(status_code=429, detail="Slow down")
    assert namespace[:1] != ("forbidden",), "Not your namespace"
    value["namespace"] = (ctx.user.identity, *namespace)
"""

ECHO_PY = """
import asyncio

from typing_extensions import TypedDict
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph_sdk.runtime import ServerRuntime


class State(TypedDict):
    text: str


async def shout(state: State) -> dict:
    if state["text"].startswith("slow"):
        await asyncio.sleep(30)
    if state["text"].startswith("remember"):
        await get_store().aput(("remembered",), state["text"], {"by": "graph"})
    return {"text": state["text"].upper()}


builder = StateGraph(State)
builder.add_node("shout", shout)
builder.add_edge(START, "shout")
builder.add_edge("shout", END)
graph = builder.compile()


class Seen(TypedDict, total=False):
    text: str
    seen: dict


def look(state: Seen, config: RunnableConfig) -> dict:
    configurable = config["configurable"]
    wanted = ("langgraph_auth_user", "langgraph_auth_user_id", "langgraph_auth_permissions")
    return {"seen": {key: configurable.get(key) for key in wanted}}


whoami_builder = StateGraph(Seen)
whoami_builder.add_node("look", look)
whoami_builder.add_edge(START, "look")
whoami_builder.add_edge("look", END)
whoami = whoami_builder.compile()


def teamed(runtime: ServerRuntime):
    # Built for the project's user, reads included: its node says the user's team.
    team_builder = StateGraph(State)
    team_builder.add_node(f"team_{runtime.user['team']}", shout)
    team_builder.add_edge(START, f"team_{runtime.user['team']}")
    return team_builder.compile()
"""


WEBAPP_PY = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route


async def whoami(request):
    return JSONResponse(
        {"identity": request.user.identity, "permissions": list(request.auth.scopes)}
    )


app = Starlette(routes=[Route("/whoami", whoami)])
"""


def write_project(root: Path) -> Path:
    (root / "auth.py").write_text(textwrap.dedent(AUTH_PY))
    (root / "echo.py").write_text(textwrap.dedent(ECHO_PY))
    (root / "webapp.py").write_text(textwrap.dedent(WEBAPP_PY))
    manifest = root / "langgraph.json"
    config = {
        "graphs": {
            "echo": "./echo.py:graph",
            "whoami": "./echo.py:whoami",
            "teamed": "./echo.py:teamed",
        },
        "auth": {"path": "./auth.py:auth"},
        "http": {"app": "./webapp.py:app", "enable_custom_route_auth": True},
    }
    manifest.write_text(json.dumps(config))
    return manifest


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("auth-project")
    manifest = write_project(root)
    (root / "waybill.yaml").write_text(DAVE_CONFIG)
    data_dir = tmp_path_factory.mktemp(f"custom-auth-{request.param}")
    extra = {
        "WAYBILL_GRAPHS": str(manifest),
        "WAYBILL_API_KEY": ADMIN_KEY,
        "WAYBILL_CONFIG": str(root / "waybill.yaml"),
    }
    with stack_in_mode(request.param, data_dir, **extra) as running:
        yield running


def client_for(stack: Stack, token: str) -> LangGraphClient:
    return get_client(url=stack.url, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[LangGraphClient]:
    client = client_for(stack, "alice-token")
    yield client
    await client.aclose()


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[LangGraphClient]:
    client = client_for(stack, "bob-token")
    yield client
    await client.aclose()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def assert_not_found(attempt: Awaitable[Any]) -> None:
    """404, as the SDK reports it (its `wait` raises httpx's own error)."""
    try:
        await attempt
    except NotFoundError:
        return
    except httpx.HTTPStatusError as error:
        assert error.response.status_code == 404
        return
    raise AssertionError("expected a 404")


# ---- authentication ---------------------------------------------------------------------


async def test_a_missing_or_invalid_token_is_401(http: httpx.AsyncClient) -> None:
    missing = await http.post("/threads/search", json={})
    assert missing.status_code == 401
    assert missing.json()["detail"] == "Invalid token"
    wrong = await http.post("/threads/search", json={}, headers=bearer("mallory-token"))
    assert wrong.status_code == 401
    assert (await http.get("/ok")).status_code == 200  # open routes stay open


async def test_custom_routes_are_behind_the_project_s_authenticate(
    http: httpx.AsyncClient,
) -> None:
    mine = await http.get("/whoami", headers=bearer("alice-token"))
    assert mine.json() == {"identity": "alice", "permissions": ["write"]}
    assert (await http.get("/whoami")).status_code == 401


async def test_the_status_a_handler_raises_is_answered(http: httpx.AsyncClient) -> None:
    teapot = await http.post("/threads", json={}, headers=bearer("teapot"))
    assert teapot.status_code == 418
    assert teapot.json()["detail"] == "I am a teapot"


async def test_a_crashing_handler_is_500_without_its_internals(http: httpx.AsyncClient) -> None:
    crashed = await http.post("/threads", json={}, headers=bearer("crash"))
    assert crashed.status_code == 500
    assert "hunter2" not in crashed.text
    assert "RuntimeError" not in crashed.text


async def test_the_operator_key_still_sees_everything(
    alice: LangGraphClient, bob: LangGraphClient, stack: Stack
) -> None:
    mine = await alice.threads.create()
    theirs = await bob.threads.create()
    operator = get_client(url=stack.url, api_key=ADMIN_KEY)
    try:
        seen = {t["thread_id"] for t in await operator.threads.search(limit=1000)}
    finally:
        await operator.aclose()
    assert {mine["thread_id"], theirs["thread_id"]} <= seen


# ---- threads ----------------------------------------------------------------------------


async def test_the_stamped_owner_is_stored(alice: LangGraphClient) -> None:
    thread = await alice.threads.create(metadata={"topic": "x", "owner": "bob"})
    assert thread["metadata"] == {"topic": "x", "owner": "alice"}  # the handler's stamp wins
    assert (await alice.threads.get(thread["thread_id"]))["metadata"]["owner"] == "alice"


async def test_threads_are_isolated(alice: LangGraphClient, bob: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    mine = await alice.threads.create(metadata={"tag": tag})
    theirs = await bob.threads.create(metadata={"tag": tag})
    thread_id = mine["thread_id"]

    found = await alice.threads.search(metadata={"tag": tag})
    assert [t["thread_id"] for t in found] == [thread_id]
    assert await alice.threads.count(metadata={"tag": tag}) == 1
    assert await bob.threads.count(metadata={"tag": tag}) == 1

    await assert_not_found(bob.threads.get(thread_id))
    await assert_not_found(bob.threads.update(thread_id, metadata={"hijacked": True}))
    await assert_not_found(bob.threads.get_state(thread_id))
    await assert_not_found(bob.threads.get_history(thread_id))
    await assert_not_found(bob.threads.delete(thread_id))
    await assert_not_found(bob.threads.copy(thread_id))
    # Nothing bob tried was written: the thread is whole and unchanged.
    kept = await alice.threads.get(thread_id)
    assert kept["metadata"] == {"tag": tag, "owner": "alice"}

    patched = await alice.threads.update(thread_id, metadata={"more": 1})
    assert patched["metadata"]["more"] == 1
    await alice.threads.delete(thread_id)
    with pytest.raises(NotFoundError):
        await alice.threads.get(thread_id)
    assert (await bob.threads.get(theirs["thread_id"]))["metadata"]["owner"] == "bob"


async def test_a_contains_filter(
    alice: LangGraphClient, bob: LangGraphClient, stack: Stack
) -> None:
    tag = uuid.uuid4().hex
    red = await alice.threads.create(metadata={"tag": tag, "teams": ["red", "blue"]})
    await bob.threads.create(metadata={"tag": tag, "teams": ["blue"]})
    carol = client_for(stack, "carol-token")
    try:
        seen = await carol.threads.search(metadata={"tag": tag})
        assert [t["thread_id"] for t in seen] == [red["thread_id"]]
        assert (await carol.threads.get(red["thread_id"]))["thread_id"] == red["thread_id"]
    finally:
        await carol.aclose()


# ---- runs -------------------------------------------------------------------------------


async def test_runs_are_isolated(
    alice: LangGraphClient, bob: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await alice.threads.create())["thread_id"]
    result = await alice.runs.wait(thread_id, "echo", input={"text": "hi"})
    assert result == {"text": "HI"}
    parts = [part async for part in alice.runs.stream(thread_id, "echo", input={"text": "yo"})]
    assert parts[-1].data == {"text": "YO"}
    run = await alice.runs.create(thread_id, "echo", input={"text": "bg"}, metadata={"m": 1})
    assert run["metadata"]["owner"] == "alice"  # the stamp reaches the run too
    assert await alice.runs.join(thread_id, run["run_id"]) == {"text": "BG"}
    assert len(await alice.runs.list(thread_id)) == 3
    assert (await alice.threads.get_state(thread_id))["values"] == {"text": "BG"}
    assert len(await alice.threads.get_history(thread_id)) > 0

    await assert_not_found(bob.runs.create(thread_id, "echo", input={"text": "intrude"}))
    await assert_not_found(bob.runs.wait(thread_id, "echo", input={"text": "intrude"}))
    await assert_not_found(bob.runs.list(thread_id))
    await assert_not_found(bob.runs.get(thread_id, run["run_id"]))
    await assert_not_found(bob.runs.join(thread_id, run["run_id"]))
    await assert_not_found(bob.runs.cancel(thread_id, run["run_id"]))
    await assert_not_found(bob.runs.delete(thread_id, run["run_id"]))
    for path in (
        f"/threads/{thread_id}/runs/{run['run_id']}/events",
        f"/threads/{thread_id}/runs/{run['run_id']}/receipt",
        f"/threads/{thread_id}/outputs",
        f"/threads/{thread_id}/token-usage",
    ):  # Waybill's own routes on a thread go through the same handlers
        assert (await http.get(path, headers=bearer("bob-token"))).status_code == 404, path
        assert (await http.get(path, headers=bearer("alice-token"))).status_code == 200, path
    with pytest.raises(NotFoundError):
        async for _ in bob.runs.stream(thread_id, "echo", input={"text": "intrude"}):
            pass
    with pytest.raises(NotFoundError):
        async for _ in bob.runs.join_stream(thread_id, run["run_id"]):
            pass
    assert len(await alice.runs.list(thread_id)) == 3  # bob started nothing


async def test_thread_stream_sessions_go_through_the_handlers(
    alice: LangGraphClient, bob: LangGraphClient, http: httpx.AsyncClient
) -> None:
    async with alice.threads.stream(assistant_id="echo") as session:
        await session.run.start(input={"text": "streamed"})
        await session.output.with_timeout(30)
    thread_id = session.thread_id
    thread = await alice.threads.get(thread_id)  # created by run.start, as alice's
    assert thread["metadata"]["owner"] == "alice"
    async with bob.threads.stream(thread_id, assistant_id="echo") as intruder:
        with pytest.raises(RuntimeError, match="Protocol error"):
            await intruder.run.start(input={"text": "intrude"})
    reply = await http.post(
        f"/threads/{thread_id}/stream/events",
        json={"channels": ["values"]},
        headers=bearer("bob-token"),
    )
    assert reply.status_code == 404
    assert len(await alice.runs.list(thread_id)) == 1  # bob started nothing


async def test_cancel_is_the_owners_alone(alice: LangGraphClient, bob: LangGraphClient) -> None:
    thread_id = (await alice.threads.create())["thread_id"]
    run = await alice.runs.create(thread_id, "echo", input={"text": "slow one"})
    await wait_for_status(alice, thread_id, run["run_id"], "running")
    await assert_not_found(bob.runs.cancel(thread_id, run["run_id"]))
    await assert_not_found(bob.runs.cancel_many(thread_id=thread_id, run_ids=[run["run_id"]]))
    assert (await alice.runs.get(thread_id, run["run_id"]))["status"] == "running"
    await alice.runs.cancel(thread_id, run["run_id"], wait=True)
    assert (await alice.runs.get(thread_id, run["run_id"]))["status"] == "interrupted"


async def test_a_stateless_run_belongs_to_its_creator(
    alice: LangGraphClient, bob: LangGraphClient
) -> None:
    run = await alice.runs.create(
        None, "echo", input={"text": "kept"}, on_completion="keep", metadata={"s": 1}
    )
    assert await alice.runs.join(run["thread_id"], run["run_id"]) == {"text": "KEPT"}
    thread = await alice.threads.get(run["thread_id"])
    assert thread["metadata"]["owner"] == "alice"
    with pytest.raises(NotFoundError):
        await bob.threads.get(run["thread_id"])
    assert await bob.runs.wait(None, "echo", input={"text": "own"}) == {"text": "OWN"}


# ---- the most specific handler ------------------------------------------------------------


async def test_an_action_handler_returning_false_is_403(alice: LangGraphClient) -> None:
    assistant = await alice.assistants.create("echo", name=f"mine-{uuid.uuid4().hex[:6]}")
    with pytest.raises(PermissionDeniedError):
        await alice.assistants.delete(assistant["assistant_id"])
    assert (await alice.assistants.get(assistant["assistant_id"]))["name"] == assistant["name"]


# ---- assistants -------------------------------------------------------------------------


async def test_assistants_are_isolated(alice: LangGraphClient, bob: LangGraphClient) -> None:
    name = f"private-{uuid.uuid4().hex[:8]}"
    mine = await alice.assistants.create("echo", name=name, metadata={"k": "v"})
    assert mine["metadata"] == {"k": "v", "owner": "alice"}
    assistant_id = mine["assistant_id"]

    assert [a["assistant_id"] for a in await alice.assistants.search(name=name)] == [assistant_id]
    assert await alice.assistants.count(metadata={"k": "v"}) >= 1
    assert await bob.assistants.search(name=name) == []
    assert await bob.assistants.count(metadata={"owner": "alice"}) == 0
    await assert_not_found(bob.assistants.get(assistant_id))
    await assert_not_found(bob.assistants.get_schemas(assistant_id))
    await assert_not_found(bob.assistants.get_versions(assistant_id))
    await assert_not_found(bob.assistants.update(assistant_id, name="stolen"))
    await assert_not_found(bob.assistants.set_latest(assistant_id, 1))

    # nor run it (a graph's system assistant stays open to all, as on the Platform)
    thread_id = (await bob.threads.create())["thread_id"]
    await assert_not_found(bob.runs.create(thread_id, assistant_id, input={"text": "x"}))
    await assert_not_found(bob.crons.create(assistant_id, schedule="0 0 1 1 *"))
    assert await bob.runs.list(thread_id) == []
    assert await alice.runs.wait(None, assistant_id, input={"text": "mine"}) == {"text": "MINE"}

    updated = await alice.assistants.update(assistant_id, name=f"{name}-2")
    assert updated["name"] == f"{name}-2"
    assert updated["metadata"]["owner"] == "alice"
    assert (await alice.assistants.get(assistant_id))["name"] == f"{name}-2"


# ---- crons ------------------------------------------------------------------------------


async def test_crons_are_isolated(alice: LangGraphClient, bob: LangGraphClient) -> None:
    thread_id = (await alice.threads.create())["thread_id"]
    on_thread = await alice.crons.create_for_thread(
        thread_id, "echo", schedule="0 0 1 1 *", input={"text": "yearly"}
    )
    # @auth.on.crons, more specific than @auth.on, stamped it
    assert on_thread["metadata"] == {"owner": "alice", "stamped_by": "crons"}
    stateless = await alice.crons.create("echo", schedule="0 0 1 1 *", input={"text": "x"})
    cron_ids = {on_thread["cron_id"], stateless["cron_id"]}

    assert {c["cron_id"] for c in await alice.crons.search(limit=100)} >= cron_ids
    assert not cron_ids & {c["cron_id"] for c in await bob.crons.search(limit=100)}
    assert await bob.crons.count(thread_id=thread_id) == 0
    assert await alice.crons.count(thread_id=thread_id) == 1
    await assert_not_found(bob.crons.update(stateless["cron_id"], schedule="0 0 2 1 *"))
    await assert_not_found(bob.crons.delete(stateless["cron_id"]))
    # bob cannot hang a cron on alice's thread either
    await assert_not_found(bob.crons.create_for_thread(thread_id, "echo", schedule="0 0 1 1 *"))
    assert await alice.crons.count(thread_id=thread_id) == 1

    updated = await alice.crons.update(stateless["cron_id"], schedule="0 0 2 1 *")
    assert updated["schedule"] == "0 0 2 1 *"
    for cron_id in cron_ids:
        await alice.crons.delete(cron_id)
    assert not cron_ids & {c["cron_id"] for c in await alice.crons.search(limit=100)}


# ---- store ------------------------------------------------------------------------------


async def test_the_store_is_scoped_by_the_store_handler(
    alice: LangGraphClient, bob: LangGraphClient
) -> None:
    namespace = ["notes", uuid.uuid4().hex]
    await alice.store.put_item(namespace, "plan", {"text": "alice's"})
    await bob.store.put_item(namespace, "plan", {"text": "bob's"})

    # the handler put each user's items under their identity: no clash, no leak
    mine = await alice.store.get_item(namespace, "plan")
    assert mine["value"] == {"text": "alice's"}
    assert mine["namespace"] == ["alice", *namespace]
    assert (await bob.store.get_item(namespace, "plan"))["value"] == {"text": "bob's"}

    found = await alice.store.search_items(namespace)
    assert [item["value"] for item in found["items"]] == [{"text": "alice's"}]
    listed = await bob.store.list_namespaces(prefix=["notes"])
    assert listed["namespaces"] == [["bob", *namespace]]

    await bob.store.delete_item(namespace, "plan")
    assert await bob.store.get_item(namespace, "plan") is None
    assert (await alice.store.get_item(namespace, "plan"))["value"] == {"text": "alice's"}


async def test_waybills_own_users_keep_their_store_prefix_beside_project_auth(
    stack: Stack, alice: LangGraphClient
) -> None:
    """No project handler runs for Waybill's own keys, so an ordinary principal of the
    config stays in its own prefix and never reaches the project users' items."""
    namespace = ["diary", uuid.uuid4().hex]
    await alice.store.put_item(namespace, "secret", {"text": "alice's"})
    dave = get_client(url=stack.url, api_key=DAVE_KEY)
    try:
        await dave.store.put_item(namespace, "own", {"text": "dave's"})
        seen = await dave.store.search_items([], limit=100)
        assert [item["value"] for item in seen["items"]] == [{"text": "dave's"}]
        assert await dave.store.get_item(["alice", *namespace], "secret") is None
        listed = await dave.store.list_namespaces(prefix=["alice"])
        assert listed["namespaces"] == []
    finally:
        await dave.aclose()
    mine = await alice.store.search_items(namespace)
    assert [item["value"] for item in mine["items"]] == [{"text": "alice's"}]


async def test_an_identity_beyond_ascii_is_served(stack: Stack) -> None:
    jose = client_for(stack, "jose-token")
    try:
        thread = await jose.threads.create()
        assert thread["metadata"]["owner"] == "Jos\u00e9 \u5c71\u7530"
        found = await jose.threads.get(thread["thread_id"])
        assert found["thread_id"] == thread["thread_id"]
        result = await jose.runs.wait(thread["thread_id"], "whoami", input={})
        assert result["seen"]["langgraph_auth_user_id"] == "Jos\u00e9 \u5c71\u7530"
    finally:
        await jose.aclose()


async def test_a_user_too_big_for_grpc_metadata_is_refused_at_authentication(
    http: httpx.AsyncClient,
) -> None:
    """A user of 20000 bytes passes gRPC's metadata limits (8 KiB soft: calls fail at
    random above it; 16 KiB hard: every call fails). Before, its calls answered a
    misleading 429 (RESOURCE_EXHAUSTED); the reference, one process, has no such
    limit and serves it. Now a clear 400 at authentication, and nothing is
    created; 5000 bytes are served."""
    refused = await http.post("/threads", json={}, headers=bearer("big-token"))
    assert refused.status_code == 400
    assert "at most 6144" in refused.json()["detail"]
    owned = await http.post(
        "/threads/search", json={"metadata": {"owner": "big"}}, headers=OPERATOR
    )
    assert owned.json() == []
    roomy = await http.post("/threads", json={}, headers=bearer("roomy-token"))
    assert roomy.status_code == 200, roomy.text
    mine = await http.post("/threads/search", json={}, headers=bearer("roomy-token"))
    assert [t["thread_id"] for t in mine.json()] == [roomy.json()["thread_id"]]


async def test_do_nothing_does_not_hand_over_anothers_assistant(
    alice: LangGraphClient, bob: LangGraphClient
) -> None:
    assistant_id = str(uuid.uuid4())
    await alice.assistants.create("echo", assistant_id=assistant_id, config={"k": "alice"})
    again = await alice.assistants.create("echo", assistant_id=assistant_id, if_exists="do_nothing")
    assert again["config"]["k"] == "alice"
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await bob.assistants.create("echo", assistant_id=assistant_id, if_exists="do_nothing")
    assert refused.value.response.status_code == 409
    assert "alice" not in refused.value.response.text


async def test_a_handler_s_refusals_answer_their_status(
    http: httpx.AsyncClient, alice: LangGraphClient
) -> None:
    item = {"key": "k", "value": {"v": 1}}
    limited = await http.put(
        "/store/items", json={**item, "namespace": ["limited"]}, headers=bearer("alice-token")
    )
    assert (limited.status_code, limited.json()["detail"]) == (429, "Slow down")
    forbidden = await http.put(
        "/store/items", json={**item, "namespace": ["forbidden"]}, headers=bearer("alice-token")
    )
    assert (forbidden.status_code, forbidden.json()["detail"]) == (403, "Not your namespace")
    for namespace in (["limited"], ["forbidden"], ["alice", "limited"]):  # nothing written
        found = await http.post(
            "/store/items/search", json={"namespace_prefix": namespace}, headers=OPERATOR
        )
        assert found.json()["items"] == []


async def test_a_graph_sees_the_store_as_on_the_platform(
    alice: LangGraphClient, http: httpx.AsyncClient
) -> None:
    # No per-user prefix with the project's auth: what a graph writes at
    # ("remembered",) is there, where an operator (no handler) reads it.
    text = f"remember-{uuid.uuid4().hex}"
    assert await alice.runs.wait(None, "echo", input={"text": text}) == {"text": text.upper()}
    found = await http.get(
        "/store/items", params={"namespace": "remembered", "key": text}, headers=OPERATOR
    )
    assert found.status_code == 200
    assert found.json()["value"] == {"by": "graph"}


async def test_a_factory_sees_the_project_s_user_on_reads_too(alice: LangGraphClient) -> None:
    mine = await alice.assistants.create("teamed", name=f"teamed-{uuid.uuid4().hex[:6]}")
    drawn = await alice.assistants.get_graph(mine["assistant_id"])
    assert "team_red" in {node["id"] for node in drawn["nodes"]}


async def test_a_run_knows_the_project_s_user(alice: LangGraphClient) -> None:
    result = await alice.runs.wait(None, "whoami", input={"text": "?"})
    assert result["seen"] == {
        "langgraph_auth_user": {
            "identity": "alice",
            "display_name": "alice",
            "is_authenticated": True,
            "permissions": ["write"],
            "team": "red",
        },
        "langgraph_auth_user_id": "alice",
        "langgraph_auth_permissions": ["write"],
    }
