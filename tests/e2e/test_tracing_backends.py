"""Traces read by the tools users run: OTLP over HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL=
http/protobuf`) with the standard OTEL_* variables honoured, Langfuse (its OTLP
endpoint, switched on by its usual variables) and LangSmith (its tracer, switched on
by LANGSMITH_TRACING), all received by one local stub collector on loopback. The
spans follow the semantic conventions: HTTP spans by route template, a GenAI span per
model call and per tool call, no prompt text unless asked for."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.support.helpers import says
from tests.support.stacks import free_port, running_stack, stack_env, wait_until
from waybill.common.launch import Stack

LANGFUSE_PUBLIC, LANGFUSE_SECRET = "pk-lf-local", "lf-local-key"
LANGSMITH_KEY = "ls-local-key"
SECRET_WORDS = "the quick brown prompt"  # a prompt that must not reach any span


@dataclass
class Span:
    path: str  # which backend got it: /v1/traces (OTLP) or Langfuse's
    resource: dict[str, str]
    name: str
    trace_id: str
    attributes: dict[str, Any]


@dataclass
class Collector:
    """What arrived: OTLP spans by path, and every other request (LangSmith's)."""

    spans: list[Span] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        with self.lock:
            self.requests.append((method, path, headers, body))
        if method == "POST" and path.endswith("/v1/traces"):
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        with self.lock:
                            self.spans.append(
                                Span(path, resource, span.name, span.trace_id.hex(), attributes)
                            )

    def of_trace(self, trace_id: str, path: str = "/v1/traces") -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id and s.path == path]

    def posted(self, prefix: str) -> list[tuple[str, str, dict[str, str], bytes]]:
        with self.lock:
            return [r for r in self.requests if r[0] == "POST" and r[1].startswith(prefix)]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def serve(collector: Collector, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            collector.handle(self.command, self.path.split("?")[0], headers, body)
            reply = b"{}"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST = do_PATCH = do_PUT = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Traced:
    stack: Stack
    collector: Collector


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    collector = Collector()
    port = free_port()
    server = serve(collector, port)
    here = f"http://127.0.0.1:{port}"
    data_dir: Path = tmp_path_factory.mktemp("traced")
    env = stack_env(
        data_dir,
        WAYBILL_OTLP_EXPORT_SECONDS="0.2",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=here,
        OTEL_SERVICE_NAME="shop-agents",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
        LANGFUSE_PUBLIC_KEY=LANGFUSE_PUBLIC,
        LANGFUSE_SECRET_KEY=LANGFUSE_SECRET,
        LANGFUSE_HOST=here,
        LANGSMITH_TRACING="true",
        LANGSMITH_ENDPOINT=here,
        LANGSMITH_API_KEY=LANGSMITH_KEY,
        LANGSMITH_PROJECT="waybill-test",
    )
    try:
        with running_stack(env, data_dir) as stack:
            yield Traced(stack, collector)
    finally:
        server.shutdown()


@pytest.fixture
async def sdk(traced: Traced) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=traced.stack.url, timeout=30)
    try:
        yield client
    finally:
        await client.aclose()


async def a_run_with_a_tool_call(sdk: LangGraphClient) -> tuple[str, str]:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    tool_call = '/tool add {"a": 1, "b": 2}'
    run = await sdk.runs.create(tid, "lead_agent", input=says(SECRET_WORDS, tool_call))
    await sdk.runs.join(tid, run["run_id"])
    return tid, run["run_id"]


def spans_named(collector: Collector, trace_id: str, path: str, *names: str) -> list[Span]:
    """The trace's spans once every named one has arrived (a name given twice: two
    such spans; the exporter may send a trace's spans in several batches)."""
    wanted = Counter(names)

    def arrived() -> bool:
        have = Counter(s.name for s in collector.of_trace(trace_id, path))
        return all(have[name] >= count for name, count in wanted.items())

    wait_until(arrived, f"spans {names} at {path}", 20)
    return collector.of_trace(trace_id, path)


