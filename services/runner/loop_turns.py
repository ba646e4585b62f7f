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


class LoopTurns:
    def __init__(self, every_seconds: float = TURN_EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._due = 0.0

    async def take_turn(self, *args: Any, **kwargs: Any) -> None:
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
        return self.take_turn if loop.time() >= self._due else no_turn


def no_turn(*args: Any, **kwargs: Any) -> None:
    return None
