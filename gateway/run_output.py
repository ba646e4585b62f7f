"""What `wait`, `join` and `cancel?wait=true` answer, as LangGraph Platform's
`_RunResult` computes it: the run's last root `values` event (the graph's output
schema applied, so no private channel shows), or `{"__error__": …}` when it
failed. A run that paused on an interrupt, or that sent no `values` event (its
stream modes left it out, or it was cancelled first), answers the thread's
values instead, with `__interrupt__` beside them."""

from __future__ import annotations

from typing import Any

import grpc

from waybill.common import codec
from waybill.gateway.peers import Peers, call
from waybill.gateway.streams import expired, journal_events
from waybill.v1 import common_pb2, runner_pb2

INTERRUPT_KEY = "__interrupt__"


class RunOutput:
    """Folds a run's events, in order, into its answer."""

    def __init__(self) -> None:
        self.last_values: Any = None
        self.seen_values = False
        self.interrupted = False
        self.error: dict[str, Any] | None = None

    def absorb(self, event: str, data: bytes) -> None:
        if event == "error":
            self.error = codec.loads(data)
        elif event in ("values", "updates"):
            chunk = codec.loads(data)
            if isinstance(chunk, dict) and INTERRUPT_KEY in chunk:
                self.interrupted = True
            elif event == "values":
                self.last_values, self.seen_values = chunk, True


async def followed_output(peers: Peers, run_id: str) -> RunOutput:
    """Follow the run's log to its end."""
    output = RunOutput()
    try:
        async for event in journal_events(peers.journal, run_id):
            output.absorb(event.event, event.data)
    except grpc.aio.AioRpcError as failure:
        if not expired(failure):  # expired long after the run ended: the thread has it
            output.error = {
                "error": "StreamError",
                "message": failure.details() or "journal unavailable",
            }
    return output


async def run_output(peers: Peers, run: common_pb2.Run, from_thread: bool = True) -> Any:
    """`from_thread`: a run with no `values` event answers the thread's values
    (`wait`, `join`); without it, `{}` (`cancel?wait=true`, as the reference)."""
    output = await followed_output(peers, run.run_id)
    if output.error is not None:
        return {"__error__": output.error}
    if output.seen_values and not output.interrupted:
        return output.last_values
    return await thread_values(peers, run) if from_thread else {}


async def thread_values(peers: Peers, run: common_pb2.Run) -> Any:
    """The thread's values, a pause's interrupts beside them (LangGraph Platform
    shows a pause in the output itself)."""
    reply = await call(
        peers.runner.GetThreadState(
            runner_pb2.GetThreadStateRequest(thread_id=run.thread_id, graph_id=run.graph_id)
        )
    )
    state = codec.loads(reply.json, {})
    values = state.get("values")
    if state.get("interrupts") and isinstance(values, dict):
        values = {**values, INTERRUPT_KEY: state["interrupts"]}
    return values
