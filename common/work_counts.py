"""What a process did, counted: the gRPC calls it served, the SQL statements it
sent and the transactions it committed, so that a run's cost in hops can be read
off any stack (`make bench` divides them by the runs it made).

| metric | counted by |
|---|---|
| `waybill_rpcs_served_total{method}` | `RpcCounts`, every server's first interceptor |
| `waybill_sql_statements_total{database}` | SQLite's trace callback; SQLAlchemy's on Postgres |
| `waybill_sql_commits_total{database}` | the `COMMIT`s traced; SQLAlchemy's on Postgres |

`database` is the SQLite file's name (each service has its own, the runner's
checkpoints another) or `postgres`. SQLite is counted below SQLAlchemy, so the
checkpointer's statements count too; psycopg (LangGraph's Postgres checkpointer)
has no such hook, and `bench` reads Postgres's own `pg_stat_database` for that.

The counts are plain integers behind a lock (SQLite's callbacks come from its
connections' threads); Prometheus reads them when it scrapes.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import PurePath
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine


class WorkCounts(Collector):
    """This process's counts, by kind and label."""

    KINDS = {
        "rpcs_served": ("method", "gRPC calls this process served."),
        "sql_statements": ("database", "SQL statements this process sent."),
        "sql_commits": ("database", "SQL transactions this process committed."),
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {kind: Counter() for kind in self.KINDS}

    def add(self, kind: str, label: str) -> None:
        with self._lock:
            self._counts[kind][label] += 1

    def read(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {kind: dict(counts) for kind, counts in self._counts.items()}

    def collect(self) -> Iterable[Metric]:
        for kind, counts in self.read().items():
            label, documentation = self.KINDS[kind]
            family = CounterMetricFamily(f"waybill_{kind}", documentation, labels=[label])
            for value, count in sorted(counts.items()):
                family.add_metric([value], count)
            yield family


COUNTS = WorkCounts()
REGISTRY.register(COUNTS)


class RpcCounts(grpc.aio.ServerInterceptor):
    """Counts every call a server is asked for, by method (one per call, streams too)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        COUNTS.add("rpcs_served", handler_call_details.method)
        return await continuation(handler_call_details)


def trace_sqlite(connection: Any, database: str) -> None:
    """Count what a `sqlite3.Connection` to the file `database` runs (BEGIN and
    COMMIT included: the sqlite3 module sends them as statements)."""
    name = PurePath(database).name

    def traced(statement: str) -> None:
        COUNTS.add("sql_statements", name)
        if statement[:6].upper() == "COMMIT":
            COUNTS.add("sql_commits", name)

    connection.set_trace_callback(traced)


def count_postgres(engine: AsyncEngine) -> None:
    """Count what a Postgres engine sends (SQLite engines are traced below it)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _statement(*_: Any) -> None:
        COUNTS.add("sql_statements", "postgres")

    @event.listens_for(engine.sync_engine, "commit")
    def _commit(*_: Any) -> None:
        COUNTS.add("sql_commits", "postgres")
