"""A run admission ended before it started: its log is closed so its streams end.

Nothing is built for it. Admission has already ended the run under this epoch,
so its lease ends too (a renewal now reports it lost); closing the log is still
this epoch's to do, and the journal itself refuses an older epoch.
"""

from __future__ import annotations

import logging
import math

from waybill.common import codec
from waybill.services.runner.ending.outcome import RunAttemptsExhausted
from waybill.services.runner.ending.receipts import confirm_finished, receipt_without_state
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.reporting.frame_sink import FrameSink
from waybill.services.runner.reporting.frames import error_event
from waybill.services.runner.stats import STATS
from waybill.v1 import admission_pb2, common_pb2

log = logging.getLogger("waybill.runner")


async def passes_start_barrier(run: common_pb2.Run, peers: RunnerPeers) -> bool:
    """Whether admission lets the run start now (asked when the claim did not start
    it). A run it refuses is closed here, and its receipt still tells its webhooks."""
    begin = await peers.admission.BeginRun(
        admission_pb2.BeginRunRequest(run_id=run.run_id, epoch=run.epoch),
        timeout=peers.rpc_timeout,
    )
    if begin.started:
        return True
    ended = await close_unstarted(run, peers, begin.reason)
    if ended is not None:
        webhook = str(codec.loads(run.kwargs_json, {}).get("webhook") or "")
        receipt = await receipt_without_state(peers, run, webhook, *ended)
        if receipt is not None and receipt.webhooks_held:
            await confirm_finished(peers, run)
    return False


async def close_unstarted(
    run: common_pb2.Run, peers: RunnerPeers, reason: str
) -> tuple[common_pb2.RunStatus, BaseException | None] | None:
    """Close the log of a run the start barrier refused (`reason`); how it ended,
    for its receipt (None: a reason this runner does not know)."""
    settled = RunFence(run.run_id, run.epoch, lease_seconds=math.inf)
    sink = FrameSink(
        peers.journal,
        peers.journal_link,
        run.run_id,
        run.epoch,
        settled,
        peers.rpc_timeout,
    )
    if reason == "cancelled":
        STATS.runs_cancelled_before_start += 1
        log.info("run %s was cancelled before it started", run.run_id)
        await sink.close()
        return common_pb2.RUN_STATUS_INTERRUPTED, None
    if reason == "exhausted":
        log.warning("run %s: out of attempts", run.run_id)
        message = f"the run was taken over {run.attempt - 1} times and gave up"
        failure = RunAttemptsExhausted(message)
        sink.emit(*error_event(failure))
        await sink.flush()
        await sink.close()
        return common_pb2.RUN_STATUS_ERROR, failure
    return None
