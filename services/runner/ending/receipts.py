"""A run's receipt at delivery, and the release of its held webhooks.

Every run that ends gets a receipt before its terminal status: one with the
final state when the graph ran, one without when it never had a graph (it was
ended before it started, or its factory raised). Delivery holds the run's
webhooks until `confirm_finished` says admission took the terminal status.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import StateSnapshot

from waybill.common import codec
from waybill.services.runner.ending.outcome import Outcome, is_paused
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.run.outages import patiently
from waybill.services.runner.stats import STATS
from waybill.v1 import common_pb2, delivery_pb2

log = logging.getLogger("waybill.runner")


def run_error(error: BaseException | None) -> common_pb2.RunError:
    return common_pb2.RunError(
        error=type(error).__name__ if error else "",
        message=str(error) if error else "",
    )


def final_output_json(snapshot: StateSnapshot) -> bytes:
    """The receipt's summary of the final state: its keys, last message and next nodes."""
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    messages = values.get("messages") or []
    last = messages[-1] if messages else None
    return codec.dumps(
        {
            "state_keys": sorted(values),
            "last_message": getattr(last, "content", None),
            "next": list(snapshot.next),
        }
    )


async def write_receipt(
    peers: RunnerPeers, request: delivery_pb2.WriteReceiptRequest
) -> delivery_pb2.Receipt:
    """Written patiently (delivery may be restarting); a try that timed out may have
    been stored, so the next one's conflict means it was (its webhooks, if any, wait
    for `ConfirmFinished`, which releases none that are not held)."""
    tries = 0

    async def write(deadline: float) -> delivery_pb2.Receipt:
        nonlocal tries
        tries += 1
        try:
            written: delivery_pb2.Receipt = await peers.delivery.WriteReceipt(
                request, timeout=deadline, wait_for_ready=True
            )
            return written
        except grpc.aio.AioRpcError as error:
            if tries == 1 or error.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        stored: delivery_pb2.Receipt = await peers.delivery.GetReceipt(
            delivery_pb2.GetReceiptRequest(run_id=request.run_id),
            timeout=deadline,
            wait_for_ready=True,
        )
        stored.webhooks_held = 1  # not known: confirm, to be sure
        return stored

    return await patiently(
        write,
        f"run {request.run_id}: receipt",
        rpc_timeout=peers.rpc_timeout,
        window=peers.outage_seconds,
    )


async def receipt_without_state(
    peers: RunnerPeers,
    run: common_pb2.Run,
    webhook: str,
    status: common_pb2.RunStatus,
    error: BaseException | None,
) -> delivery_pb2.Receipt | None:
    """A receipt with no final state; None when it could not be written (the run
    ends either way)."""
    request = delivery_pb2.WriteReceiptRequest(
        run_id=run.run_id,
        thread_id=run.thread_id,
        epoch=run.epoch,
        outcome=status,
        final_output_json=b"null",
        error=run_error(error),
        assistant_id=run.assistant_id,
        webhook=webhook,
    )
    try:
        return await write_receipt(peers, request)
    except Exception as failure:  # the run ends either way
        log.warning("run %s: no receipt written (%s)", run.run_id, failure)
        return None


async def confirm_finished(peers: RunnerPeers, run: common_pb2.Run) -> None:
    """Release the run's webhooks now; if this fails, delivery asks admission later."""
    try:
        request = delivery_pb2.ConfirmFinishedRequest(run_id=run.run_id, epoch=run.epoch)
        await patiently(
            lambda deadline: peers.delivery.ConfirmFinished(
                request, timeout=deadline, wait_for_ready=True
            ),
            f"run {run.run_id}: webhooks' confirmation",
            rpc_timeout=peers.rpc_timeout,
            window=peers.outage_seconds,
        )
    except Exception as error:  # the outbox settles held webhooks on its own
        STATS.confirmations_failed += 1
        log.warning("run %s: webhooks not confirmed (%s)", run.run_id, error)


def receipt_request(
    run: common_pb2.Run,
    outcome: Outcome,
    snapshot: StateSnapshot,
    *,
    webhook: str,
    verify_workspace: bool,
    presented: list[str],
    untouched: bool,
    usage: dict[str, Any],
    start: CheckpointTuple | None,
) -> delivery_pb2.WriteReceiptRequest:
    """The receipt of a run whose graph ran: its final state, and what delivery
    checks of the workspace (`start`: the checkpoint the run started from)."""
    return delivery_pb2.WriteReceiptRequest(
        run_id=run.run_id,
        thread_id=run.thread_id,
        epoch=run.epoch,
        outcome=outcome.status,
        final_output_json=final_output_json(snapshot),
        error=run_error(outcome.error),
        assistant_id=run.assistant_id,
        verify_workspace=verify_workspace,
        presented=presented,
        paused=is_paused(outcome, snapshot),
        webhook=webhook,
        values_json=codec.dumps(snapshot.values or {}),
        usage_json=codec.dumps(usage),
        untouched=untouched,
        continues_run_id=str(start.metadata.get("run_id") or "") if start else "",
    )
