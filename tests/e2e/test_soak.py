"""The soak: mixed stream / wait / cancel traffic, tool-calling runs among it,
through random gateways of the multi-replica profile, while everything breaks in
turn: a runner SIGKILLed in the middle of a tool, a journal replica SIGKILLed,
Redis restarted (its state lost), Postgres restarted (every connection dropped),
a gateway SIGKILLed under open streams. No service is restarted for the others'
faults: each must recover by itself. `WAYBILL_SOAK_SECONDS` long (60 by default;
`make soak` runs 600).

It runs on a Postgres cluster and a Redis of its own (tests/support/private_servers.py),
the only ones it may restart. The tool-calling runs use tests/fixtures/soak_graphs: each
execution of their tool inserts a row into `soak_tool_effects`.

Then, from the database and every replica's /metrics: no run lost, none stuck
pending or running, exactly one terminal write per run, every stream complete
(each sequence number once, resumed through another gateway when its own died,
and the same as a replay of the log), and how often each tool call's effect
happened.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.helpers import Frame, says, slow, sse
from tests.support.paths import FIXTURES
from tests.support.private_servers import (
    PrivatePostgres,
    PrivateRedis,
    private_postgres,
    private_redis,
)
from tests.support.scale import ScaledStack, join, scaled_stack
from waybill.common.statuses import TERMINAL_RUN_STATUSES

SECONDS = float(os.environ.get("WAYBILL_SOAK_SECONDS", "60"))
WORKERS = int(os.environ.get("WAYBILL_SOAK_WORKERS", "4"))
FAULT_EVERY = (2.0, 5.0)  # seconds between faults, drawn at random
FAULTS = ("runner", "journal", "redis", "postgres", "gateway")
SETTLE_SECONDS = 120.0  # after the traffic stops, every run must end within this
RETRY_SECONDS = 60.0  # a client retries a request refused by a restarting service this long
SOAK_GRAPHS = FIXTURES / "soak_graphs" / "langgraph.json"
EFFECTS_TABLE = (
    "CREATE TABLE IF NOT EXISTS soak_tool_effects (run_id text NOT NULL, "
    "call_id text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)

pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + 600)]


@dataclass
class Tally:
    runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # run -> (thread, op)
    streams: dict[str, list[Frame]] = field(default_factory=dict)  # run -> frames seen live
    problems: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # "op/status"
    faults: Counter[str] = field(default_factory=Counter)
    resumed: int = 0  # streams resumed through another gateway after theirs died
    retries: int = 0  # requests retried (a gateway down, a 503 while a database restarts)
    events: int = 0


@dataclass
class Soak:
    scaled: ScaledStack
    postgres: PrivatePostgres
    redis: PrivateRedis


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Soak]:
    with private_postgres() as postgres, private_redis() as redis_server:
        database = postgres.create_database("soak")
        effects_dsn = postgres.url("soak", driver="postgresql")
        with scaled_stack(
            tmp_path_factory.mktemp("soak"),
            database_url=database,
            redis_url=redis_server.url,
            WAYBILL_GRAPHS=str(SOAK_GRAPHS),
            WAYBILL_SOAK_EFFECTS_DSN=effects_dsn,
            WAYBILL_JOURNAL_POLL_SECONDS="0.1",
            WAYBILL_JOURNAL_REDIS_BLOCK_SECONDS="1",
            WAYBILL_JOURNAL_HEARTBEAT_SECONDS="0.5",
            WAYBILL_JOURNAL_REPLICA_DEAD_SECONDS="3",
            WAYBILL_JOURNAL_REDIS_RETRY_SECONDS="30",
            WAYBILL_MAX_ATTEMPTS="6",
            WAYBILL_STARTUP_TIMEOUT_SECONDS="180",
        ) as scaled:
            with psycopg.connect(effects_dsn, autocommit=True) as conn:
                conn.execute(EFFECTS_TABLE)
            yield Soak(scaled, postgres, redis_server)


# ---- a client that rides out the faults ------------------------------------------------


def facts(soak: Soak, query: str, *args: object) -> list[tuple[object, ...]]:
    """The soak's database read directly, waiting out a Postgres restart."""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            return soak.scaled.sql(query, *args)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


async def request(
    soak: Soak, http: httpx.AsyncClient, tally: Tally, method: str, path: str, **kwargs: Any
) -> httpx.Response:
    """Through a random gateway; retried on another while a gateway is down or a
    service answers 503 (its database restarting). Run creations carry an
    Idempotency-Key, so a retry never starts a second run."""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            reply = await http.request(method, f"{soak.scaled.gateway()}{path}", **kwargs)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        else:
            if reply.status_code not in (502, 503, 504) or time.monotonic() > deadline:
                return reply
        tally.retries += 1
        await asyncio.sleep(0.3)


