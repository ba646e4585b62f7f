"""The soak: mixed stream / wait / cancel traffic through random gateways of the
multi-replica profile while runners are SIGKILLed and restarted, for
`WAYBILL_SOAK_SECONDS` (60 by default; `make soak` runs 600).

Then, from the database and every replica's /metrics: no run lost, none stuck
pending or running, exactly one terminal write per run, and every stream
complete (each sequence number once, and the same as a replay of the log).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.helpers import Frame, says, slow, sse
from tests.scale import ScaledStack, join, scaled_stack
from waybill.common.statuses import TERMINAL_RUN_STATUSES

SECONDS = float(os.environ.get("WAYBILL_SOAK_SECONDS", "60"))
WORKERS = int(os.environ.get("WAYBILL_SOAK_WORKERS", "4"))
KILL_EVERY = (6.0, 12.0)  # seconds between runner kills, drawn at random
SETTLE_SECONDS = 90.0  # after the traffic stops, every run must end within this

pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + 300)]


@dataclass
class Tally:
    runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # run -> (thread, op)
    streams: dict[str, list[Frame]] = field(default_factory=dict)  # run -> frames seen live
    problems: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # "op/status"
    kills: int = 0
    events: int = 0


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaledStack]:
    with scaled_stack(tmp_path_factory.mktemp("soak")) as stack:
        yield stack


async def status_of(scaled: ScaledStack, http: httpx.AsyncClient, thread: str, run: str) -> str:
    reply = await http.get(f"{scaled.gateway()}/threads/{thread}/runs/{run}")
    reply.raise_for_status()
    return str(reply.json()["status"])


async def ended(scaled: ScaledStack, http: httpx.AsyncClient, thread: str, run: str) -> str:
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        status = await status_of(scaled, http, thread, run)
        if status in TERMINAL_RUN_STATUSES:
            return status
        await asyncio.sleep(0.2)
    return "stuck"


async def one_stream(
    scaled: ScaledStack, http: httpx.AsyncClient, tally: Tally, thread: str
) -> None:
    text = random.choice(["/tokens 30", '/tool wait {"seconds": 1}', "/tokens 5"])
    body = {
        "assistant_id": "lead_agent",
        "input": says(text),
        "stream_mode": ["values", "messages"],
    }
    async with http.stream(
        "POST", f"{scaled.gateway()}/threads/{thread}/runs/stream", json=body
    ) as reply:
        reply.raise_for_status()
        run = reply.headers["Content-Location"].rsplit("/", 1)[-1]
        tally.runs[run] = (thread, "stream")
        frames: list[Frame] = []
        try:
            async with asyncio.timeout(SETTLE_SECONDS):  # heartbeats keep a stuck one alive
                async for frame in sse(reply):
                    frames.append(frame)
        except TimeoutError:
            rows = scaled.sql("SELECT status, attempt FROM runs WHERE run_id = %s", run)
            tally.problems.append(
                f"stream of {run} not ended after {SETTLE_SECONDS:.0f}s: "
                f"{len(frames)} frames, run {rows}"
            )
            return
    tally.streams[run] = frames
    tally.events += len(frames)
    if [f.seq for f in frames] != list(range(len(frames))):
        tally.problems.append(f"stream of {run}: seqs {[f.seq for f in frames]}")
    tally.outcomes[f"stream/{await ended(scaled, http, thread, run)}"] += 1


async def one_wait(scaled: ScaledStack, http: httpx.AsyncClient, tally: Tally, thread: str) -> None:
    body = {"assistant_id": "lead_agent", "input": random.choice([says("hi"), slow(1)])}
    reply = await http.post(f"{scaled.gateway()}/threads/{thread}/runs/wait", json=body)
    if reply.status_code != 200:
        tally.problems.append(f"wait on {thread}: {reply.status_code} {reply.text[:200]}")
        return
    run = reply.headers["Content-Location"].rsplit("/", 1)[-1]
    tally.runs[run] = (thread, "wait")
    tally.outcomes[f"wait/{await ended(scaled, http, thread, run)}"] += 1


async def one_cancel(
    scaled: ScaledStack, http: httpx.AsyncClient, tally: Tally, thread: str
) -> None:
    body = {"assistant_id": "lead_agent", "input": slow(5)}
    reply = await http.post(f"{scaled.gateway()}/threads/{thread}/runs", json=body)
    reply.raise_for_status()
    run = str(reply.json()["run_id"])
    tally.runs[run] = (thread, "cancel")
    await asyncio.sleep(random.uniform(0.0, 1.5))
    cancel = await http.post(f"{scaled.gateway()}/threads/{thread}/runs/{run}/cancel")
    if cancel.status_code not in (202, 404):  # 404: it had already ended
        tally.problems.append(f"cancel of {run}: {cancel.status_code} {cancel.text[:200]}")
    tally.outcomes[f"cancel/{await ended(scaled, http, thread, run)}"] += 1


async def traffic(scaled: ScaledStack, tally: Tally, deadline: float) -> None:
    operations = [one_stream, one_stream, one_wait, one_cancel]
    async with httpx.AsyncClient(timeout=120) as http:
        while time.monotonic() < deadline:
            reply = await http.post(f"{scaled.gateway()}/threads", json={})
            reply.raise_for_status()
            operation = random.choice(operations)
            thread = str(reply.json()["thread_id"])
            try:
                await operation(scaled, http, tally, thread)
            except httpx.HTTPError as error:
                runs = scaled.sql(
                    "SELECT run_id::text, status, attempt FROM runs WHERE thread_id::text = %s",
                    thread,
                )
                tally.problems.append(
                    f"{operation.__name__} on thread {thread} (runs {runs}): "
                    f"{type(error).__name__}: {error}"
                )


async def killer(scaled: ScaledStack, tally: Tally, deadline: float) -> None:
    """SIGKILL a random runner now and then, and start it again a moment later."""
    while True:
        await asyncio.sleep(random.uniform(*KILL_EVERY))
        if time.monotonic() > deadline:
            return
        victim = random.choice(scaled.runners())
        await asyncio.to_thread(scaled.kill, victim)
        tally.kills += 1
        await asyncio.sleep(random.uniform(0.5, 2.0))
        await asyncio.to_thread(scaled.restart, victim)


async def test_soak(scaled: ScaledStack) -> None:
    random.seed(8)
    tally = Tally()
    started = time.monotonic()
    deadline = started + SECONDS
    await asyncio.gather(
        killer(scaled, tally, deadline), *(traffic(scaled, tally, deadline) for _ in range(WORKERS))
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
        if [(f.seq, f.event) for f in replayed] != [(f.seq, f.event) for f in frames]:
            tally.problems.append(f"replay of {run} differs from its live stream")
    takeovers = scaled.total("admission", "waybill_lease_takeovers_total")
    stale = scaled.total("admission", 'waybill_stale_epoch_writes_refused_total{write="finish"}')
    # Logs whose runner was killed between its run's end and its close: admission closed them.
    orphaned = scaled.total("admission", 'waybill_log_closes_total{found="open"}')
    print(
        f"\nsoak: {elapsed:.0f}s, {WORKERS} clients, {len(tally.runs)} runs "
        f"({len(rows)} in the database), {tally.kills} runner kills, {takeovers:.0f} takeovers, "
        f"{stale:.0f} stale finishes refused, {orphaned:.0f} logs closed for a killed runner, "
        f"{len(tally.streams)} streams / {tally.events} events "
        f"checked, terminal writes {terminal_writes:.0f}\n"
        f"soak outcomes: {dict(sorted(tally.outcomes.items()))}\n"
        f"soak: lost {len(lost)}, stuck {stuck}, problems {len(tally.problems)}"
    )
    for problem in tally.problems[:10]:
        print(f"soak problem: {problem}")
    assert tally.runs, "the soak ran nothing"
    assert tally.kills >= 1 or KILL_EVERY[1] > SECONDS
    assert not lost, lost
    assert stuck == 0
    assert terminal_writes == len(rows), "a run got more (or less) than one terminal write"
    assert not tally.problems, tally.problems
    assert "stream/stuck" not in tally.outcomes
