"""Tool calls run once: each call of a run is recorded, and a later attempt answers
from the record instead of running the tool again.

A takeover resumes a run from its last checkpoint, so a tool that ran after it
would run again. Here every tool call executed by LangGraph's `ToolNode` (the
built-in agent's, `create_agent`'s, a graph's own) is written to `tool_calls`
(tool_call_store.py), keyed by (run id, tool call id) and fenced by the run's epoch:

- *started* before the tool executes, *finished* with its result before the result
  reaches the graph;
- on a later attempt a finished call returns its recorded result without executing
  (the ToolMessage carries `response_metadata["waybill_replayed"] = True`, and the
  journal a `tool_replayed` record);
- a call started but never finished is ambiguous: a tool declared idempotent
  (`metadata={"idempotent": True}`, see `idempotent()`) runs again (`tool_rerun`);
  any other gets an error ToolMessage (`INTERRUPTED_TOOL_REPLY`, `tool_ambiguous`)
  so that the model can check before it retries; that answer is recorded too.

How it reaches a graph's tools: `install()` (called once per runner process) wraps
`ToolNode`'s per-call step, the layer under its own `wrap_tool_call` hooks and
`create_agent`'s tool middleware, so a retry middleware's final answer is what is
recorded. The wrap finds the run's `ToolCalls` in the run's scope, in the node's
config (`RunScope.find`, scope.py); outside a Waybill run (a graph read, a test)
it does nothing. A graph that calls tools its own way, outside `ToolNode`, keeps
LangGraph's per-task semantics: a node that did not finish before the checkpoint
runs again on takeover.

The same record answers cancels (execution.py): while a cancel waits for the calls
in flight (`in_flight`, `drained`), no new call starts (`stop()`).

The API other parts use: `ToolCalls(store, run_id, thread_id, fence, serde, emit)`,
`.boundary()`, `.stop()`, `.halt()` (`CallBoundary` is the model-call side),
`.in_flight`, `.drained`, `.recorded_answers()`; `idempotent(tool)`,
`is_idempotent(tool)`, `install(record_model_calls)`, `forget_calls(...)` at a run's end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode

from waybill.services.runner.effects.model_calls import (
    REPLAYED_KEY,
    ModelRecord,
    install_model_record,
)
from waybill.services.runner.effects.tool_call_store import (
    CallKey,
    CallRecord,
    CallStatus,
    ToolCallStore,
)
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.run.scope import RunScope, ToolCallLedger
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.runner.tool_calls")

IDEMPOTENT_KEY = "idempotent"
INTERRUPTED_TOOL_REPLY = (
    "Interrupted: the run was taken over while this tool call was executing. It may or "
    "may not have taken effect; check before calling it again."
)

Emit = Callable[[str, dict[str, Any]], None]


def idempotent(tool: BaseTool, value: bool = True) -> BaseTool:
    """Declare that running `tool` twice with the same arguments does no harm, so a
    call cut short by a takeover runs again instead of answering with an error."""
    tool.metadata = {**(tool.metadata or {}), IDEMPOTENT_KEY: value}
    return tool


def is_idempotent(tool: BaseTool | None) -> bool:
    return tool is not None and bool((tool.metadata or {}).get(IDEMPOTENT_KEY))


def tool_calls_of(config: RunnableConfig | None) -> ToolCallLedger | None:
    """The record of the run whose config this is (None outside a Waybill run)."""
    scope = RunScope.find(config)
    return scope.tool_calls if scope is not None else None


def replayed(result: Any) -> Any:
    """The recorded result, marked as answered from the record."""
    for message in result if isinstance(result, list) else [result]:
        if isinstance(message, ToolMessage):
            message.response_metadata = {**message.response_metadata, REPLAYED_KEY: True}
    return result


class ToolCalls:
    """One attempt of one run: its calls' record, and which of them are executing."""

    def __init__(
        self,
        store: ToolCallStore,
        run_id: str,
        thread_id: str,
        fence: RunFence,
        serde: Any,
        emit: Emit,
        replaying: bool = False,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.thread_id = thread_id
        self.fence = fence
        self.serde = serde  # the checkpointer's: results are stored as checkpoints are
        self.emit = emit
        self.in_flight: dict[str, str] = {}  # call id -> tool name
        # Whether this attempt may have stored a record (set before the write).
        self.recorded = False
        self.drained = asyncio.Event()  # set whenever no call is executing
        self.drained.set()
        self.stopping = False
        self._halted = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.models = ModelRecord(self, replaying)  # model_calls.py

    def boundary(self) -> CallBoundary:
        """The callback that holds model calls after a cancel (among the run's callbacks)."""
        return CallBoundary(self)

    # ---- cancels ---------------------------------------------------------------------

    def stop(self) -> None:
        """A cancel asked: start no new call (calls in flight may finish)."""
        self.stopping = True

    def halt(self) -> None:
        """The graph is being cancelled: calls waiting to start give up."""
        self.stopping = True
        self._halted.set()

    async def _refuse_when_stopping(self) -> None:
        if self.stopping:
            # The cancel takes the graph down at this boundary; wait for it.
            await self._halted.wait()
            raise asyncio.CancelledError("the run was cancelled before this call")

    # ---- one tool call -----------------------------------------------------------------

    async def begin(self, call: dict[str, Any], tool: BaseTool | None) -> tuple[bool, Any]:
        """(True, answer) when the call is answered without executing; else
        (False, None): it is recorded as started and counted in flight."""
        await self._refuse_when_stopping()
        await self.models.written()  # the response naming this call is durable first
        call_id, name = str(call.get("id") or ""), str(call.get("name") or "")
        if not call_id:
            self._enter(call_id, name)  # no id, no key: LangGraph's semantics
            return False, None
        self.fence.check("a tool call's start")
        key = CallKey(self.run_id, self.thread_id, call_id, "tool", name)
        self.recorded = True
        if await self.store.start(key, self.fence.epoch):
            self._enter(call_id, name)
            return False, None
        record = await self.store.read(self.run_id, call_id)
        if record is None or record.epoch > self.fence.epoch:
            raise self.fence.refuse(f"tool call {call_id} belongs to a newer epoch")
        if record.status == CallStatus.FINISHED:
            self.emit("tool_replayed", {"name": name, "tool_call_id": call_id})
            return True, replayed(self._result_of(record))
        # Started, never finished. By an earlier attempt: it may have taken effect.
        # By this one: a model that repeated a call id within the run.
        taken_over = record.epoch < self.fence.epoch and await self.store.restart(
            self.run_id, call_id, self.fence.epoch
        )
        if taken_over and is_idempotent(tool):
            self.emit("tool_rerun", {"name": name, "tool_call_id": call_id})
            self._enter(call_id, name)
            return False, None
        answer = ToolMessage(
            content=INTERRUPTED_TOOL_REPLY, tool_call_id=call_id, name=name, status="error"
        )
        self.emit("tool_ambiguous", {"name": name, "tool_call_id": call_id})
        if taken_over:  # a further takeover gives the model the same answer
            await self._finish_record(call_id, answer)
        return True, answer

    async def finish(self, call_id: str, result: Any) -> None:
        """The result, recorded before it reaches the graph."""
        try:
            if call_id:
                await self._finish_record(call_id, result)
        finally:
            self._leave(call_id)

    async def pause(self, call_id: str) -> None:
        """The call paused the graph (an interrupt): it runs again when the graph
        resumes, as LangGraph runs it."""
        try:
            if call_id:
                await self.store.forget_call(self.run_id, call_id, self.fence.epoch)
        finally:
            self._leave(call_id)

    def abandon(self, call_id: str) -> None:
        """The call raised or was cut: it stays started, as it may have taken effect."""
        self._leave(call_id)

    async def _finish_record(self, call_id: str, result: Any) -> None:
        self.fence.check("a tool call's result")
        result_type, blob = self.serde.dumps_typed(result)
        if not await self.store.finish(self.run_id, call_id, self.fence.epoch, result_type, blob):
            raise self.fence.refuse(f"the result of tool call {call_id}")

    def _result_of(self, record: CallRecord) -> Any:
        return self.serde.loads_typed((record.result_type or "null", record.result or b""))

    def _enter(self, call_id: str, name: str) -> None:
        self.in_flight[call_id] = name
        self.drained.clear()

    def _leave(self, call_id: str) -> None:
        self.in_flight.pop(call_id, None)
        if not self.in_flight:
            self.drained.set()

    async def recorded_answers(self) -> dict[str, Any]:
        """Tool call id -> the recorded ToolMessage, for the calls that finished: a
        cancelled run's state answers them with what they did."""
        found: dict[str, Any] = {}
        for record in await self.store.calls_of(self.run_id):
            if record.kind == "tool" and record.status == CallStatus.FINISHED:
                result = self._result_of(record)
                if isinstance(result, ToolMessage):
                    found[record.call_id] = result
        return found

    # ---- the wrap around ToolNode's per-call step ----------------------------------------

    async def arun(
        self, call: dict[str, Any], tool: BaseTool | None, execute: Callable[[], Awaitable[Any]]
    ) -> Any:
        answered, answer = await self.begin(call, tool)
        if answered:
            return answer
        call_id = str(call.get("id") or "")
        try:
            result = await execute()
        except GraphBubbleUp:
            await self.pause(call_id)
            raise
        except BaseException:
            self.abandon(call_id)
            raise
        await self.finish(call_id, result)
        return result

    def run(self, call: dict[str, Any], tool: BaseTool | None, execute: Callable[[], Any]) -> Any:
        """The same for a sync ToolNode (a sync node in an executor thread): the record's
        writes go to the run's event loop, the tool runs here."""

        def on_loop(step: Awaitable[Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(step, self.loop).result()  # type: ignore[arg-type]

        answered, answer = on_loop(self.begin(call, tool))
        if answered:
            return answer
        call_id = str(call.get("id") or "")
        try:
            result = execute()
        except GraphBubbleUp:
            on_loop(self.pause(call_id))
            raise
        except BaseException:
            self.loop.call_soon_threadsafe(self.abandon, call_id)
            raise
        on_loop(self.finish(call_id, result))
        return result


async def forget_calls(store: ToolCallStore, run: common_pb2.Run, calls: ToolCalls | None) -> None:
    """The run has ended: no later attempt will ask its calls' record. A first
    attempt that stored none has nothing to delete (no transaction then)."""
    if run.attempt <= 1 and not (calls and calls.recorded):
        return
    try:
        await store.forget_run(run.run_id)
    except Exception as error:  # its thread's deletion removes them too
        log.warning("run %s: its tool-call record stays: %s", run.run_id, error)


class CallBoundary(BaseCallbackHandler):
    """A cancel's boundary before a model call: once a cancel asked, no model call
    starts (the graph is taken down there; tool calls are held in `begin`)."""

    run_inline = True  # on the event loop, no thread hop; every hook is a flag test
    raise_error = True

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls

    def _refuse(self) -> None:
        if self.calls.stopping:
            raise asyncio.CancelledError("the run was cancelled before this model call")

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()

    def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()


_installed = False


def install(record_model_calls: bool) -> None:
    """Wrap `ToolNode`'s per-call step (once per process): every ToolNode, wherever
    a graph builds it, records its calls when it runs inside a Waybill run."""
    global _installed
    if _installed:
        return
    _installed = True
    if record_model_calls:
        install_model_record()
    original_async = ToolNode._arun_one
    original_sync = ToolNode._run_one

    async def _arun_one(self: ToolNode, call: Any, input_type: Any, tool_runtime: Any) -> Any:
        calls = tool_calls_of(tool_runtime.config)
        if calls is None:
            return await original_async(self, call, input_type, tool_runtime)
        return await calls.arun(
            call,
            self.tools_by_name.get(call["name"]),
            lambda: original_async(self, call, input_type, tool_runtime),
        )

    def _run_one(self: ToolNode, call: Any, input_type: Any, tool_runtime: Any) -> Any:
        calls = tool_calls_of(tool_runtime.config)
        if calls is None:
            return original_sync(self, call, input_type, tool_runtime)
        return calls.run(
            call,
            self.tools_by_name.get(call["name"]),
            lambda: original_sync(self, call, input_type, tool_runtime),
        )

    ToolNode._arun_one = _arun_one  # type: ignore[method-assign]
    ToolNode._run_one = _run_one  # type: ignore[method-assign]