async def status_of(
    soak: Soak, http: httpx.AsyncClient, tally: Tally, thread: str, run: str
) -> str:
    reply = await request(soak, http, tally, "GET", f"/threads/{thread}/runs/{run}")
    reply.raise_for_status()
    return str(reply.json()["status"])


async def ended(soak: Soak, http: httpx.AsyncClient, tally: Tally, thread: str, run: str) -> str:
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        status = await status_of(soak, http, tally, thread, run)
        if status in TERMINAL_RUN_STATUSES:
            return status
        await asyncio.sleep(0.2)
    return "stuck"


def keyed() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def effects_input(calls: int) -> dict[str, Any]:
    return {"assistant_id": "effects", "input": {"calls": calls, "seconds": 1.0}}


# ---- the traffic -------------------------------------------------------------------------


async def read_stream(reply: httpx.Response, frames: list[Frame]) -> bool:
    """Read frames until the stream ends (True) or its gateway dies (False)."""
    try:
        async for frame in sse(reply):
            frames.append(frame)
    except httpx.TransportError:
        return False
    return True


async def one_stream(soak: Soak, http: httpx.AsyncClient, tally: Tally, thread: str) -> None:
    body: dict[str, Any] = random.choice(
        [
            {"assistant_id": "lead_agent", "input": says("/tokens 30")},
            {"assistant_id": "lead_agent", "input": slow(1)},
            effects_input(2),
        ]
    )
    body["stream_mode"] = ["values", "messages", "updates"]
    headers = keyed()
    frames: list[Frame] = []
    run = ""
    deadline = time.monotonic() + SETTLE_SECONDS
    finished = False
    while not finished and time.monotonic() < deadline:
        try:
            if not run:  # (again with the same key: the same run, its stream from the start)
                path = f"/threads/{thread}/runs/stream"
                async with http.stream(
                    "POST", f"{soak.scaled.gateway()}{path}", json=body, headers=headers
                ) as reply:
                    if reply.status_code in (502, 503, 504):
                        tally.retries += 1
                        await asyncio.sleep(0.3)
                        continue
                    reply.raise_for_status()
                    run = reply.headers["Content-Location"].rsplit("/", 1)[-1]
                    tally.runs[run] = (thread, "stream")
                    finished = await read_stream(reply, frames)
            else:  # its gateway died mid-stream: resume after the last frame, elsewhere
                tally.resumed += 1
                last = str(frames[-1].seq) if frames else "-1"
                path = f"/threads/{thread}/runs/{run}/stream"
                async with http.stream(
                    "GET", f"{soak.scaled.gateway()}{path}", headers={"Last-Event-ID": last}
                ) as reply:
                    if reply.status_code in (502, 503, 504):
                        tally.retries += 1
                        await asyncio.sleep(0.3)
                        continue
                    reply.raise_for_status()
                    finished = await read_stream(reply, frames)
        except httpx.TransportError:
            tally.retries += 1
            await asyncio.sleep(0.3)
    if not finished:
        rows = facts(soak, "SELECT status, attempt FROM runs WHERE run_id = %s", run)
        tally.problems.append(
            f"stream of {run or thread} not ended after {SETTLE_SECONDS:.0f}s: "
            f"{len(frames)} frames, run {rows}"
        )
        return
    tally.streams[run] = frames
    tally.events += len(frames)
    if [f.seq for f in frames] != list(range(len(frames))):
        tally.problems.append(f"stream of {run}: seqs {[f.seq for f in frames]}")
    tally.outcomes[f"stream/{await ended(soak, http, tally, thread, run)}"] += 1


async def one_wait(soak: Soak, http: httpx.AsyncClient, tally: Tally, thread: str) -> None:
    body = random.choice(
        [
            {"assistant_id": "lead_agent", "input": says("hi")},
            {"assistant_id": "lead_agent", "input": slow(1)},
            effects_input(1),
        ]
    )
    path = f"/threads/{thread}/runs/wait"
    reply = await request(soak, http, tally, "POST", path, json=body, headers=keyed())
    if reply.status_code != 200:
        tally.problems.append(f"wait on {thread}: {reply.status_code} {reply.text[:200]}")
        return
    run = reply.headers["Content-Location"].rsplit("/", 1)[-1]
    tally.runs[run] = (thread, "wait")
    tally.outcomes[f"wait/{await ended(soak, http, tally, thread, run)}"] += 1


