"""A run's state must fit in one gRPC message: it is journaled as one event (the
`values` stream mode), kept in the receipt and the run's end, and read back by
`/state`. A state past that limit used to break the journal's append stream and
leave the thread unreadable (413); it is refused instead, as `StateTooLarge`,
and the run's checkpoints are dropped so that its thread reads as before it.
"""

from __future__ import annotations

from typing import Any

from waybill.common import codec
from waybill.services.runner.reporting.frames import RunRefusal

# Room in a message for what goes with the state (the event's name, the request).
ENVELOPE_BYTES = 64 * 1024


class StateTooLarge(RunRefusal):
    """The run's state (or one of its events) is larger than a message may be."""


def largest_bytes(max_message_bytes: int) -> int:
    """What a state or an event may take of a message (WAYBILL_GRPC_MAX_MESSAGE_BYTES)."""
    return max_message_bytes - ENVELOPE_BYTES


def refusal(size: int, what: str, largest: int) -> StateTooLarge:
    return StateTooLarge(
        f"the run's {what} is {size} bytes, more than the {largest} a run's state "
        "or event may take (WAYBILL_GRPC_MAX_MESSAGE_BYTES); the run's changes to its "
        "thread were dropped"
    )


def check_frames(frames: list[tuple[str, bytes]], largest: int) -> None:
    for event, data in frames:
        if len(data) > largest:
            raise refusal(len(data), f"`{event}` event", largest)


def check_state(values: Any, largest: int) -> None:
    size = len(codec.dumps(values or {}))
    if size > largest:
        raise refusal(size, "state", largest)
