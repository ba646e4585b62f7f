"""What LangGraph Studio reads of a server, answered as LangGraph Platform answers it:
`/info`, an assistant's graph drawn at each `xray` depth, its schemas, its
subgraphs, and the CORS (and private-network) preflight of Studio's page.

The expected answers in studio_graphs/reference.json were recorded from
langgraph-api 0.16.7 (`langgraph dev`) serving the same graphs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from starlette.testclient import TestClient

from tests.support.paths import FIXTURES
from tests.support.stacks import stack_in_mode
from waybill.cli.main import open_to_studio
from waybill.common.codec import system_assistant_id
from waybill.common.launch import Stack
from waybill.common.settings import Settings
from waybill.gateway.app import create_app

GRAPHS = FIXTURES / "studio_graphs"
REFERENCE: dict[str, Any] = json.loads((GRAPHS / "reference.json").read_text())
STUDIO = "https://smith.langchain.com"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def studio_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The studio graphs, Studio's origin named, private-network preflights answered."""
    with stack_in_mode(
        request.param,
        tmp_path_factory.mktemp(f"stack-studio-{request.param}"),
        WAYBILL_GRAPHS=str(GRAPHS / "langgraph.json"),
        WAYBILL_CORS_ORIGINS=STUDIO,
        WAYBILL_ALLOW_PRIVATE_NETWORK="true",
    ) as running:
        yield running


@pytest.fixture
async def studio(studio_stack: Stack) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=studio_stack.url, timeout=30)
    try:
        yield sdk
    finally:
        await sdk.aclose()


@pytest.fixture
async def raw(studio_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=studio_stack.url, timeout=30) as client:
        yield client


# ---- /info ---------------------------------------------------------------------------


async def test_info_has_the_platform_keys_and_says_what_waybill_offers(
    raw: httpx.AsyncClient,
) -> None:
    info = (await raw.get("/info")).json()
    reference = REFERENCE["info"]
    assert info.keys() == reference.keys()
    assert info["flags"].keys() == reference["flags"].keys()
    assert info["host"] == reference["host"]  # self-hosted, nothing of LangSmith's to name
    # Assistants and crons are served; LangSmith tracing is not (nor its replicas,
    # nor a tracing session given with a run).
    assert info["flags"] == {
        "assistants": True,
        "crons": True,
        "langsmith": False,
        "langsmith_tracing_replicas": False,
        "langsmith_tracing_session_on_runs": False,
    }
    assert info["langgraph_py_version"] == reference["langgraph_py_version"]


# ---- the graph at each xray depth ----------------------------------------------------


@pytest.mark.parametrize("graph_id", ["deep", "agent", "contextual"])
@pytest.mark.parametrize("xray", [None, False, True, 1, 2, 3])
async def test_the_drawing_at_each_xray_depth_is_the_platforms(
    studio: LangGraphClient, graph_id: str, xray: bool | int | None
) -> None:
    """`deep` nests two levels: xray=1 opens `writer`, 2 (and true) opens `writer:inner`
    too; no node carries its Python class path (`data.id`)."""
    assistant_id = system_assistant_id(graph_id)
    drawing = await (
        studio.assistants.get_graph(assistant_id)
        if xray is None
        else studio.assistants.get_graph(assistant_id, xray=xray)
    )
    key = "absent" if xray is None else str(xray).lower()
    assert drawing == REFERENCE["graph"][graph_id][key]


async def test_xray_one_level_opens_only_the_first_subgraph(studio: LangGraphClient) -> None:
    nodes = {n["id"] for n in (await studio.assistants.get_graph("deep", xray=1))["nodes"]}
    assert "writer:inner" in nodes and "writer:inner:draft" not in nodes
    deeper = {n["id"] for n in (await studio.assistants.get_graph("deep", xray=2))["nodes"]}
    assert "writer:inner:draft" in deeper and "writer:inner" not in deeper