async def one_cancel(soak: Soak, http: httpx.AsyncClient, tally: Tally, thread: str) -> None:
    body = random.choice([{"assistant_id": "lead_agent", "input": slow(5)}, effects_input(3)])
    path = f"/threads/{thread}/runs"
    reply = await request(soak, http, tally, "POST", path, json=body, headers=keyed())
    reply.raise_for_status()
    run = str(reply.json()["run_id"])
    tally.runs[run] = (thread, "cancel")
    await asyncio.sleep(random.uniform(0.0, 2.5))
    cancel = await request(soak, http, tally, "POST", f"/threads/{thread}/runs/{run}/cancel")
    if cancel.status_code not in (202, 404):  # 404: it had already ended
        tally.problems.append(f"cancel of {run}: {cancel.status_code} {cancel.text[:200]}")
    tally.outcomes[f"cancel/{await ended(soak, http, tally, thread, run)}"] += 1


async def traffic(soak: Soak, tally: Tally, deadline: float) -> None:
    operations = [one_stream, one_stream, one_wait, one_cancel]
    async with httpx.AsyncClient(timeout=120) as http:
        while time.monotonic() < deadline:
            reply = await request(soak, http, tally, "POST", "/threads", json={})
            reply.raise_for_status()
            operation = random.choice(operations)
            thread = str(reply.json()["thread_id"])
            try:
                await operation(soak, http, tally, thread)
            except httpx.HTTPError as error:
                runs = facts(
                    soak,
                    "SELECT run_id::text, status, attempt FROM runs WHERE thread_id::text = %s",
                    thread,
                )
                tally.problems.append(
                    f"{operation.__name__} on thread {thread} (runs {runs}): "
                    f"{type(error).__name__}: {error}"
                )


# ---- the faults ------------------------------------------------------------------------------


