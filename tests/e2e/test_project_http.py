"""The project's `http` section: `http.app` served beside the API, `cors`, the
`disable_*` switches, `enable_custom_route_auth` and `mount_prefix`, on real
gateways (one stack, further gateways with other `langgraph.json` files)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from tests.support.stacks import free_port, running_stack, stack_env, start_second_gateway
from waybill.common.launch import PYTHON, Stack

KEY = "http-test-key"
HEADERS = {"x-api-key": KEY}

GRAPH_PY = """
import json

import typing_extensions
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph


class State(typing_extensions.TypedDict):
    text: str


def shout(state: State) -> dict:
    return {"text": state["text"].upper()}


def seen_headers(state: State, config: RunnableConfig) -> dict:
    configurable = config["configurable"]
    names = ("x-team-name", "x-team-secret", "x-api-key", "user-agent", "x-other")
    return {"text": json.dumps({name: configurable.get(name) for name in names})}


def one_node(name, node):
    builder = StateGraph(State)
    builder.add_node(name, node)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile()


graph = one_node("shout", shout)
headers_graph = one_node("seen_headers", seen_headers)
"""

# The project's web app: a route of its own, one shadowing /info, one trying to
# shadow /ok, a middleware, and a lifespan whose state reaches the routes.
WEBAPP_PY = """
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.middleware.base import BaseHTTPMiddleware

from shared_words import GREETING  # a local `dependencies` path of the project


@asynccontextmanager
async def lifespan(app):
    app.state.opened = "by the app's lifespan"
    yield {"greeting": GREETING}


app = FastAPI(lifespan=lifespan)


