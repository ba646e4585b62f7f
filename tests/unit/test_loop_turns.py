"""A model that streams without awaiting anything still lets the runner's event loop
run (frames leave, leases renew) while it streams: the run journal's token hook
gives it turns."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import START, MessagesState, StateGraph

from waybill.services.runner.graphs.chat_models import ScriptedChatModel
from waybill.services.runner.reporting.loop_turns import LoopTurns
from waybill.services.runner.reporting.run_journal import RunJournal


class KeptRecords:
    """A record sink that keeps what it is given (the journal is not involved here)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []

    def emit(self, record_type: str, data: Any) -> None:
        self.records.append((record_type, data))


def journal_with_turns(every_seconds: float | None) -> RunJournal:
    turns = None if every_seconds is None else LoopTurns(every_seconds=every_seconds)
    return RunJournal(KeptRecords(), turns)  # type: ignore[arg-type]


async def turns_taken_by_others_while_streaming(journal: RunJournal) -> int:
    model = ScriptedChatModel()
    others = 0

    async def another_task() -> None:
        nonlocal others
        while True:
            others += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(another_task())
    await asyncio.sleep(0)  # started
    started = others
    chunks = [c async for c in model.astream("/tokens 200", config={"callbacks": [journal]})]
    task.cancel()
    assert len(chunks) == 201  # 200 tokens and the closing chunk
    return others - started


async def test_without_turns_a_fast_model_holds_the_loop_for_its_whole_answer() -> None:
    # LangChain's own start and end of the call give a few turns; the 200 tokens none.
    assert await turns_taken_by_others_while_streaming(journal_with_turns(None)) < 10


async def test_with_turns_other_tasks_run_while_the_model_streams() -> None:
    assert await turns_taken_by_others_while_streaming(journal_with_turns(0)) >= 200


async def test_the_journal_still_records_the_model_call_it_gives_turns_in() -> None:
    journal = journal_with_turns(0)
    await turns_taken_by_others_while_streaming(journal)
    assert [kind for kind, _ in journal.sink.records] == ["llm_start", "llm_end"]  # type: ignore[attr-defined]


def test_a_model_called_outside_an_event_loop_gets_a_plain_no_op() -> None:
    # No running loop (a sync node in a worker thread): LangChain would start a
    # fresh loop per token to run an async hook, so the hook is a plain function.
    hook = journal_with_turns(0).on_llm_new_token
    assert not asyncio.iscoroutinefunction(hook)
    assert hook("token") is None


async def test_a_sync_model_in_a_worker_thread_streams_and_is_recorded() -> None:
    journal = journal_with_turns(0)

    def stream_in_thread() -> int:
        assert threading.current_thread() is not threading.main_thread()
        model = ScriptedChatModel()
        return len(list(model.stream("/tokens 50", config={"callbacks": [journal]})))

    assert await asyncio.to_thread(stream_in_thread) == 51
    assert [kind for kind, _ in journal.sink.records] == ["llm_start", "llm_end"]  # type: ignore[attr-defined]


async def test_on_the_event_loop_the_hook_is_the_turn_when_one_is_due() -> None:
    journal = journal_with_turns(60)
    hook = journal.on_llm_new_token
    assert asyncio.iscoroutinefunction(hook)  # the first token: due at once
    await hook("token")
    # The second token's turn takes the first token out, however soon it comes.
    second = journal.on_llm_new_token
    assert asyncio.iscoroutinefunction(second)
    await second("second token")
    assert journal.on_llm_new_token("third token") is None  # the next turn is a minute away


class TokenCount(BaseCallbackHandler):
    """Counts the tokens a model has produced so far."""

    run_inline = True

    def __init__(self) -> None:
        self.produced = 0

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.produced += 1


async def test_each_model_calls_first_token_reaches_the_graphs_consumer_at_once() -> None:
    """Through LangGraph's stream (a waiter task, `asyncio.wait`, the consumer) a
    chunk needs several loop iterations. The hook runs before LangGraph's handler
    queues the token's chunk, so the turn at a call's second token gives them all:
    its first token is out before the model makes its third."""
    model = ScriptedChatModel()

    async def ask(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke("/tokens 300")]}

    builder = StateGraph(MessagesState)
    builder.add_node("first", ask)
    builder.add_node("second", ask)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    graph = builder.compile()
    count = TokenCount()
    journal = journal_with_turns(60.0)  # no turn but each call's first
    produced_at_first_chunk: dict[str, int] = {}
    config: Any = {"callbacks": [count, journal]}
    async for chunk, metadata in graph.astream({"messages": []}, config, stream_mode="messages"):
        node = metadata["langgraph_node"]
        if chunk.content and node not in produced_at_first_chunk:
            produced_at_first_chunk[node] = count.produced
    assert produced_at_first_chunk == {"first": 2, "second": 301 + 2}
