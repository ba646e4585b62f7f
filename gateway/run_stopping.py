"""Stopping a thread's active runs through the durable cancel path, so that the
thread can be deleted with nothing of theirs half-written (LangGraph Platform's
`DELETE /threads/{id}` cancels a thread's runs and deletes it)."""

from __future__ import annotations

import asyncio

from fastapi import HTTPException

from waybill.common.settings import get_settings
from waybill.gateway.peers import Peers, call
from waybill.gateway.streams import wait_for_end
from waybill.v1 import admission_pb2, common_pb2

ACTIVE = (common_pb2.RUN_STATUS_PENDING, common_pb2.RUN_STATUS_RUNNING)

# A thread with more active runs than this is refused (409) rather than stopped.
MOST_ACTIVE_RUNS = 1000


async def active_run_ids(peers: Peers, thread_id: str) -> list[str]:
    found: list[str] = []
    for status in ACTIVE:
        reply = await call(
            peers.admission.ListRuns(
                admission_pb2.ListRunsRequest(
                    thread_id=thread_id, limit=MOST_ACTIVE_RUNS, status=status
                )
            )
        )
        found.extend(run.run_id for run in reply.runs)
    return found


async def stop_active_runs(peers: Peers, thread_id: str) -> None:
    """Cancel (interrupt) the thread's pending and running runs, then wait until each
    has ended: its runner stopped and wrote its end, or the claim finalized a pending
    one. Gives up after `thread_delete_stop_seconds` with 409."""
    run_ids = await active_run_ids(peers, thread_id)
    if not run_ids:
        return
    try:
        await call(
            peers.admission.CancelRuns(
                admission_pb2.CancelRunsRequest(
                    thread_id=thread_id, run_ids=run_ids, action="interrupt"
                )
            )
        )
    except HTTPException as error:
        if error.status_code != 404:  # 404: they ended meanwhile
            raise
    seconds = get_settings().thread_delete_stop_seconds
    ends = asyncio.gather(*(wait_for_end(peers.journal, run_id) for run_id in run_ids))
    try:
        await asyncio.wait_for(ends, timeout=seconds)
    except TimeoutError as error:
        raise HTTPException(
            409, f"Thread {thread_id}: its runs did not stop within {seconds:g} s; retry."
        ) from error
