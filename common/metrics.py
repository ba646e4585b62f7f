"""Prometheus metrics: the plumbing every service shares.

Each gRPC service serves `/metrics` on its own HTTP port when
`WAYBILL_<SERVICE>_METRICS_PORT` is set (off by default: the embedded stack runs
every process on one machine and needs no scraper); the gateway serves it on its
HTTP app. Metric objects live in each service's `metrics.py`; this module holds
what they share:

- `StatsCollector` exposes a process's existing stats dataclass (the counters
  `GetStats` already serves) at scrape time, so nothing is counted twice;
- `ScrapedGauge` reads a value from the service's event loop (e.g. a queue depth
  from SQL) only when Prometheus asks, so nothing polls between scrapes.

Hot paths count per batch or per run, never per event or token.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import REGISTRY, Info, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from waybill.common.migrate import UPGRADES, schema_of

log = logging.getLogger("waybill.metrics")

# Seconds: an event-append batch takes ~0.1 ms in memory, up to seconds when Redis retries.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
# Seconds a run waits for a runner: none with a free slot, minutes on a full fleet.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class HasStats(Protocol):
    def as_dict(self) -> dict[str, int]: ...


class StatsCollector(Collector):
    """A stats dataclass as Prometheus metrics: `<prefix>_<field>_total` counters,
    and gauges for the fields named in `gauges` (values that go down)."""

    def __init__(
        self,
        prefix: str,
        stats: HasStats,
        documentation: Mapping[str, str],
        gauges: Iterable[str] = (),
    ) -> None:
        self.prefix = prefix
        self.stats = stats
        self.documentation = documentation
        self.gauges = frozenset(gauges)

    def collect(self) -> Iterable[Metric]:
        for name, value in self.stats.as_dict().items():
            full = f"{self.prefix}_{name}"
            doc = self.documentation.get(name, name.replace("_", " "))
            if name in self.gauges:
                yield GaugeMetricFamily(full, doc, value=value)
            else:
                yield CounterMetricFamily(full, doc, value=value)


class ScrapedGauge(Collector):
    """Gauges computed on the service's event loop when scraped (the HTTP server
    answers on its own thread). A read that fails or hangs is left out of that scrape."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        read: Callable[[], Awaitable[Mapping[str, float]]],
        documentation: Mapping[str, str],
        timeout: float = 2.0,
    ) -> None:
        self.loop = loop
        self.read = read
        self.documentation = documentation
        self.timeout = timeout

    def collect(self) -> Iterable[Metric]:
        future = asyncio.run_coroutine_threadsafe(_awaited(self.read), self.loop)
        try:
            values = future.result(self.timeout)
        except Exception as error:  # a scrape must not take the service down
            future.cancel()
            log.warning("metrics: could not read %s: %s", sorted(self.documentation), error)
            return
        for name, value in values.items():
            yield GaugeMetricFamily(name, self.documentation.get(name, name), value=value)

    def describe(self) -> Iterable[Metric]:
        return []  # not read at registration: the loop may not be running yet


async def _awaited(read: Callable[[], Awaitable[Any]]) -> Any:
    return await read()


def register(collector: Collector) -> None:
    REGISTRY.register(collector)


def build_version() -> str:
    try:
        return importlib.metadata.version("waybill")
    except importlib.metadata.PackageNotFoundError:  # a source tree run without install
        return "unknown"


def register_build_info(service: str) -> None:
    """`waybill_build_info{service, version, schema}`: what runs where, for
    `waybill doctor --cluster` and dashboards (the schema is the revision this
    build's service needs; the gateway has none)."""
    global _build_info
    schema = schema_of(service).head() if service in UPGRADES else ""
    if _build_info is None:  # once a process (a test may build several apps in one)
        _build_info = Info("waybill_build", "This process's Waybill build.")
    _build_info.info({"service": service, "version": build_version(), "schema": schema})


_build_info: Info | None = None


def serve_metrics(service: str, host: str, port: int | None) -> None:
    """Serve `/metrics` on `host:port` from a daemon thread; no port: no server.
    A port already taken is logged, not fatal: metrics must not stop the service."""
    register_build_info(service.lower())
    if not port:
        return
    try:
        start_http_server(port, addr=host)
    except OSError as error:
        log.error("%s metrics not served on %s:%d: %s", service, host, port, error)
        return
    log.info("%s metrics on http://%s:%d/metrics", service, host, port)