@pytest.mark.parametrize("xray", ["banana", "0", "-1", "1.5", "TRUE", "yes"])
async def test_an_xray_that_is_no_depth_is_a_422(raw: httpx.AsyncClient, xray: str) -> None:
    reply = await raw.get(f"/assistants/{system_assistant_id('deep')}/graph", params={"xray": xray})
    assert reply.status_code == 422
    assert reply.json() == {"detail": "Invalid xray value"}


async def test_a_depth_past_any_graph_draws_every_level(raw: httpx.AsyncClient) -> None:
    reply = await raw.get("/assistants/deep/graph", params={"xray": str(10**20)})
    assert reply.status_code == 200
    assert reply.json() == REFERENCE["graph"]["deep"]["true"]


@pytest.mark.parametrize(
    "path", ["graph", "graph?xray=true", "subgraphs", "subgraphs?recurse=true"]
)
async def test_a_graph_that_cannot_be_drawn_is_a_422(raw: httpx.AsyncClient, path: str) -> None:
    reply = await raw.get(f"/assistants/{system_assistant_id('undrawable')}/{path}")
    assert reply.status_code == 422
    assert reply.json() == {"detail": "The graph does not support visualization"}
    schemas = await raw.get(f"/assistants/{system_assistant_id('undrawable')}/schemas")
    assert schemas.json()["input_schema"]["title"] == "Note"


# ---- schemas and subgraphs -----------------------------------------------------------


@pytest.mark.parametrize("graph_id", ["deep", "contextual", "agent"])
async def test_schemas_are_derived_as_the_platform_derives_them(
    studio: LangGraphClient, graph_id: str
) -> None:
    """State: every streamed channel, none required, titled `<graph_id>_state`; config:
    only `configurable` ({} without one); context: the graph's context schema."""
    schemas = await studio.assistants.get_schemas(system_assistant_id(graph_id))
    for key, expected in REFERENCE["schemas"][graph_id].items():
        assert schemas[key] == expected, key
    outline = REFERENCE["state_schema_outline"].get(graph_id)
    if outline is not None:
        state = schemas["state_schema"]
        assert state["title"] == outline["title"]
        assert list(state["properties"]) == outline["properties"]
        assert state.get("required") == outline["required"]


async def test_a_context_schema_is_offered_as_the_config_form_too(
    studio: LangGraphClient,
) -> None:
    schemas = await studio.assistants.get_schemas(system_assistant_id("contextual"))
    assert schemas["context_schema"]["title"] == "Settings"
    assert schemas["context_schema"]["required"] == ["user_name"]
    assert schemas["config_schema"] == schemas["context_schema"]


@pytest.mark.parametrize(
    ("namespace", "recurse", "found"),
    [
        (None, False, ["writer"]),
        (None, True, ["writer", "writer|inner"]),
        ("writer", False, ["writer"]),
        ("writer", True, ["writer"]),
        ("writer|inner", False, []),
        ("writer|inner", True, ["writer|inner"]),
        ("nope", True, []),
    ],
)
async def test_subgraphs_by_namespace_and_recursion(
    studio: LangGraphClient, namespace: str | None, recurse: bool, found: list[str]
) -> None:
    subgraphs = await studio.assistants.get_subgraphs(
        system_assistant_id("deep"), namespace=namespace, recurse=recurse
    )
    assert list(subgraphs) == found
    recorded = REFERENCE["subgraphs"]["deep?recurse=true"]
    for name, schemas in subgraphs.items():
        assert schemas == recorded[name], name  # titled middle_state, inner_state


async def test_a_graph_without_subgraphs_has_none(studio: LangGraphClient) -> None:
    for graph_id in ("agent", "contextual"):
        assistant_id = system_assistant_id(graph_id)
        assert await studio.assistants.get_subgraphs(assistant_id, recurse=True) == {}


# ---- a factory is called with the assistant's config ---------------------------------


