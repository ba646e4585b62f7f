"""Metrics, traces and logs of a real stack, read the way an operator would:
`/metrics` scraped from every process, spans received by an OTLP collector
(a fake one here, decoding the real export requests), and the log files."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.support.helpers import says, start_slow_tool, wait_for_status
from tests.support.paths import REPO
from tests.support.stacks import (
    free_port,
    metrics_url,
    running_stack,
    scrape,
    stack_env,
    wait_until,
)
from tests.support.webhook_receiver import WebhookReceiver
from waybill.common.identity import LOCAL_USER
from waybill.common.launch import Stack
from waybill.common.logs import redact

SERVICES = ("gateway", "admission", "runner", "journal", "delivery")
SECRET = "sk-live-9f8e7d6c5b4a3210"


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    attributes: dict[str, str]


@dataclass
class SpanSink(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace collector that keeps what it is sent."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method name
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    with self.lock:
                        self.spans.append(
                            ReceivedSpan(
                                resource.get("service.name", ""),
                                span.name,
                                span.trace_id.hex(),
                                attributes,
                            )
                        )
        return trace_service_pb2.ExportTraceServiceResponse()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


def _value(value: Any) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""


@dataclass
class Observed:
    stack: Stack
    sink: SpanSink
    data_dir: Path
    hooks: WebhookReceiver


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    sink = SpanSink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    data_dir = tmp_path_factory.mktemp("observed")
    env = stack_env(
        data_dir,
        WAYBILL_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        WAYBILL_OTLP_EXPORT_SECONDS="0.2",
        WAYBILL_WEBHOOK_ALLOW_NETWORKS="127.0.0.1/32",
        WAYBILL_WEBHOOK_POLL_SECONDS="0.2",
    )
    hooks = WebhookReceiver(free_port()).start()
    try:
        with running_stack(env, data_dir) as stack:
            yield Observed(stack, sink, data_dir, hooks)
    finally:
        hooks.stop()
        server.stop(0)


@pytest.fixture
async def sdk(observed: Observed) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=observed.stack.url, timeout=30)
    try:
        yield client
    finally:
        await client.aclose()


def scrape_all(stack: Stack) -> dict[str, dict[str, float]]:
    return {service: scrape(metrics_url(stack, service)) for service in SERVICES}


def moved(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


async def test_metrics_count_what_the_runs_did(observed: Observed, sdk: LangGraphClient) -> None:
    stack = observed.stack
    before = scrape_all(stack)
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    for _ in range(2):
        await sdk.runs.wait(tid, "lead_agent", input=says("/tokens 7"))
    # One run tells a webhook it ended: one attempt, delivered.
    await sdk.runs.wait(tid, "lead_agent", input=says("/tokens 7"), webhook=observed.hooks.url)
    frames = [part async for part in sdk.runs.stream(tid, "lead_agent", input=says("/tokens 3"))]
    assert frames[0].event == "metadata"
    slow = await start_slow_tool(sdk, tid)
    await sdk.runs.cancel(tid, slow["run_id"])
    await wait_for_status(sdk, tid, slow["run_id"], "interrupted")

    def finished() -> bool:
        page = scrape(metrics_url(stack, "admission"))
        return (
            moved(before["admission"], page, 'waybill_runs_finished_total{status="success"}') == 4
            and moved(
                before["admission"], page, 'waybill_runs_finished_total{status="interrupted"}'
            )
            == 1
        )

    wait_until(finished, "five terminal statuses counted")
    after = scrape_all(stack)
    admission, runner, journal = after["admission"], after["runner"], after["journal"]
    assert moved(before["admission"], admission, "waybill_runs_admitted_total") == 5
    assert moved(before["admission"], admission, "waybill_runs_started_total") == 5
    assert moved(before["admission"], admission, "waybill_run_queue_wait_seconds_count") == 5
    assert admission["waybill_runs_queued"] == 0
    assert admission["waybill_runs_running"] == 0
    # The scripted model answers "/tokens N" with N tokens; the cancelled run's
    # model call (asking for the tool) is counted too, with what it reported.
    output = 'waybill_tokens_total{kind="output",model="scripted"}'
    assert moved(before["admission"], admission, output) >= 3 * 7 + 3
    assert (
        moved(before["admission"], admission, 'waybill_tokens_total{kind="input",model="scripted"}')
        > 0
    )
    assert moved(before["runner"], runner, "waybill_runner_runs_started_total") == 5
    assert moved(before["runner"], runner, "waybill_runner_stale_writes_refused_total") == 0
    appended = moved(before["journal"], journal, "waybill_journal_events_appended_total")
    assert appended > 5  # at least metadata and a values frame a run
    assert moved(before["journal"], journal, "waybill_journal_append_seconds_count") >= 5
    assert journal["waybill_journal_live_subscribers"] == 0
    assert "waybill_journal_lag_events" in journal
    gateway = after["gateway"]
    assert moved(before["gateway"], gateway, "waybill_gateway_streams_total") >= 2
    assert (
        moved(before["gateway"], gateway, 'waybill_gateway_streams_ended_total{how="complete"}')
        >= 1
    )
    assert gateway["waybill_gateway_streams_active"] == 0
    delivery = after["delivery"]
    assert (
        moved(before["delivery"], delivery, 'waybill_receipts_written_total{outcome="success"}')
        == 4
    )
    delivered = 'waybill_webhook_attempts_total{outcome="delivered"}'

    def webhook_counted() -> bool:
        page = scrape(metrics_url(stack, "delivery"))
        return moved(before["delivery"], page, delivered) == 1

    wait_until(webhook_counted, "the webhook attempt counted")
    assert len(observed.hooks.snapshot()) == 1


async def test_a_run_is_counted_in_calls_served_statements_and_commits(
    observed: Observed, sdk: LangGraphClient
) -> None:
    """The counts `make bench` divides by the runs it made (common/work_counts.py)."""
    stack = observed.stack
    thread = await sdk.threads.create()
    before = scrape_all(stack)
    await sdk.runs.wait(thread["thread_id"], "lead_agent", input=says("/tokens 3"))
    after = scrape_all(stack)

    def served(service: str, method: str) -> float:
        name = f'waybill_rpcs_served_total{{method="/waybill.v1.{method}"}}'
        return moved(before[service], after[service], name)

    assert served("admission", "Admission/StartRun") == 1
    # (Other tests' runs may end, and their logs be closed again, meanwhile.)
    assert served("admission", "Admission/FinishRun") >= 1
    assert served("journal", "Journal/Close") >= 1
    for service, database in [
        ("admission", "admission.db"),
        ("runner", "checkpoints.db"),
        ("journal", "journal.db"),
        ("delivery", "delivery.db"),
    ]:
        statements = f'waybill_sql_statements_total{{database="{database}"}}'
        commits = f'waybill_sql_commits_total{{database="{database}"}}'
        assert moved(before[service], after[service], commits) >= 1, (service, database)
        assert moved(before[service], after[service], statements) > moved(
            before[service], after[service], commits
        ), (service, database)


DASHBOARD = REPO / "deploy" / "grafana" / "waybill.json"
# A TYPE line names a counter with its `_total` already (prometheus_client, and the
# collectors of stats); a histogram's series add these.
SAMPLE_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count")}


def exported_series(stack: Stack) -> set[str]:
    """Every series name the five processes export, from each family's TYPE line (a
    labelled family is listed before its first sample), with the suffixes of its type."""
    names = set()
    for service in SERVICES:
        for line in httpx.get(metrics_url(stack, service), timeout=10).text.splitlines():
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(" ", 3)
                names |= {family + suffix for suffix in SAMPLE_SUFFIXES.get(kind, ("",))}
                if kind == "counter" and not family.endswith("_total"):
                    names.add(family + "_total")
    return names


def test_the_grafana_dashboard_queries_metrics_we_export(observed: Observed) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(queries) >= 10
    wanted = {name for query in queries for name in re.findall(r"\bwaybill_[a-z_]+", query)}
    assert {"waybill_runs_queued", "waybill_tokens_total"} <= wanted
    exported = exported_series(observed.stack)
    assert wanted - exported == set(), "the dashboard queries series nobody exports"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


async def test_one_trace_per_run_across_services(observed: Observed, sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(tid, "lead_agent", input=says("/tokens 4"))
    await sdk.runs.join(tid, run["run_id"])
    trace_id = uuid.UUID(run["run_id"]).hex
    wanted = {"gateway", "admission", "runner", "journal", "delivery"}
    # The runner's execute span ends after the log it closed has ended the join:
    # wait for it too, not only for some span of every service.
    named = {"admission.admit", "runner.execute", "journal.append", "gateway.wait"}

    def all_services_reported() -> bool:
        spans = observed.sink.of_trace(trace_id)
        services = {span.service.removeprefix("waybill-") for span in spans}
        return wanted <= services and named <= {span.name for span in spans}

    wait_until(all_services_reported, "spans of every service in the run's trace", 20)
    spans = observed.sink.of_trace(trace_id)
    names = {span.name for span in spans}
    assert named <= names
    assert wanted <= {span.service.removeprefix("waybill-") for span in spans}
    for span in spans:
        assert span.attributes.get("waybill.run_id") == run["run_id"], span
    # The thread rides along on every span whose process was told it: all but the
    # journal's appends (an append names only the run).
    for span in spans:
        if span.name in ("journal.append", "journal.close"):
            assert span.attributes.get("waybill.thread_id") in (None, tid), span
        else:
            assert span.attributes.get("waybill.thread_id") == tid, span
    # gRPC calls between the services are in the run's trace too.
    assert any(span.name.startswith("/waybill.v1.Admission/FinishRun") for span in spans)


def test_redaction_hides_secret_shapes() -> None:
    line = (
        f"GET /x?api_key={SECRET} Authorization: Bearer abc.def-ghi "
        f'{{"token": "t0ps3cret"}} password=hunter2 ghp_0123456789abcdefABCDEF '
        "aws=AKIAIOSFODNN7EXAMPLE&session=ASIAY34FZKBOKMUTVV7A"
    )
    clean = redact(line)
    for secret in (
        SECRET,
        "abc.def-ghi",
        "t0ps3cret",
        "hunter2",
        "ghp_0123456789abcdefABCDEF",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAY34FZKBOKMUTVV7A",
    ):
        assert secret not in clean
    assert clean.count("[redacted]") == 7


async def test_logs_are_json_tagged_with_the_run_and_redacted(
    observed: Observed, sdk: LangGraphClient
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.wait(tid, "lead_agent", input=says("hello logs"))
    runs = await sdk.runs.list(tid)
    run_id = runs[0]["run_id"]
    async with httpx.AsyncClient(base_url=observed.stack.url) as http:
        # A key pasted into a query string lands in the access log: not in clear.
        reply = await http.get(f"/threads/{tid}/runs/{run_id}", params={"api_key": SECRET})
        assert reply.status_code == 200
    assert run["messages"][-1]["content"] == "You said: hello logs"

    def logged() -> list[dict[str, Any]]:
        lines = []
        for service in SERVICES:  # the services' logs (not the one-shot migration's)
            log_file = observed.data_dir / f"{service}.log"
            for text in log_file.read_text().splitlines():
                if text.strip():
                    lines.append(json.loads(text))  # every line is one JSON object
        return lines

    wait_until(lambda: any(run_id in line["msg"] for line in logged()), "the access line")
    lines = logged()
    assert {line["service"] for line in lines} >= set(SERVICES)
    about_run = [line for line in lines if run_id in line["msg"]]
    assert about_run
    for line in about_run:
        assert line["run_id"] == run_id, line
        assert line["thread_id"] == tid, line
        if line["service"] == "gateway":
            assert line["user_id"] == LOCAL_USER.user_id, line
    for log_file in observed.data_dir.glob("*.log"):
        assert SECRET not in log_file.read_text()