# A run with a tool call: the model call asking for it, the tool, the answer after it.
TOOL_RUN_SPANS = ("chat scripted", "execute_tool add", "chat scripted")


async def test_otlp_over_http_honours_the_standard_variables(
    traced: Traced, sdk: LangGraphClient
) -> None:
    tid, run_id = await a_run_with_a_tool_call(sdk)
    trace_id = uuid.UUID(run_id).hex
    named = ("admission.admit", "runner.execute", "journal.append", "gateway.wait")
    spans = spans_named(traced.collector, trace_id, "/v1/traces", *named)
    for span in spans:
        assert span.resource["service.name"] == "shop-agents"  # OTEL_SERVICE_NAME wins
        assert span.resource["deployment.environment"] == "test"
    processes = {span.resource["waybill.service"] for span in spans}
    assert {"gateway", "admission", "runner", "journal"} <= processes


async def test_http_spans_are_named_by_route_template(traced: Traced, sdk: LangGraphClient) -> None:
    tid, run_id = await a_run_with_a_tool_call(sdk)
    await sdk.threads.get_state(tid)
    wanted = "GET /threads/{thread_id}/state"
    wait_until(lambda: any(s.name == wanted for s in traced.collector.spans), "the state span", 20)
    with traced.collector.lock:
        gateway = [s for s in traced.collector.spans if s.resource["waybill.service"] == "gateway"]
    http = [s for s in gateway if s.attributes.get("http.route")]
    assert {s.name for s in http} >= {wanted, "POST /threads/{thread_id}/runs"}
    for span in gateway:
        assert tid not in span.name and run_id not in span.name, span.name


async def test_a_genai_span_per_model_call_and_tool_call_without_prompt_text(
    traced: Traced, sdk: LangGraphClient
) -> None:
    _, run_id = await a_run_with_a_tool_call(sdk)
    trace_id = uuid.UUID(run_id).hex
    spans = spans_named(traced.collector, trace_id, "/v1/traces", *TOOL_RUN_SPANS)
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2  # the call asking for the tool, the answer after it
    for chat in chats:
        assert chat.name == "chat scripted"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.response.model"]
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] >= 0
        assert chat.attributes["waybill.run_id"] == run_id
    # The scripted model counts no tokens for a tool call, only for the words it says.
    assert max(chat.attributes["gen_ai.usage.output_tokens"] for chat in chats) > 0
    [tool] = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.attributes["gen_ai.tool.call.id"]
    for span in traced.collector.of_trace(trace_id):
        assert SECRET_WORDS not in json.dumps(span.attributes, default=str), span.name


async def test_langfuse_receives_the_run_with_its_key_pair(
    traced: Traced, sdk: LangGraphClient
) -> None:
    _, run_id = await a_run_with_a_tool_call(sdk)
    trace_id = uuid.UUID(run_id).hex
    path = "/api/public/otel/v1/traces"
    spans = spans_named(traced.collector, trace_id, path, *TOOL_RUN_SPANS)
    assert any(s.attributes.get("gen_ai.usage.output_tokens") for s in spans)
    token = base64.b64encode(f"{LANGFUSE_PUBLIC}:{LANGFUSE_SECRET}".encode()).decode()
    [*_, (_, _, headers, _)] = traced.collector.posted(path)
    assert headers["authorization"] == f"Basic {token}"


async def test_langsmith_receives_the_runs_trace(traced: Traced, sdk: LangGraphClient) -> None:
    _, run_id = await a_run_with_a_tool_call(sdk)

    def sent() -> bool:
        return any(run_id.encode() in body for *_, body in traced.collector.posted("/runs"))

    wait_until(sent, "the run's trace posted to LangSmith", 20)
    posts = [r for r in traced.collector.posted("/runs") if run_id.encode() in r[3]]
    assert all(headers["x-api-key"] == LANGSMITH_KEY for _, _, headers, _ in posts)
    assert any(b"waybill-test" in body for *_, body in traced.collector.posted("/runs"))
