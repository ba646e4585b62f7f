"""A run admission ended before it started: its log is closed so its streams end.

Nothing is built for it. Admission has already ended the run under this epoch,
so its lease ends too (a renewal now reports it lost); closing the log is still
this epoch's to do, and the journal itself refuses an older epoch.
"""

from __future__ import annotations

import logging
import math

from waybill.services.runner.fencing import RunFence
from waybill.services.runner.frames import error_event
from waybill.services.runner.journal_sink import JournalSink
from waybill.services.runner.outcome import RunAttemptsExhausted
from waybill.services.runner.peers import Peers
from waybill.services.runner.stats import STATS
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.runner")


async def close_unstarted(
    run: common_pb2.Run, peers: Peers, reason: str
) -> tuple[common_pb2.RunStatus, BaseException | None] | None:
    """Close the log of a run the start barrier refused (`reason`); how it ended,
    for its receipt (None: a reason this runner does not know)."""
    settled = RunFence(run.run_id, run.epoch, lease_seconds=math.inf)
    sink = JournalSink(
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