async def test_a_factory_draws_the_graph_of_the_assistants_config(
    studio: LangGraphClient,
) -> None:
    """As on the Platform, the factory is called with the assistant's config, so
    Studio draws the graph each assistant runs (the system one has no config)."""
    shaped = REFERENCE["shaped"]
    system = system_assistant_id("shaped")
    assert await studio.assistants.get_graph(system) == shaped["system"]

    steps = await studio.assistants.create(
        "shaped", config={"configurable": {"steps": ["fetch", "sum"]}}
    )
    assert await studio.assistants.get_graph(steps["assistant_id"]) == shaped["steps"]
    assert await studio.assistants.get_schemas(steps["assistant_id"]) == shaped["steps schemas"]

    nested = await studio.assistants.create(
        "shaped", config={"configurable": {"steps": ["fetch", "sum"], "nested": True}}
    )
    nested_id = nested["assistant_id"]
    assert await studio.assistants.get_graph(nested_id) == shaped["nested"]
    assert await studio.assistants.get_graph(nested_id, xray=True) == shaped["nested xray"]
    assert await studio.assistants.get_subgraphs(nested_id) == shaped["nested subgraphs"]
    for created in (steps, nested):
        await studio.assistants.delete(created["assistant_id"])


# ---- Studio's page reaching the server -----------------------------------------------


def preflight_headers(origin: str) -> dict[str, str]:
    """What Chrome sends before Studio's page (public) calls a loopback server."""
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-api-key",
        "Access-Control-Request-Private-Network": "true",
    }


async def test_studio_origin_passes_the_private_network_preflight(
    raw: httpx.AsyncClient,
) -> None:
    reply = await raw.options("/assistants/search", headers=preflight_headers(STUDIO))
    assert reply.status_code == 200, reply.text
    assert reply.headers["access-control-allow-private-network"] == "true"
    assert reply.headers["access-control-allow-origin"] == STUDIO
    # Named origins may send credentials, as LangGraph Platform's default allows.
    assert reply.headers["access-control-allow-credentials"] == "true"
    assert "x-api-key" in reply.headers["access-control-allow-headers"]


async def test_an_origin_not_named_is_refused(raw: httpx.AsyncClient) -> None:
    reply = await raw.options("/assistants/search", headers=preflight_headers("http://evil.test"))
    assert reply.status_code == 400
    assert "origin" in reply.text


async def test_studio_reads_info_and_pagination_across_origins(raw: httpx.AsyncClient) -> None:
    info = await raw.get("/info", headers={"Origin": STUDIO})
    assert info.headers["access-control-allow-origin"] == STUDIO
    search = await raw.post("/assistants/search", json={"limit": 1}, headers={"Origin": STUDIO})
    exposed = search.headers["access-control-expose-headers"].lower()
    assert "x-pagination-next" in exposed and "x-pagination-total" in exposed


def test_by_default_studios_origin_without_credentials_and_no_private_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default gateway (`waybill up`, auth off): Studio's origin among the few
    allowed (gateway/browser_guard.py), no credentials; a private-network preflight
    is refused until it is allowed. (A preflight is the CORS middleware's alone: the
    app needs no peers for it.)"""
    for name in ("WAYBILL_CORS_ORIGINS", "WAYBILL_ALLOW_PRIVATE_NETWORK"):
        monkeypatch.delenv(name, raising=False)
    gateway = TestClient(create_app(Settings()), base_url="http://127.0.0.1:8080")
    plain = gateway.options(
        "/assistants/search",
        headers={"Origin": STUDIO, "Access-Control-Request-Method": "POST"},
    )
    assert plain.status_code == 200
    assert plain.headers["access-control-allow-origin"] == STUDIO
    assert "access-control-allow-credentials" not in plain.headers
    private = gateway.options("/assistants/search", headers=preflight_headers(STUDIO))
    assert private.status_code == 400
    assert "access-control-allow-private-network" not in private.headers


def test_waybill_dev_answers_private_network_preflights_unless_told_not_to() -> None:
    env: dict[str, str] = {}
    open_to_studio(env)
    assert env == {"WAYBILL_ALLOW_PRIVATE_NETWORK": "true"}
    told = {"WAYBILL_ALLOW_PRIVATE_NETWORK": "false"}
    open_to_studio(told)
    assert told == {"WAYBILL_ALLOW_PRIVATE_NETWORK": "false"}
