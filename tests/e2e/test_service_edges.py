"""The edges around the API: health, info, assistants, CORS."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.stacks import stack_env
from waybill.common.codec import system_assistant_id
from waybill.common.launch import Stack
from waybill.gateway.app import VERSION


async def test_ok_and_info(http: httpx.AsyncClient) -> None:
    assert (await http.get("/ok")).json() == {"ok": True}
    info = (await http.get("/info")).json()
    assert info["version"] == VERSION
    assert info["langgraph_py_version"] == version("langgraph")
    assert info["flags"]["assistants"] is True
    assert info["flags"]["crons"] is True


def test_every_service_serves_grpc_health(stack: Stack) -> None:
    for name in ("admission", "runner", "journal", "delivery"):
        with grpc.insecure_channel(stack.address_of(name)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


async def test_assistants_are_the_graphs_with_stable_ids(http: httpx.AsyncClient) -> None:
    # The system's own: the session's stack holds other tests' assistants too, and a
    # search answers 10 by default.
    system = {"metadata": {"created_by": "system"}, "limit": 100}
    found = (await http.post("/assistants/search", json=system)).json()
    by_graph = {a["graph_id"]: a for a in found}
    assert by_graph["lead_agent"]["assistant_id"] == system_assistant_id("lead_agent")
    assert "nested" in by_graph

    one = (await http.get(f"/assistants/{system_assistant_id('lead_agent')}")).json()
    assert one["graph_id"] == "lead_agent"
    graph = (await http.get("/assistants/lead_agent/graph")).json()
    assert {node["id"] for node in graph["nodes"]} >= {"agent", "tools"}
    schemas = (await http.get("/assistants/lead_agent/schemas")).json()
    assert "messages" in schemas["input_schema"]["properties"]


STUDIO = "https://smith.langchain.com"


async def test_cors_lets_another_origin_read_content_location(http: httpx.AsyncClient) -> None:
    # Studio's: with auth off (this stack) the origins are few (gateway/browser_guard.py).
    preflight = await http.options(
        "/threads",
        headers={"Origin": STUDIO, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] in ("*", STUDIO)

    thread = (await http.post("/threads", json={})).json()
    reply = await http.post(
        f"/threads/{thread['thread_id']}/runs",
        json={"assistant_id": "lead_agent", "input": {"messages": []}},
        headers={"Origin": STUDIO},
    )
    assert "content-location" in reply.headers["access-control-expose-headers"].lower()


async def test_subgraphs_of_a_graph(http: httpx.AsyncClient) -> None:
    found = (await http.get("/assistants/nested/subgraphs")).json()
    assert list(found) == ["writer"]
    assert "notes" in found["writer"]["input_schema"]["properties"]
    one = (await http.get("/assistants/nested/subgraphs/writer")).json()
    assert list(one) == ["writer"]
    assert (await http.get("/assistants/lead_agent/subgraphs")).json() == {}


def test_a_run_asked_for_while_the_runner_is_down_is_a_503_that_writes_nothing(
    tmp_path: Path,
) -> None:
    """Admission checks a run against its graph's schemas on the runner: with no runner
    up (still starting, restarting), the request is refused as unavailable, not failed
    (once its short wait for a runner is spent)."""
    env = stack_env(tmp_path, WAYBILL_RUNNER_READ_WAIT_SECONDS="0.5")
    stack = Stack(env=env, log_dir=str(tmp_path))
    try:
        stack.start(only=["admission", "journal", "delivery", "gateway"])
        with httpx.Client(base_url=stack.url, timeout=30) as client:
            thread_id = client.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "lead_agent", "input": {"messages": []}}
            for path in (f"/threads/{thread_id}/runs", f"/threads/{thread_id}/runs/stream"):
                reply = client.post(path, json=body)
                assert reply.status_code == 503, (path, reply.text)
                assert "not reachable" in reply.text and "retry" in reply.text
            assert client.get(f"/threads/{thread_id}/runs").json() == []
    finally:
        stack.stop()