class Stamp(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        response = await call_next(request)
        response.headers["x-project-middleware"] = "seen"
        return response


app.add_middleware(Stamp)


@app.get("/hello/{name}")
async def hello(name: str, request: Request) -> dict:
    user = request.scope.get("user")
    return {
        "hello": name,
        "greeting": request.state.greeting,
        "opened": request.app.state.opened,
        "user": user.display_name if user is not None else None,
    }


@app.get("/info")
async def info() -> dict:
    return {"shadowed": True}


@app.get("/ok")
async def not_ok() -> dict:
    return {"ok": False}
"""


def write_project(root: Path, http: dict[str, Any]) -> Path:
    """A project with a graph, a web app and a local dependency; its langgraph.json."""
    (root / "graph.py").write_text(textwrap.dedent(GRAPH_PY))
    (root / "webapp.py").write_text(textwrap.dedent(WEBAPP_PY))
    (root / "libs").mkdir(exist_ok=True)
    (root / "libs" / "shared_words.py").write_text('GREETING = "hello from libs"\n')
    manifest = root / "langgraph.json"
    graphs = {"shout": "./graph.py:graph", "seen_headers": "./graph.py:headers_graph"}
    config = {"graphs": graphs, "dependencies": [".", "./libs"]}
    manifest.write_text(json.dumps({**config, "http": http}))
    return manifest


CORS = {
    "allow_origins": ["https://app.example"],
    "allow_methods": ["GET", "POST"],
    "allow_headers": ["x-api-key", "content-type"],
    "allow_credentials": True,
    "expose_headers": ["x-project-middleware"],
    "max_age": 123,
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    http = {"app": "./webapp.py:app", "cors": CORS, "disable_store": True}
    http["disable_webhooks"] = True
    http["configurable_headers"] = {
        "includes": ["x-team-*", "x-api-key", "user-agent"],
        "excludes": ["x-team-secret"],
    }
    manifest = write_project(tmp_path_factory.mktemp("project-http"), http)
    data_dir = tmp_path_factory.mktemp("stack-http")
    env = stack_env(data_dir, WAYBILL_GRAPHS=str(manifest), WAYBILL_API_KEY=KEY)
    with running_stack(env, data_dir) as running:
        yield running


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        yield raw


def other_gateway(stack: Stack, root: Path, http: dict[str, Any]) -> str:
    """A second gateway of the stack serving another `http` section; its URL."""
    return start_second_gateway(stack, WAYBILL_GRAPHS=str(write_project(root, http)))


# ---- http.app ------------------------------------------------------------------


async def test_the_project_app_is_served_with_its_lifespan_and_dependencies(
    http: httpx.AsyncClient,
) -> None:
    reply = await http.get("/hello/ada")  # no key: custom routes are open by default
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "hello": "ada",
        "greeting": "hello from libs",
        "opened": "by the app's lifespan",
        "user": None,
    }


async def test_api_routes_keep_their_auth_beside_the_custom_ones(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url) as raw:
        assert (await raw.post("/threads", json={})).status_code == 401
    client = get_client(url=stack.url, api_key=KEY)
    try:
        thread = await client.threads.create()
        result = await client.runs.wait(thread["thread_id"], "shout", input={"text": "hi"})
        assert result == {"text": "HI"}
    finally:
        await client.aclose()


async def test_custom_routes_shadow_info_but_not_ok(http: httpx.AsyncClient) -> None:
    assert (await http.get("/info")).json() == {"shadowed": True}
    assert (await http.get("/ok")).json() == {"ok": True}


async def test_the_project_middleware_wraps_every_route(http: httpx.AsyncClient) -> None:
    for path in ("/hello/x", "/ok"):
        assert (await http.get(path)).headers["x-project-middleware"] == "seen"
    assert (await http.post("/threads", json={}, headers=HEADERS)).headers[
        "x-project-middleware"
    ] == "seen"


# ---- cors and disable_* -------------------------------------------------------------


async def test_cors_follows_the_project_settings(http: httpx.AsyncClient) -> None:
    preflight = {
        "origin": "https://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "x-api-key",
    }
    allowed = await http.options("/threads", headers=preflight)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert allowed.headers["access-control-allow-credentials"] == "true"
    assert allowed.headers["access-control-max-age"] == "123"
    assert set(allowed.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST"}

    other = await http.options("/threads", headers={**preflight, "origin": "https://evil.example"})
    assert other.status_code == 400
    deleting = await http.options(
        "/threads/x", headers={**preflight, "access-control-request-method": "DELETE"}
    )
    assert deleting.status_code == 400

    simple = await http.get("/hello/x", headers={"origin": "https://app.example"})
    assert simple.headers["access-control-expose-headers"] == "x-project-middleware"


async def test_disabled_route_groups_answer_404(stack: Stack, http: httpx.AsyncClient) -> None:
    put = await http.put(
        "/store/items", json={"namespace": ["a"], "key": "k", "value": {}}, headers=HEADERS
    )
    assert put.status_code == 404
    assert (await http.get("/memory", headers=HEADERS)).status_code == 404  # in the store
    client = get_client(url=stack.url, api_key=KEY)
    try:
        with pytest.raises(NotFoundError):
            await client.store.search_items(["a"])
        thread = await client.threads.create()  # threads stay
    finally:
        await client.aclose()
    hooks = await http.get(f"/threads/{thread['thread_id']}/webhooks", headers=HEADERS)
    assert hooks.status_code == 404


async def test_other_switches_take_their_groups_away(stack: Stack, tmp_path: Path) -> None:
    url = other_gateway(
        stack,
        tmp_path,
        {
            "app": "./webapp.py:app",
            "disable_assistants": True,
            "disable_threads": True,
            "disable_runs": True,
            "disable_meta": True,
            "disable_mcp": True,
            "disable_a2a": True,
            "disable_ui": True,
        },
    )
    async with httpx.AsyncClient(base_url=url, headers=HEADERS) as raw:
        # disable_meta: every meta route may be shadowed, /ok too (as on the Platform).
        assert (await raw.get("/ok")).json() == {"ok": False}
        assert (await raw.get("/info")).json() == {"shadowed": True}
        assert (await raw.get("/openapi.json")).json()["info"]["title"] == "FastAPI"  # the app's
        for method, path in (
            ("POST", "/assistants/search"),
            ("POST", "/threads"),
            ("GET", "/threads/00000000-0000-0000-0000-000000000000/state"),
            ("POST", "/runs/wait"),
            ("GET", "/threads/00000000-0000-0000-0000-000000000000/runs"),
            ("POST", "/runs/crons/search"),
            ("GET", "/metrics"),
            ("POST", "/mcp"),
            ("POST", "/a2a/00000000-0000-0000-0000-000000000000"),
            ("GET", "/.well-known/agent-card.json"),
        ):
            reply = await raw.request(method, path, json={})
            assert reply.status_code == 404, (method, path, reply.text)
        stored = await raw.put("/store/items", json={"namespace": ["a"], "key": "k", "value": {}})
        assert stored.status_code == 204


async def test_a_run_gets_the_headers_configurable_headers_picks(stack: Stack) -> None:
    headers = {"x-team-name": "blue", "x-team-secret": "s", "x-other": "o", "user-agent": "ua/1"}
    client = get_client(url=stack.url, api_key=KEY, headers=headers)
    try:
        thread = await client.threads.create()
        result = await client.runs.wait(thread["thread_id"], "seen_headers", input={"text": ""})
    finally:
        await client.aclose()
    seen = json.loads(result["text"])  # type: ignore[index,call-overload]
    # Included by pattern, minus the excluded one; never the API key.
    assert seen == {
        "x-team-name": "blue",
        "x-team-secret": None,
        "x-api-key": None,
        "user-agent": "ua/1",
        "x-other": None,
    }


async def test_disable_webhooks_drops_run_and_cron_webhooks(stack: Stack) -> None:
    client = get_client(url=stack.url, api_key=KEY)
    try:
        thread = await client.threads.create()
        run = await client.runs.create(
            thread["thread_id"], "shout", input={"text": "x"}, webhook="https://hooks.example/x"
        )
        await client.runs.join(thread["thread_id"], run["run_id"])
        stored = await client.runs.get(thread["thread_id"], run["run_id"])
        cron = await client.crons.create(
            "shout", schedule="0 0 1 1 *", input={"text": "x"}, webhook="https://hooks.example/x"
        )
        await client.crons.delete(cron["cron_id"])
    finally:
        await client.aclose()
    assert stored["status"] == "success"
    assert stored["kwargs"]["webhook"] is None
    assert "webhook" not in cron["payload"]
    assert cron["payload"]["input"] == {"text": "x"}


# ---- enable_custom_route_auth and mount_prefix -------------------------------------


async def test_custom_route_auth_and_a_mount_prefix(stack: Stack, tmp_path: Path) -> None:
    http = {
        "app": "./webapp.py:app",
        "enable_custom_route_auth": True,
        "mount_prefix": "/api",
        "middleware_order": "auth_first",
    }
    url = other_gateway(stack, tmp_path, http)
    async with httpx.AsyncClient(base_url=url) as raw:
        assert (await raw.get("/ok")).status_code == 200  # health checks stay at the root
        assert (await raw.get("/threads/x")).status_code == 404  # nothing else is
        refused = await raw.get("/api/hello/ada")
        assert refused.status_code == 401
        # auth_first: the project's middleware runs after auth, on its own routes only.
        assert "x-project-middleware" not in refused.headers
        reply = await raw.get("/api/hello/ada", headers=HEADERS)
        assert reply.status_code == 200
        assert reply.json()["user"] == "admin"
        assert reply.headers["x-project-middleware"] == "seen"
        api = await raw.post("/api/threads", json={}, headers=HEADERS)
        assert api.status_code == 200
        assert "x-project-middleware" not in api.headers
    client = get_client(url=f"{url}/api", api_key=KEY)
    try:
        thread = await client.threads.create()
        result = await client.runs.wait(thread["thread_id"], "shout", input={"text": "pre"})
        assert result == {"text": "PRE"}
    finally:
        await client.aclose()


# ---- invalid configurations stop the gateway with the reason ------------------------


def gateway_refuses(root: Path, http: dict[str, Any], extra_files: dict[str, str]) -> str:
    """Start a lone gateway on a project; it must exit non-zero. Its stderr."""
    for name, text in extra_files.items():
        (root / name).write_text(text)
    manifest = write_project(root, http)
    env = {**os.environ, "WAYBILL_GRAPHS": str(manifest), "WAYBILL_HTTP_PORT": str(free_port())}
    done = subprocess.run(
        [*PYTHON, "-m", "waybill.gateway.server"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4, done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("http", "files", "reason"),
    [
        ({"app": "./broken.py:app"}, {"broken.py": "import no_such_module\n"}, "no_such_module"),
        ({"app": "./missing.py:app"}, {}, "missing.py"),
        ({"app": "./webapp.py:nope"}, {}, "has no attribute 'nope'"),
        ({"app": "./plain.py:app"}, {"plain.py": "app = 42\n"}, "not a Starlette or FastAPI app"),
        ({"cors": {"allow_origins": "*"}}, {}, "http.cors.allow_origins: must be a list"),
        ({"disable_runs": "yes"}, {}, "http.disable_runs: Input should be a valid boolean"),
        ({"mount_prefix": "api"}, {}, "must start with '/'"),
    ],
)
def test_an_invalid_http_section_stops_the_gateway(
    tmp_path: Path, http: dict[str, Any], files: dict[str, str], reason: str
) -> None:
    stderr = gateway_refuses(tmp_path, http, files)
    assert reason in stderr, stderr
    assert "Traceback" not in stderr
