"""What admission counts for Prometheus: the run control plane's facts.

Counted where the fact is decided (admit, claim, start barrier, terminal write,
lease renewal); the queue's depth is read from SQL only when scraped.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from waybill.common.metrics import WAIT_BUCKETS
from waybill.common.usage import TokenCount

RUNS_ADMITTED = Counter("waybill_runs_admitted", "Runs admitted (stored pending or leased).")
RUNS_STARTED = Counter(
    "waybill_runs_started", "Runs that passed the start barrier (takeovers start again)."
)
RUNS_FINISHED = Counter(
    "waybill_runs_finished", "Terminal statuses written, by status.", ["status"]
)
QUEUE_WAIT = Histogram(
    "waybill_run_queue_wait_seconds",
    "From admission to the first claim by a runner.",
    buckets=WAIT_BUCKETS,
)
LEASE_RENEWALS = Counter("waybill_lease_renewals", "Run leases renewed by their runner.")
LEASES_LOST = Counter("waybill_leases_lost", "Renewals refused: the lease had expired or moved on.")
LEASE_TAKEOVERS = Counter(
    "waybill_lease_takeovers", "Runs claimed again after their runner lost the lease."
)
STALE_EPOCH_REFUSED = Counter(
    "waybill_stale_epoch_writes_refused",
    "Writes carrying an old epoch, refused by admission (begin, finish).",
    ["write"],
)
LOG_CLOSES = Counter(
    "waybill_log_closes",
    "Ended runs' journal logs closed by admission after the grace, by what it found: "
    "`open` (the runner never closed it) or `closed` (the runner had).",
    ["found"],
)
TOKENS = Counter(
    "waybill_tokens", "Tokens used by finished runs, by model and kind.", ["model", "kind"]
)

QUEUE_DOCS = {
    "waybill_runs_queued": "Runs pending and due: waiting for a runner.",
    "waybill_runs_running": "Runs running now.",
}


def count_tokens(counts: list[TokenCount]) -> None:
    """A finished run's usage, once per run (not per token)."""
    for count in counts:
        TOKENS.labels(count.model, "input").inc(count.input_tokens)
        TOKENS.labels(count.model, "output").inc(count.output_tokens)
