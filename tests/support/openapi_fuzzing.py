"""The gateway's OpenAPI fuzzed by schemathesis: its configuration, what a run found,
and the stack it runs against; the tests are tests/test_openapi_fuzz*.py (one file
per long phase, so that xdist's workers share them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from schemathesis.engine import events, from_schema

from tests.support.stacks import stack_in_mode
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
                # 6 s on a quiet machine; CI, late in the suite, saw 60 s pass.
                {"include-path": "/runs/batch", "request-timeout": 180},
                # A run asked for right after such a batch waits its turn behind the
                # batch's runs before its first event (CI saw 10 s pass).
                {
                    "include-path-regex": "^/(threads/[^/]+/)?runs/(stream|wait)$",
                    "request-timeout": 60,
                },
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


def threads_paths(path: str) -> bool:
    return path.startswith("/threads")


def other_paths(path: str) -> bool:
    return not threads_paths(path)


def served_schema(url: str, paths: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The gateway's own /openapi.json, with the graph names this stack serves as the
    only valid ones (the test's data, as an API's fuzzing config names real ids); only
    the `paths` it keeps, when given (the coverage phase is split in two by path)."""
    schema: dict[str, Any] = httpx.get(f"{url}/openapi.json", timeout=30).json()
    if paths is not None:
        schema["paths"] = {path: item for path, item in schema["paths"].items() if paths(path)}
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


HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def operations(url: str, paths: Callable[[str], bool]) -> set[str]:
    """Every operation of the served schema on `paths`, labelled as schemathesis does."""
    return {
        f"{method.upper()} {path}"
        for path, item in served_schema(url, paths)["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def fuzz(
    url: str,
    headers: dict[str, str],
    max_examples: int,
    phases: list[str],
    paths: Callable[[str], bool] | None = None,
) -> FuzzReport:
    config = fuzz_config(url, headers, max_examples, phases)
    schema = schemathesis.openapi.from_dict(served_schema(url, paths), config=config)
    report = FuzzReport()
    for event in from_schema(schema).execute():
        report.take(event)
    return report


@contextmanager
def fuzzed_stack_in(data_dir: Path) -> Iterator[Stack]:
    with stack_in_mode(FUZZ_MODE, data_dir, WAYBILL_API_KEY=API_KEY) as stack:
        yield stack


def assert_as_declared(report: FuzzReport, phases: list[str]) -> None:
    """No failed check and no error; every check and each of `phases` ran."""
    assert not report.failures and not report.errors, report.summary()
    assert report.checks_run == set(CHECKS)
    # Examples are skipped for want of any (the schema gives none), but ran.
    assert set(phases) <= set(report.phases), report.phases


def assert_runs_made_and_read(report: FuzzReport) -> None:
    """The routes' own logic ran: runs were made and read back, not only refused."""
    assert 200 in report.statuses["POST /threads/{thread_id}/runs"]
    assert 200 in report.statuses["GET /threads/{thread_id}/runs/{run_id}"]
    assert 200 in report.statuses["POST /threads/{thread_id}/runs/stream"]
