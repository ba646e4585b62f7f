"""The gateway's own OpenAPI, fuzzed by schemathesis against a real stack.

Every operation the gateway documents, through every phase: the schema's examples,
coverage of its edges (each bound, each wrong type), random fuzzing, and stateful
sequences along the links schemathesis infers between operations (a thread created,
then read, patched, run on, deleted). The gate: no request ever gets a 5xx; and
every answer is one the schema declares (its status, its content type, its body).

The stack has an API key: the keyed run reaches every route's own logic (runs are
made, streamed, awaited, cancelled); the run without credentials checks that the
refusal is a declared 401, never a fault. It is embedded (SQLite) by default, which
keeps the file to a couple of minutes on a busy two-core machine;
WAYBILL_FUZZ_MODE=postgres fuzzes the scaled stack instead (where a NUL in JSON and
an int4 overflow were 500s). Generation is derandomized and bounded.

Schemathesis runs here as its command line does (its engine: every phase, the
stateful one included); its pytest plugin's per-operation tests cannot take a
schema from a fixture under pytest 9. Event streams are fuzzed like the rest:
schemathesis reads a `text/event-stream` answer until it ends, `max-stream-events`
events have come, or the request timeout passes (a thread's stream never ends by
itself; its heartbeats are comments, not events, so there the timeout closes it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.engine import events, from_schema

from tests.stacks import stack_in_mode
from waybill.common.launch import Stack

API_KEY = "openapi-fuzz-key"
FUZZ_MODE = os.environ.get("WAYBILL_FUZZ_MODE", "sqlite")
ALL_PHASES = ["examples", "coverage", "fuzzing", "stateful"]

# What a response must pass: the gate (no 5xx) and the three that hold the schema to
# the truth. Schemathesis's other checks judge policies (that every input outside the
# schema is refused, say) that are not this file's subject.
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)


def fuzz_config(url: str, headers: dict[str, str], max_examples: int, phases: list[str]) -> Any:
    return schemathesis.Config.from_dict(
        {
            "base-url": url,
            "headers": headers,
            "workers": 1,
            "request-timeout": 10,
            "operations": [
                # A thread's stream never ends by itself (only heartbeats while the
                # thread is idle): its head is read, then the request is let go.
                {"include-path": "/threads/{thread_id}/stream", "request-timeout": 1.5},
                # The largest batches (1000 threads pruned one by one, 1000 runs
                # admitted at once) take seconds.
                {"include-path": "/threads/prune", "request-timeout": 60},
                {"include-path": "/runs/batch", "request-timeout": 60},
            ],
            # A stream's first events say what it is; reading on only adds time.
            "max-stream-events": 3,
            "seed": 17,
            "cache": {"enabled": False},  # nothing kept between runs
            "generation": {
                "max-examples": max_examples,
                "deterministic": True,  # Hypothesis derandomized: the same cases each run
                "database": "none",
            },
            "phases": {name: {"enabled": name in phases} for name in ALL_PHASES},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )


@dataclass
class FuzzReport:
    """What one schemathesis run found: every failed check, and every error."""

    requests: int = 0
    checks_run: set[str] = field(default_factory=set)
    statuses: dict[str, set[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)

    def take(self, event: events.EngineEvent) -> None:
        if isinstance(event, events.ScenarioFinished):
            self._scenario(event.recorder)
        elif isinstance(event, events.NonFatalError):
            self.errors.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            raise event.exception
        elif isinstance(event, events.PhaseFinished):
            self.phases[event.phase.name.value] = event.status.value

    def _scenario(self, recorder: Any) -> None:
        for interaction in recorder.interactions.values():
            self.requests += 1
            if interaction.response is not None:
                label = recorder.label
                self.statuses.setdefault(label, set()).add(interaction.response.status_code)
        for checks in recorder.checks.values():
            for check in checks:
                self.checks_run.add(check.name)
                if check.failure_info is not None:
                    failure = check.failure_info.failure
                    self.failures.append(
                        f"{recorder.label} [{check.name}] {failure.title}: {failure.message}\n"
                        f"    {check.failure_info.code_sample}"
                    )

    def summary(self) -> str:
        shown = [*self.failures[:20], *self.errors[:20]]
        return f"{len(self.failures)} failed checks, {len(self.errors)} errors:\n" + "\n".join(
            shown
        )


# The fields that name a graph: a valid case names one this stack serves, so that it
# gets past "no such graph" to a real run (invalid cases still try any string).
GRAPH_FIELDS = {
    "RunCreate": "assistant_id",
    "BatchRunCreate": "assistant_id",
    "CronCreate": "assistant_id",
    "AssistantCreate": "graph_id",
}


def served_schema(url: str) -> dict[str, Any]:
    """The gateway's own /openapi.json, with the graph names this stack serves as the
    only valid ones (the test's data, as an API's fuzzing config names real ids)."""
    schema: dict[str, Any] = httpx.get(f"{url}/openapi.json", timeout=30).json()
    for model, name in GRAPH_FIELDS.items():
        properties = schema["components"]["schemas"][model]["properties"]
        properties[name] = {**properties[name], "enum": ["lead_agent"]}
    # A run may be asked to wait up to a year before it starts, and `/runs/wait` then
    # keeps its connection alive all that while: valid delays here are short.
    for model in ("RunCreate", "BatchRunCreate"):
        delay = schema["components"]["schemas"][model]["properties"]["after_seconds"]
        for option in delay.get("anyOf", [delay]):
            if option.get("type") == "number":
                option["maximum"] = 1
    return schema


def fuzz(url: str, headers: dict[str, str], max_examples: int, phases: list[str]) -> FuzzReport:
    config = fuzz_config(url, headers, max_examples, phases)
    schema = schemathesis.openapi.from_dict(served_schema(url), config=config)
    report = FuzzReport()
    for event in from_schema(schema).execute():
        report.take(event)
    return report


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-fuzz")
    with stack_in_mode(FUZZ_MODE, data_dir, WAYBILL_API_KEY=API_KEY) as stack:
        yield stack


@pytest.mark.timeout(480)  # a run takes ~2-3 minutes on two busy cores
def test_with_a_key_no_5xx_and_every_answer_as_declared(fuzzed_stack: Stack) -> None:
    report = fuzz(fuzzed_stack.url, {"x-api-key": API_KEY}, 6, ALL_PHASES)
    assert not report.failures and not report.errors, report.summary()
    assert report.checks_run == set(CHECKS)
    # Every phase ran (examples are skipped for want of any: the schema gives none).
    assert set(ALL_PHASES) <= set(report.phases), report.phases
    # Every operation was reached and the routes' own logic ran: runs were made and
    # read back, not only refused.
    assert len(report.statuses) >= 80, sorted(report.statuses)
    assert 200 in report.statuses["POST /threads/{thread_id}/runs"]
    assert 200 in report.statuses["GET /threads/{thread_id}/runs/{run_id}"]
    assert 200 in report.statuses["POST /threads/{thread_id}/runs/stream"]


# /ok and /info answer anyone; chat platforms' webhooks carry their own signatures.
OPEN = ("GET /ok", "GET /info", "POST /channels/", "GET /channels/")


@pytest.mark.timeout(240)
def test_without_credentials_no_5xx_and_every_refusal_as_declared(fuzzed_stack: Stack) -> None:
    report = fuzz(fuzzed_stack.url, {}, 3, ["examples", "coverage"])
    assert not report.failures and not report.errors, report.summary()
    for operation, statuses in report.statuses.items():
        if not operation.startswith(OPEN):
            # 401 for all but a request refused before auth is asked: a multipart
            # body that cannot be parsed (400), a malformed path (404), a method a
            # route does not serve (405).
            assert statuses <= {400, 401, 404, 405}, (operation, statuses)
            assert 401 in statuses, (operation, statuses)


async def test_a_nul_character_anywhere_in_a_body_is_422_and_writes_nothing(
    fuzzed_stack: Stack,
) -> None:
    """PostgreSQL's JSON cannot hold NUL (\\u0000): fuzzing found 500s for it in thread
    metadata, search filters and assistants. Every envelope refuses it, naming where."""
    async with httpx.AsyncClient(
        base_url=fuzzed_stack.url, headers={"x-api-key": API_KEY}, timeout=30
    ) as http:
        before = (await http.post("/threads/count", json={})).json()
        cases = {"metadata.note": {"note": "a\x00b"}, "metadata.k\\u0000": {"k\x00": 1}}
        for path, metadata in cases.items():
            reply = await http.post("/threads", json={"metadata": metadata})
            assert reply.status_code == 422, reply.text
            message = reply.json()["detail"][0]["msg"]
            assert "NUL" in message and message.split()[2] == path, message
        assert (await http.post("/threads/count", json={})).json() == before
        search = await http.post("/threads/search", json={"values": {"x": ["\x00"]}})
        assert search.status_code == 422 and "values.x[0]" in search.text
        assistant = {"graph_id": "lead_agent", "name": "n\x00"}
        assert (await http.post("/assistants", json=assistant)).status_code == 422
        run = {"assistant_id": "lead_agent", "input": {"messages": [{"content": "\x00"}]}}
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        reply = await http.post(f"/threads/{thread_id}/runs", json=run)
        assert reply.status_code == 422, reply.text
        assert (await http.get(f"/threads/{thread_id}/runs")).json() == []
        # The store's own two: a NUL in a dot-joined namespace, and a depth that
        # PostgresStore's SQL overflows (it adds to it as a 32-bit integer).
        item = await http.get("/store/items", params={"namespace": "a\x00b", "key": "k"})
        assert item.status_code == 422, item.text
        deep = await http.post("/store/namespaces", json={"max_depth": 2**31 - 2})
        assert deep.status_code == 422, deep.text
        fine = await http.post("/threads", json={"metadata": {"note": "a\\u0000b as text"}})
        assert fine.status_code == 200, fine.text
