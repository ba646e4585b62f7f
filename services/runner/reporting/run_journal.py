"""The run journal: LangChain callbacks turned into typed records, and token accounting.

One `RunJournal` per run is given to `graph.astream` as a callback handler. It
records the graph's start and end (the root runnable only), every model call
(model, source, token usage, latency) and tool call (name, duration, error),
and counts each model call's tokens once. Middleware decisions, subagents and
sandboxes write their records through the run's scope (`RunScope.records`,
scope.py), which is this journal's sink. The records go to the journal beside the run's
frames but never onto its stream (see record_sink.py). Its token hook also
gives the event loop its turns while a model streams (loop_turns.py).

A model call's source: `metadata.waybill_source` when the caller says; else a
call made inside a subgraph or from the `tools` node (a tool delegating to a
model) is `subagents`; any other is the lead agent's (`lead_agent`'s `agent` node).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from waybill.common.usage import KNOWN_SOURCES, Price, summarize
from waybill.services.runner.effects.model_calls import was_replayed
from waybill.services.runner.reporting.loop_turns import LoopTurns, no_turn
from waybill.services.runner.reporting.record_sink import RecordSink
from waybill.services.runner.reporting.token_ledger import TokenLedger, usage_of
from waybill.services.runner.run.scope import RunScope

ERROR_TEXT_MAX = 2000
MIDDLEWARE_TAG = "waybill:middleware"


@dataclass(frozen=True)
class Call:
    """A model or tool call in flight."""

    name: str
    started: float
    source: str = ""
    node: str = ""
    provider_model: str = ""
    tool_call_id: str = ""


def source_of(metadata: dict[str, Any], tags: list[str]) -> str:
    explicit = metadata.get("waybill_source")
    if explicit in KNOWN_SOURCES:
        return str(explicit)
    if MIDDLEWARE_TAG in tags:
        return "middleware"
    if "|" in str(metadata.get("langgraph_checkpoint_ns") or ""):
        return "subagents"
    if metadata.get("langgraph_node") == "tools":
        return "subagents"
    return "lead_agent"


def model_of(serialized: dict[str, Any] | None, metadata: dict[str, Any]) -> str:
    """The configured name `create_chat_model` stamped, else what LangChain knows."""
    for key in ("waybill_model", "ls_model_name"):
        if metadata.get(key):
            return str(metadata[key])
    serialized = serialized or {}
    return str(serialized.get("name") or (serialized.get("id") or ["unknown"])[-1])


def provider_model_of(response: LLMResult, fallback: str) -> str:
    named = (response.llm_output or {}).get("model_name")
    if named:
        return str(named)
    for generations in response.generations:
        for generation in generations:
            metadata = getattr(getattr(generation, "message", None), "response_metadata", {})
            if isinstance(metadata, dict) and metadata.get("model_name"):
                return str(metadata["model_name"])
    return fallback


def error_fields(error: BaseException) -> dict[str, str]:
    return {"error": type(error).__name__, "message": str(error)[:ERROR_TEXT_MAX]}


def milliseconds_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)


class RunJournal(BaseCallbackHandler):
    # Called on the event loop, without a thread hop: every hook only buffers.
    run_inline = True
    raise_error = False

    def __init__(self, sink: RecordSink, turns: LoopTurns | None = None) -> None:
        self.sink = sink
        self.turns = turns
        self.ledger = TokenLedger()
        self._root: UUID | None = None
        self._root_started = 0.0
        self._calls: dict[UUID, Call] = {}

    def record_end(
        self, status: str, stop_reason: str, snapshot: StateSnapshot, prices: Mapping[str, Price]
    ) -> None:
        """The run's delivery and token usage, as its last records."""
        self.sink.emit("delivery", delivery_record(status, stop_reason, snapshot))
        self.sink.emit("usage", summarize(self.ledger.counts(prices)))

    @property  # type: ignore[override]
    def on_llm_new_token(self) -> Callable[..., Any]:
        """Every token: the run's loop turns (see loop_turns.py), or nothing."""
        return self.turns.token_hook() if self.turns is not None else no_turn

    # ---- the run's graph (the root runnable only) --------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None or self._root is not None:
            return
        self._root, self._root_started = run_id, time.monotonic()
        name = kwargs.get("name") or (serialized or {}).get("name") or "graph"
        self.sink.emit("chain_start", {"name": str(name)})

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id == self._root:
            self.sink.emit("chain_end", {"duration_ms": milliseconds_since(self._root_started)})

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id == self._root:
            duration = milliseconds_since(self._root_started)
            self.sink.emit("chain_error", {**error_fields(error), "duration_ms": duration})

    # ---- model calls -----------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        count = len(messages[0]) if messages else 0
        self._model_started(serialized, run_id, tags, metadata, {"messages": count})

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_started(serialized, run_id, tags, metadata, {"prompts": len(prompts)})

    def _model_started(
        self,
        serialized: dict[str, Any] | None,
        run_id: UUID,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
        extra: dict[str, Any],
    ) -> None:
        if self.turns is not None:
            self.turns.model_started()
        metadata = metadata or {}
        call = Call(
            name=model_of(serialized, metadata),
            started=time.monotonic(),
            source=source_of(metadata, tags or []),
            node=str(metadata.get("langgraph_node") or ""),
            provider_model=str(metadata.get("ls_model_name") or ""),
        )
        self._calls[run_id] = call
        self.sink.emit(
            "llm_start",
            {"model": call.name, "source": call.source, "node": call.node, **extra},
        )

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None) or Call("unknown", time.monotonic(), "lead_agent")
        replay = any(was_replayed(generations) for generations in response.generations)
        usage = None if replay else usage_of(response)  # a replayed response cost nothing
        counted = self.ledger.add(run_id, call.name, call.source, usage)
        self.sink.emit(
            "llm_end",
            {
                "model": call.name,
                "provider_model": provider_model_of(response, call.provider_model),
                "source": call.source,
                "node": call.node,
                "usage": usage.as_dict() if usage is not None else None,
                "counted": counted,  # False: a repeated end of a call already counted
                "duration_ms": milliseconds_since(call.started),
            },
        )

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None) or Call("unknown", time.monotonic(), "lead_agent")
        self.sink.emit(
            "llm_error",
            {
                "model": call.name,
                "source": call.source,
                "node": call.node,
                **error_fields(error),
                "duration_ms": milliseconds_since(call.started),
            },
        )

    # ---- tool calls ------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        call = Call(name, time.monotonic(), tool_call_id=str(kwargs.get("tool_call_id") or ""))
        self._calls[run_id] = call
        self.sink.emit("tool_start", {"name": call.name, "tool_call_id": call.tool_call_id})

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None) or Call("tool", time.monotonic())
        self.sink.emit(
            "tool_end",
            {
                "name": call.name,
                "tool_call_id": call.tool_call_id,
                # A ToolException handled by the tool answers with status "error".
                "status": str(getattr(output, "status", None) or "success"),
                "duration_ms": milliseconds_since(call.started),
            },
        )

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None) or Call("tool", time.monotonic())
        self.sink.emit(
            "tool_error",
            {
                "name": call.name,
                "tool_call_id": call.tool_call_id,
                **error_fields(error),
                "duration_ms": milliseconds_since(call.started),
            },
        )

    def in_flight(self) -> dict[str, list[str]]:
        """The model and tool calls under way (what a cancel cuts)."""
        calls = list(self._calls.values())
        return {
            "models": [c.name for c in calls if c.source],
            "tools": [c.name for c in calls if not c.source],
        }


def note_middleware(config: RunnableConfig, name: str, decision: dict[str, Any] | None) -> None:
    """Record what a middleware decided about a model call, when it decided something."""
    if decision:
        node = str((config.get("metadata") or {}).get("langgraph_node") or "")
        fields = {"middleware": name, "node": node, **decision}
        RunScope.of(config).records.emit("middleware", fields)


def with_callbacks(config: RunnableConfig, *handlers: BaseCallbackHandler) -> RunnableConfig:
    """The run's config with `handlers` (its journal, ...) among the callbacks."""
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        for handler in handlers:
            manager.add_handler(handler, inherit=True)
        return {**config, "callbacks": manager}
    return {**config, "callbacks": [*(callbacks or []), *handlers]}


def delivery_record(status: str, stop_reason: str, snapshot: StateSnapshot) -> dict[str, Any]:
    """What the run delivered: how it ended and its final answer (the last AI message)."""
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    messages = values.get("messages") or []
    last = messages[-1] if messages else None
    answer = str(last.text) if isinstance(last, AIMessage) else None
    return {
        "status": status,
        "stop_reason": stop_reason,
        "answer": answer,
        "next": list(snapshot.next),
    }
