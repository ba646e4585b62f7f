"""What one short run costs in hops: the gRPC calls each service served, the SQL
statements sent and the transactions committed, per run (common/work_counts.py
counts them; this reads every process's /metrics before and after).

N background runs of `/tokens 10` on fresh threads, `concurrency` POSTs in
flight, nothing polled (a poll is a call too): the runs' ends are read off
admission's `FinishRun` count, and the counts are read again once the logs'
backstop closes are due (the log-close grace, then a second; as long before the
first reading, for the runs of the bench's earlier parts). On Postgres the
commits Postgres itself counted for the database (`pg_stat_database`) are added:
LangGraph's checkpointer speaks psycopg, which has no statement hook.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from typing import Any

import asyncpg

from bench.admission import client, create_threads, expect, in_parallel
from bench.timing import BenchError, token_input
from tests.support.stacks import metrics_url, scrape
from waybill.common.launch import Stack
from waybill.common.settings import Settings

SERVICES = ("admission", "runner", "journal", "delivery")
FINISHED = 'waybill_rpcs_served_total{method="/waybill.v1.Admission/FinishRun"}'


def counts_of(stack: Stack) -> dict[str, dict[str, float]]:
    """Every service's work counts: {service: {series: value}}."""
    found = {}
    for service in SERVICES:
        page = scrape(metrics_url(stack, service))
        found[service] = {
            name: value
            for name, value in page.items()
            if name.startswith(("waybill_rpcs_served_total", "waybill_sql_"))
        }
    return found


async def postgres_commits(database_url: str | None) -> float:
    if database_url is None:
        return 0.0
    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("SELECT pg_stat_clear_snapshot()")
        found = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await connection.close()
    return float(found)


async def measure(stack: Stack, runs: int, concurrency: int) -> dict[str, Any]:
    database_url = stack.env.get("WAYBILL_DATABASE_URL")
    shipped = Settings.model_fields["log_close_grace_seconds"].default
    grace = float(stack.env.get("WAYBILL_LOG_CLOSE_GRACE_SECONDS", shipped))
    async with client(stack.url, concurrency) as http:
        thread_ids = await create_threads(http, runs, concurrency)
        await asyncio.sleep(grace + 1)  # the backstop closes of runs before these
        before, commits_before = counts_of(stack), await postgres_commits(database_url)

        async def post(thread_id: str) -> None:
            body = {"assistant_id": "lead_agent", "input": token_input(10)}
            expect(await http.post(f"/threads/{thread_id}/runs", json=body), "POST run")

        await in_parallel(concurrency, (functools.partial(post, tid) for tid in thread_ids))
        deadline = time.monotonic() + 120
        while (
            scrape(metrics_url(stack, "admission")).get(FINISHED, 0)
            - before["admission"].get(FINISHED, 0)
            < runs
        ):
            if time.monotonic() > deadline:
                raise BenchError("the runs did not finish within 120 s")
            await asyncio.sleep(0.2)
        await asyncio.sleep(grace + 1)  # the backstop closes are part of a run's cost
        after, commits_after = counts_of(stack), await postgres_commits(database_url)
    return per_run(before, after, runs, (commits_after - commits_before) / runs)


def per_run(
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    runs: int,
    postgres_commits: float,
) -> dict[str, Any]:
    calls: dict[str, float] = defaultdict(float)
    statements: dict[str, float] = defaultdict(float)
    commits: dict[str, float] = defaultdict(float)
    for service, page in after.items():
        for name, value in page.items():
            moved = (value - before[service].get(name, 0.0)) / runs
            if not moved:
                continue
            label = name.split('"')[1]
            if name.startswith("waybill_rpcs_served_total"):
                calls[label.removeprefix("/waybill.v1.")] += moved
            elif name.startswith("waybill_sql_statements_total"):
                statements[f"{service}: {label}"] += moved
            elif name.startswith("waybill_sql_commits_total"):
                commits[f"{service}: {label}"] += moved
    found: dict[str, Any] = {
        "runs": runs,
        "calls": largest_first(calls),
        "statements": largest_first(statements),
        "commits": largest_first(commits),
        "calls_total": sum(calls.values()),
        "statements_total": sum(statements.values()),
        "commits_total": sum(commits.values()),
    }
    if postgres_commits:
        found["postgres_commits_total"] = postgres_commits
    return found


def largest_first(counts: dict[str, float]) -> dict[str, float]:
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def table(counts: dict[str, Any]) -> list[str]:
    lines = [
        f"  per run: {counts['calls_total']:.1f} calls served, "
        f"{counts['statements_total']:.1f} SQL statements, {counts['commits_total']:.1f} commits"
        + (
            f" ({counts['postgres_commits_total']:.1f} commits by Postgres's count)"
            if "postgres_commits_total" in counts
            else ""
        )
    ]
    for kind in ("calls", "statements", "commits"):
        parts = ", ".join(f"{name} {value:.2f}" for name, value in counts[kind].items())
        lines.append(f"    {kind}: {parts}")
    return lines
