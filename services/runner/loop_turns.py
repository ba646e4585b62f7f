"""Turns of the runner's event loop while a model streams.

A model that streams without awaiting anything between chunks (a fast local
model, or a provider client that reads a whole buffered response) holds the
runner's event loop for its whole answer: the run's frames queue up unsent,
lease renewals wait, and other runs on the runner stall. `LoopTurns` is a
callback that yields the loop from inside the model's stream now and then, so
frames leave while the model is still producing them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler

TURN_EVERY_SECONDS = 0.0005  # how long a burst may hold the event loop


class LoopTurns(AsyncCallbackHandler):
    run_inline = True  # awaited in the model's own task: that is the point

    def __init__(self, every_seconds: float = TURN_EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._due = 0.0

    @property
    def ignore_llm(self) -> bool:
        # Only on an event loop: a model called synchronously (a sync node, in a
        # worker thread) would make LangChain start a fresh event loop per token
        # just to run this callback.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return True
        return False

    async def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() >= self._due:
            await asyncio.sleep(0)
            self._due = loop.time() + self.every_seconds
