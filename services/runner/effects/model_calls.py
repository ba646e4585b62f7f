"""Model calls after the last checkpoint, replayed on a takeover where their whole
response was recorded: no tokens paid twice, and the same tool call ids, so that the
tool-call record (tool_calls.py) finds the calls it holds.

It rides on LangChain's LLM cache, the hook every chat model's `ainvoke` already
consults before it calls its provider (and after, with the response): the runner
installs `RecordedModelCalls` as the process's cache, and it answers only inside
a Waybill run (the record of the run's scope, `RunScope.current()`: no config
reaches a cache), and only from that run's own earlier attempts. A first attempt never
reads; every attempt records each response as the run's `tool_calls` row
`model:<digest of model and prompt>:<n>` (n counts repeats of one prompt), written
when the next tool call is about to start (a tool's ids must be durable before its
effect): a response no tool call follows (a final answer) is not recorded, as
writing it at once costs a streaming run (bench/RESULTS.md). A replayed response is marked
`response_metadata["waybill_replayed"]`, its tokens are not counted again, and the
journal gets an `llm_replayed` record.

Not covered: a model whose `cache` is False or its own, `astream` called directly
(LangChain's stream path does not consult the cache), a project that sets a global
cache of its own (it is kept), and sync model calls.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from langchain_core.caches import BaseCache
from langchain_core.globals import get_llm_cache, set_llm_cache
from langchain_core.outputs import ChatGeneration, Generation

from waybill.services.runner.effects.tool_call_store import CallKey, CallStatus, ToolCallStore
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.run.scope import RunScope

log = logging.getLogger("waybill.runner.model_calls")

REPLAYED_KEY = "waybill_replayed"


class SharedCallRecord(Protocol):
    """What the model record shares with its run's tool calls (tool_calls.py)."""

    store: ToolCallStore
    run_id: str
    thread_id: str
    fence: RunFence
    serde: Any
    emit: Callable[[str, dict[str, Any]], None]
    recorded: bool  # whether this attempt may have stored a record


def was_replayed(generations: Sequence[Any]) -> bool:
    message = getattr(generations[0], "message", None) if generations else None
    return bool(getattr(message, "response_metadata", {}).get(REPLAYED_KEY))


class ModelRecord:
    """One attempt's model calls: keys in call order, writes under way."""

    def __init__(self, calls: SharedCallRecord, replaying: bool) -> None:
        self.calls = calls
        self.replaying = replaying  # only a later attempt has anything to replay
        self._seen: dict[str, int] = {}
        self._keys: dict[str, list[str]] = {}  # digest -> keys looked up, not yet recorded
        self._unwritten: list[tuple[str, dict[str, Any]]] = []

    def _next_key(self, prompt: str, llm_string: str) -> str:
        digest = hashlib.sha256(f"{llm_string}\0{prompt}".encode()).hexdigest()[:40]
        n = self._seen.get(digest, 0)
        self._seen[digest] = n + 1
        key = f"model:{digest}:{n}"
        self._keys.setdefault(digest, []).append(key)
        return key

    async def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        key = self._next_key(prompt, llm_string)
        if not self.replaying:
            return None
        record = await self.calls.store.read(self.calls.run_id, key)
        if record is None or record.status != CallStatus.FINISHED:
            return None
        self._keys[key.split(":")[1]].remove(key)
        found = self.calls.serde.loads_typed((record.result_type or "null", record.result or b""))
        generations: list[Generation] = []
        for message, info in zip(found["messages"], found["info"], strict=True):
            message.response_metadata = {**message.response_metadata, REPLAYED_KEY: True}
            generations.append(ChatGeneration(message=message, generation_info=info))
        self.calls.emit("llm_replayed", {"call": key, "messages": len(generations)})
        return generations

    def update(self, prompt: str, llm_string: str, generations: Sequence[Generation]) -> None:
        digest = hashlib.sha256(f"{llm_string}\0{prompt}".encode()).hexdigest()[:40]
        pending = self._keys.get(digest)
        if not pending or not all(isinstance(g, ChatGeneration) for g in generations):
            return
        key = pending.pop(0)
        response = {
            "messages": [g.message for g in generations],  # type: ignore[attr-defined]
            "info": [g.generation_info for g in generations],
        }
        # Kept until a tool call is about to start (`written`): written at once, beside
        # the step's checkpoint, it slowed a streaming run on SQLite (bench/RESULTS.md).
        self._unwritten.append((key, response))

    async def _write(self, key: str, response: dict[str, Any]) -> None:
        calls = self.calls
        if not calls.fence.held:
            return
        result_type, blob = calls.serde.dumps_typed(response)
        call = CallKey(calls.run_id, calls.thread_id, key, "model", "model")
        try:
            calls.recorded = True
            await calls.store.put_finished(call, calls.fence.epoch, result_type, blob)
        except Exception as error:  # a lost record costs tokens on a takeover, no more
            log.warning("run %s: model call not recorded: %s", calls.run_id, error)

    async def written(self) -> None:
        """Every response seen so far is stored (before a tool acts on its ids)."""
        while self._unwritten:
            key, response = self._unwritten.pop(0)
            await self._write(key, response)


class RecordedModelCalls(BaseCache):
    """The process's LLM cache: inside a Waybill run, the run's model record."""

    def lookup(self, prompt: str, llm_string: str) -> Any:
        return None  # sync model calls are not recorded

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        return None

    def clear(self, **kwargs: Any) -> None:
        return None

    async def alookup(self, prompt: str, llm_string: str) -> Any:
        scope = RunScope.current()
        if scope is None:
            return None
        return await scope.tool_calls.models.lookup(prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Any) -> None:
        scope = RunScope.current()
        if scope is not None:
            scope.tool_calls.models.update(prompt, llm_string, return_val)


def install_model_record() -> None:
    """Once per process; a project's own global cache is left in place."""
    current = get_llm_cache()
    if current is None:
        set_llm_cache(RecordedModelCalls())
    elif not isinstance(current, RecordedModelCalls):
        log.warning("a global LLM cache is set: model calls are not recorded for replay")
