"""A model that streams without awaiting anything still lets the runner's event loop
run (frames leave, leases renew) while it streams."""

from __future__ import annotations

import asyncio

from services.runner.loop_turns import LoopTurns
from services.runner.models import ScriptedChatModel


async def turns_taken_by_others_while_streaming(callbacks: list[LoopTurns]) -> int:
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
    chunks = [c async for c in model.astream("/tokens 200", config={"callbacks": callbacks})]
    task.cancel()
    assert len(chunks) == 201  # 200 tokens and the closing chunk
    return others - started


async def test_without_turns_a_fast_model_holds_the_loop_for_its_whole_answer() -> None:
    # LangChain's own start and end of the call give a few turns; the 200 tokens none.
    assert await turns_taken_by_others_while_streaming([]) < 10


async def test_with_turns_other_tasks_run_while_the_model_streams() -> None:
    assert await turns_taken_by_others_while_streaming([LoopTurns(every_seconds=0)]) >= 200


def test_a_model_called_outside_an_event_loop_is_left_alone() -> None:
    # No running loop (a sync node in a worker thread): LangChain would start a
    # fresh loop per token to run an async callback, so this one opts out.
    assert LoopTurns().ignore_llm is True


async def test_on_the_event_loop_it_takes_part() -> None:
    assert LoopTurns().ignore_llm is False
