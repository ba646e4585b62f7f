"""What the journal counts for Prometheus. Its `GetStats` counters are exposed as
they are (`waybill_journal_*`); here only what they do not already say."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from waybill.common.metrics import LATENCY_BUCKETS
from waybill.services.journal.stats import STATS

APPEND_SECONDS = Histogram(
    "waybill_journal_append_seconds",
    "Time to append one batch of a run's events (numbered, fanned out; SQL follows behind).",
    buckets=LATENCY_BUCKETS,
)
STALE_APPENDS = Counter(
    "waybill_journal_stale_appends_refused",
    "Append batches carrying an epoch older than the run's: a fenced runner's writes.",
)

STATS_DOCS = {
    "events_appended": "Events appended (numbered and fanned out) by this process.",
    "events_stored": "Events written to SQL by this process's write-behind.",
    "subscriptions": "Subscribe calls served.",
    "live_subscribers": "Streams following a run's events live right now.",
}
STATS_GAUGES = ("live_subscribers",)


class JournalLag(Collector):
    """Events appended here but not yet durable in SQL (the write-behind's backlog)."""

    def collect(self) -> Iterable[Metric]:
        lag = max(STATS.events_appended - STATS.events_stored - STATS.events_abandoned, 0)
        yield GaugeMetricFamily(
            "waybill_journal_lag_events", "Appended events not yet written to SQL.", value=lag
        )