def tool_under_way(soak: Soak, seconds: float = 5.0) -> bool:
    """Wait up to `seconds` for a tool between its effect and its result."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if effect_under_way(soak):
            return True
        time.sleep(0.05)
    return False


def effect_under_way(soak: Soak) -> bool:
    """A tool's effect happened within the last half second: its tool is still
    running (it takes as long again before its result)."""
    try:
        rows = soak.scaled.sql(
            "SELECT count(*) FROM soak_tool_effects WHERE at > now() - interval '0.4 seconds'"
        )
    except psycopg.OperationalError:  # Postgres restarting
        return False
    return bool(rows[0][0])


async def kill_and_restart(soak: Soak, name: str, down: tuple[float, float]) -> None:
    await asyncio.to_thread(soak.scaled.kill, name)
    await asyncio.sleep(random.uniform(*down))
    await asyncio.to_thread(soak.scaled.restart, name)


async def fault(soak: Soak, tally: Tally, kind: str) -> None:
    scaled = soak.scaled
    if kind == "runner":
        if await asyncio.to_thread(tool_under_way, soak):
            tally.faults["runner killed mid-tool"] += 1
        await kill_and_restart(soak, random.choice(scaled.runners()), (0.5, 2.0))
    elif kind == "journal":
        await kill_and_restart(soak, random.choice(scaled.of("journal")), (0.5, 2.0))
    elif kind == "gateway":
        await kill_and_restart(soak, random.choice(scaled.of("gateway")), (0.5, 1.5))
    elif kind == "redis":
        await asyncio.to_thread(soak.redis.kill)
        await asyncio.sleep(random.uniform(0.5, 1.5))
        await asyncio.to_thread(soak.redis.start)
    elif kind == "postgres":
        await asyncio.to_thread(soak.postgres.restart)
    tally.faults[kind] += 1


async def chaos(soak: Soak, tally: Tally, deadline: float) -> None:
    """Every fault in turn (shuffled each round), one every few seconds, until the
    deadline and each fault happened at least once (a slow machine lengthens a round)."""
    while True:
        kinds = list(FAULTS)
        random.shuffle(kinds)
        for kind in kinds:
            await asyncio.sleep(random.uniform(*FAULT_EVERY))
            if time.monotonic() > deadline and all(tally.faults[k] for k in FAULTS):
                return
            await fault(soak, tally, kind)


# ---- the soak --------------------------------------------------------------------------------


def stored_numbers(soak: Soak, run: str) -> str:
    """How the journal stored the run: rows, numbers, numbers stored with two events."""
    from waybill.services.journal.store import unpack

    rows = facts(soak, "SELECT frames FROM run_event_batches WHERE run_id = %s", run)
    events: dict[int, set[str]] = {}
    for (frames,) in rows:
        for event in unpack(run, bytes(frames)):  # type: ignore[arg-type]
            events.setdefault(event.seq, set()).add(event.event)
    forked = sorted(seq for seq, names in events.items() if len(names) > 1)
    top = max(events, default=-1)
    return f"{len(rows)} rows, numbers 0..{top} ({len(events)}), forked {forked}"


@dataclass
class Effects:
    calls: int  # tool calls whose effect happened at least once
    executions: int  # effects in all
    twice: dict[tuple[str, str], int]  # calls whose effect happened more than once


def count_effects(soak: Soak) -> Effects:
    rows = facts(
        soak, "SELECT run_id, call_id, count(*) FROM soak_tool_effects GROUP BY run_id, call_id"
    )
    counts = {(str(run), str(call)): int(n) for run, call, n in rows}  # type: ignore[call-overload]
    return Effects(
        calls=len(counts),
        executions=sum(counts.values()),
        twice={key: n for key, n in counts.items() if n > 1},
    )


async def test_soak(soak: Soak) -> None:
    random.seed(8)
    scaled = soak.scaled
    tally = Tally()
    started = time.monotonic()
    deadline = started + SECONDS
    await asyncio.gather(
        chaos(soak, tally, deadline), *(traffic(soak, tally, deadline) for _ in range(WORKERS))
    )
    elapsed = time.monotonic() - started

    active = "SELECT count(*) FROM runs WHERE status IN ('pending', 'running')"
    settle = time.monotonic() + SETTLE_SECONDS
    while scaled.sql(active)[0][0] and time.monotonic() < settle:  # noqa: ASYNC110 - SQL is polled
        await asyncio.sleep(0.5)
    rows = dict(scaled.sql("SELECT run_id::text, status FROM runs"))
    lost = [run for run in tally.runs if rows.get(run) not in TERMINAL_RUN_STATUSES]
    stuck = scaled.sql(active)[0][0]
    terminal_writes = sum(
        value
        for page in scaled.metrics("admission")
        for name, value in page.items()
        if name.startswith("waybill_runs_finished_total")
    )
    for run, frames in tally.streams.items():
        replayed = await join(scaled, tally.runs[run][0], run, "-1")
        live, again = [(f.seq, f.event) for f in frames], [(f.seq, f.event) for f in replayed]
        if again != live:
            pairs = enumerate(zip(live, again, strict=False))
            at = next((i for i, (one, other) in pairs if one != other), None)
            tally.problems.append(
                f"replay of {run} differs from its live stream: {len(live)} live, "
                f"{len(again)} replayed, first difference at {at}: "
                f"{live[at : at + 3] if at is not None else live[len(again) :][:3]} live, "
                f"{again[at : at + 3] if at is not None else again[len(live) :][:3]} replayed; "
                f"stored {stored_numbers(soak, run)}"
            )
    effects = count_effects(soak)
    takeovers = scaled.total("admission", "waybill_lease_takeovers_total")
    stale = scaled.total("admission", 'waybill_stale_epoch_writes_refused_total{write="finish"}')
    # Logs whose runner was killed between its run's end and its close: admission closed them.
    orphaned = scaled.total("admission", 'waybill_log_closes_total{found="open"}')
    print(
        f"\nsoak: {elapsed:.0f}s, {WORKERS} clients, {len(tally.runs)} runs "
        f"({len(rows)} in the database), faults {dict(sorted(tally.faults.items()))}, "
        f"{takeovers:.0f} takeovers, {stale:.0f} stale finishes refused, "
        f"{orphaned:.0f} logs closed for a killed runner, {tally.retries} requests retried, "
        f"{len(tally.streams)} streams ({tally.resumed} resumed through another gateway) / "
        f"{tally.events} events checked, terminal writes {terminal_writes:.0f}\n"
        f"soak outcomes: {dict(sorted(tally.outcomes.items()))}\n"
        f"soak tool effects: {effects.calls} calls, {effects.executions} executions, "
        f"{len(effects.twice)} executed more than once\n"
        f"soak: lost {len(lost)}, stuck {stuck}, problems {len(tally.problems)}"
    )
    for problem in tally.problems[:10]:
        print(f"soak problem: {problem}")
    assert tally.runs, "the soak ran nothing"
    assert all(tally.faults[kind] for kind in FAULTS), tally.faults
    assert not lost, lost
    assert stuck == 0
    assert terminal_writes == len(rows), "a run got more (or less) than one terminal write"
    assert not tally.problems, tally.problems
    assert "stream/stuck" not in tally.outcomes
    assert effects.calls > 0, "no tool-calling run got as far as its tool"
    # A call started and not finished when its runner died is not run again (its
    # model is told it may or may not have happened): no effect twice.
    assert not effects.twice, f"tool effects executed more than once: {effects.twice}"
