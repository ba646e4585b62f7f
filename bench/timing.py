"""What one timed run produced, and the input that makes the scripted model stream."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class BenchError(RuntimeError):
    """A run that cannot be timed meaningfully (it failed, or never streamed a token)."""


@dataclass(frozen=True)
class RunTiming:
    """One run, every time measured from the moment the request was sent."""

    tokens: int
    events: int
    seconds: float  # until the stream closed
    first_token_seconds: float  # until the first `messages` event with non-empty content
    last_event_seconds: float  # until the last event arrived

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    @property
    def delivery_seconds(self) -> float:
        """From the first token to the last event: how long the tokens took to arrive."""
        return self.last_event_seconds - self.first_token_seconds

    @property
    def tail_seconds(self) -> float:
        """From the last event to the stream closing: the run's end-of-run bookkeeping."""
        return self.seconds - self.last_event_seconds

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "events_per_second": self.events_per_second,
            "delivery_seconds": self.delivery_seconds,
            "tail_seconds": self.tail_seconds,
        }


def token_input(tokens: int) -> dict[str, Any]:
    """`/tokens N` makes the scripted model stream N tokens without sleeping."""
    return {"messages": [{"role": "user", "content": f"/tokens {tokens}"}]}


def checked_timing(
    tokens: int,
    events: int,
    seconds: float,
    first_token_seconds: float | None,
    last_event_seconds: float | None,
) -> RunTiming:
    if first_token_seconds is None or last_event_seconds is None:
        raise BenchError(f"a /tokens {tokens} run streamed no token ({events} events)")
    if events < tokens:
        raise BenchError(f"a /tokens {tokens} run streamed only {events} events")
    return RunTiming(tokens, events, seconds, first_token_seconds, last_event_seconds)
