"""Turns of the runner's event loop while a model streams.

A model that streams without awaiting anything between chunks (a fast local
model, or a provider client that reads a whole buffered response) holds the
runner's event loop for its whole answer: the run's frames queue up unsent,
lease renewals wait, and other runs on the runner stall. `LoopTurns` yields the
loop from inside the model's stream now and then, so frames leave while the
model is still producing them.

It is called for every token by the run's `RunJournal` (its `on_llm_new_token`
hook), not registered as a callback handler of its own: LangChain's dispatch
costs about 2.5 µs per handler per token, a tenth of what the rest of the
runner spends on a token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

TURN_EVERY_SECONDS = 0.0005  # how long a burst may hold the event loop
# Loop iterations of the turn that takes a model call's first token out. A chunk
# reaches the run's frames through LangGraph's stream waiter (a task, then
# `asyncio.wait`'s callback, then the consumer), and the frame leaves through the
# journal link's task and its gRPC write: about five iterations. One iteration
# per turn would take that many turns, holding the first token back by ~3 ms;
# later turns stay one iteration (deeper ones made more, smaller batches and
# cost more than they gave).
FIRST_TURN_ITERATIONS = 5


class LoopTurns:
    def __init__(self, every_seconds: float = TURN_EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._due = 0.0
        self._tokens_of_call = 0

    def model_started(self) -> None:
        """A model call starts: its first token is taken to the client at once."""
        self._tokens_of_call = 0

    async def take_turn(self, *args: Any, **kwargs: Any) -> None:
        await self._turn(1)

    async def first_turn(self, *args: Any, **kwargs: Any) -> None:
        await self._turn(FIRST_TURN_ITERATIONS)

    async def _turn(self, iterations: int) -> None:
        for _ in range(iterations):
            await asyncio.sleep(0)
        self._due = asyncio.get_running_loop().time() + self.every_seconds

    def token_hook(self) -> Callable[..., Coroutine[Any, Any, None] | None]:
        """What a callback's `on_llm_new_token` should be for this token: the turn
        when one is due, else a plain no-op that LangChain calls without making a
        coroutine. Off the event loop (a sync model in a worker thread) never the
        turn: for an async hook LangChain would start a fresh event loop per token."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return no_turn
        self._tokens_of_call += 1
        if self._tokens_of_call == 2:
            # The hook runs before LangGraph's own handler has queued this token's
            # chunk: the turn at the second token is the one that takes the first out.
            return self.first_turn
        return self.take_turn if loop.time() >= self._due else no_turn


def no_turn(*args: Any, **kwargs: Any) -> None:
    return None
