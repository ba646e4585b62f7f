"""What the SDK contract tests (Python and JS clients) expect of an answer: one
of a declared shape (`Answers`), a stream of events (`Streams`), or a refusal with
the status LangGraph Platform answers (`Refused`); and the shapes of the answers
that gather several calls of one method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph_sdk.schema import (
    All,
    Config,
    Cron,
    Durability,
    Item,
    Run,
    RunMetadataPayload,
    StreamMode,
    StreamPart,
    ThreadState,
    ThreadUpdateStateResponse,
)

from tests.support.sdk_shapes import shape_errors


@dataclass(frozen=True)
class Answers:
    """An answer of a type that `langgraph_sdk.schema` (or the method's signature) declares."""

    shape: Any

    def errors(self, answer: Any) -> list[str]:
        return shape_errors(answer, self.shape)


@dataclass(frozen=True)
class Streams:
    """A stream whose every event is one of `events` (name -> shape of its data),
    with each of `required` among them; `metadata`, when required, comes first."""

    events: dict[str, Any]
    required: frozenset[str]

    def errors(self, parts: list[StreamPart]) -> list[str]:
        names = [part.event for part in parts]
        errors = [f"missing event {name!r} in {names}" for name in self.required - set(names)]
        if "metadata" in self.required and names and names[0] != "metadata":
            errors.append(f"the first event is {names[0]!r}, not 'metadata'")
        for i, part in enumerate(parts):
            if part.event not in self.events:
                errors.append(f"event {i} {part.event!r} is not one of {sorted(self.events)}")
            else:
                errors += shape_errors(
                    part.data, self.events[part.event], f"event {i} {part.event}"
                )
        return errors


@dataclass(frozen=True)
class Refused:
    """A method LangGraph Platform refuses with this HTTP status: Waybill does too."""

    status: int

    def errors(self, status: int | None) -> list[str]:
        return [] if status == self.status else [f"answered status {status}, not {self.status}"]


def run_stream(*modes: str) -> Streams:
    """A run's stream in these stream modes: `metadata`, then each mode's events."""
    events: dict[str, Any] = {"metadata": RunMetadataPayload, **{m: MODE_DATA[m] for m in modes}}
    return Streams(events, frozenset(events))


MODE_DATA: dict[str, Any] = {"values": dict[str, Any], "updates": dict[str, Any]}


class SubgraphSchema(TypedDict):
    """A subgraph's schemas: GraphSchema less `graph_id`, which LangGraph Platform
    leaves out here (langgraph_api/api/assistants.py `_graph_schemas`)."""

    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    state_schema: dict[str, Any] | None
    config_schema: dict[str, Any] | None
    context_schema: dict[str, Any] | None


class PruneAnswer(TypedDict):
    """What `POST /threads/prune` answers on LangGraph Platform (the SDK says dict)."""

    pruned_count: int


class GetItemAnswers(TypedDict):
    """`store.get_item` of an item there, and of a key that is not: null, as the
    reference answers (`langgraph_api/api/store.py`)."""

    found: Item
    missing: None


class GetStateAnswers(TypedDict):
    """`threads.get_state` of the latest checkpoint, by checkpoint id, and by a
    checkpoint dict (`POST /threads/{id}/state/checkpoint`)."""

    latest: ThreadState
    by_id: ThreadState
    by_checkpoint: ThreadState


class UpdateStateAnswers(TypedDict):
    """`threads.update_state` on the latest checkpoint and on a given one."""

    latest: ThreadUpdateStateResponse
    on_checkpoint: ThreadUpdateStateResponse


class ThreadStreamStarted(TypedDict):
    """A v3 thread stream session: `run.start` answers the run id, `output` the values."""

    started: dict[str, str]
    output: dict[str, Any]


class RunKwargs(TypedDict):
    """A run's `kwargs` as LangGraph Platform shows them (langgraph_api/models/run.py;
    the SDK leaves them undeclared). Less `temporary`, which Waybill does not record."""

    input: Any
    command: dict[str, Any] | None
    config: Config
    context: dict[str, Any] | None
    stream_mode: list[StreamMode]
    interrupt_before: All | list[str] | None
    interrupt_after: All | list[str] | None
    webhook: str | None
    feedback_keys: list[str] | None
    subgraphs: bool
    resumable: bool
    checkpoint_during: bool
    durability: Durability


class PlatformRun(Run):
    """A run with the keys LangGraph Platform sends beyond the SDK's `Run`."""

    kwargs: RunKwargs
    langsmith_session_name: str | None


class CronPayload(TypedDict):
    """A cron's `payload` as LangGraph Platform keeps it: the create request's body,
    so the schedule and assistant too (the SDK says dict)."""

    schedule: str
    assistant_id: str


class PlatformCron(Cron):
    """A cron whose payload is LangGraph Platform's."""

    payload: CronPayload  # type: ignore[misc]  # narrows the SDK's `dict`
