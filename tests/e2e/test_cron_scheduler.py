"""The scheduler, with real processes: two admission replicas on one Postgres,
auth on, and the scheduler's clock a file the test moves forward, so that a
simulated hour passes in seconds.

- a schedule due every minute fires exactly once per due minute over an hour;
- after downtime, missed firings are skipped or caught up as the policy says;
- each firing runs as the cron's owner, through StartRun's rules (a busy thread
  and `reject` skip it; `enqueue` queues it), and is recorded with its run.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.helpers import says, start_slow_tool
from tests.support.stacks import (
    free_port,
    fresh_postgres_database,
    running_stack,
    stack_env,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving

pytestmark = pytest.mark.timeout(240)

START = datetime(2030, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GRACE_SECONDS = 20  # a firing found later than this after its due time counts as missed
KEYS = {"alice": "alice-cron-key", "bob": "bob-cron-key"}
SCHEDULER_ONLY_KEY = "crons-but-no-runs-key"  # crons:write without runs:create
ADMIN_KEY = "admin-cron-key"


def set_clock(clock_file: Path, moment: datetime) -> None:
    """Written whole, then renamed: a replica never reads half a time."""
    part = clock_file.with_suffix(".part")
    part.write_text(moment.isoformat())
    part.replace(clock_file)


@dataclass
class Firing:
    due_at: datetime
    outcome: str
    run_id: str | None
    thread_id: str | None
    detail: str
    thread_cleanup: str | None


@dataclass
class ScheduledStack:
    stack: Stack
    clock_file: Path
    database_url: str  # psycopg form

    def now(self) -> datetime:
        return datetime.fromisoformat(self.clock_file.read_text())

    def set_clock(self, moment: datetime) -> None:
        set_clock(self.clock_file, moment)

    def next_minute(self) -> datetime:
        """Move the clock to the next whole minute (where a new test begins)."""
        now = self.now()
        aligned = now.replace(second=0, microsecond=0) + MINUTE
        self.set_clock(aligned)
        return aligned

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url) as conn:
            return list(conn.execute(sql, args).fetchall())

    def firings(self, cron_id: str) -> list[Firing]:
        rows = self.query(
            "SELECT due_at, outcome, run_id, thread_id, detail, thread_cleanup "
            "FROM cron_firings WHERE cron_id = %s ORDER BY due_at",
            cron_id,
        )
        return [Firing(*row) for row in rows]

    def wait_for_firings(self, cron_id: str, count: int) -> list[Firing]:
        wait_until(
            lambda: (
                len(self.firings(cron_id)) >= count
                and all(f.outcome != "claimed" for f in self.firings(cron_id))
            ),
            f"{count} recorded firing(s) of cron {cron_id}",
        )
        return self.firings(cron_id)

    def runs_of(self, cron_id: str) -> list[tuple[str, str, str, str]]:
        """(run_id, thread_id, owner_id, status) of every run the cron started."""
        return [
            (str(r[0]), str(r[1]), str(r[2]), str(r[3]))
            for r in self.query(
                "SELECT run_id, thread_id, owner_id, status FROM runs "
                "WHERE metadata->>'cron_id' = %s",
                cron_id,
            )
        ]

    def stop_admissions(self) -> None:
        for name in ("admission", "admission-2"):
            process = self.stack.processes[name]
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)

    def start_admissions(self, **env: str) -> None:
        """Both replicas again (the second on a new port), with `env` on top."""
        self.stack.start_one("admission", None, env)
        first = self.stack.address_of("admission")
        second = f"127.0.0.1:{free_port()}"
        self.stack.start_one(
            "admission-2",
            "waybill.services.admission.server",
            {**env, "WAYBILL_ADMISSION_ADDR": second},
        )
        for address in (first, second):
            wait_until(lambda a=address: grpc_serving(a), f"admission at {address} serving")


def auth_config(path: Path) -> Path:
    principals = [
        {"user_id": user, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
        for user, key in KEYS.items()
    ]
    principals.append(
        {
            "user_id": "carol",
            "scopes": ["crons:write", "runs:read", "threads:read"],
            "key_sha256": hashlib.sha256(SCHEDULER_ONLY_KEY.encode()).hexdigest(),
        }
    )
    path.write_text(yaml.safe_dump({"auth": {"principals": principals}}))
    return path


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScheduledStack]:
    data_dir = tmp_path_factory.mktemp("cron-stack")
    clock_file = data_dir / "clock"
    clock_file.write_text(START.isoformat())
    with fresh_postgres_database() as url:
        env = stack_env(
            data_dir,
            url,
            WAYBILL_CONFIG=str(auth_config(data_dir / "waybill.yaml")),
            WAYBILL_API_KEY=ADMIN_KEY,
            WAYBILL_CRON_CLOCK_FILE=str(clock_file),
            WAYBILL_CRON_MAX_SLEEP_SECONDS="0.1",
            WAYBILL_CRON_MISFIRE_GRACE_SECONDS=str(GRACE_SECONDS),
        )
        with running_stack(env, data_dir) as stack:
            scheduled = ScheduledStack(
                stack, clock_file, url.replace("postgresql+asyncpg://", "postgresql://")
            )
            second = f"127.0.0.1:{free_port()}"
            stack.start_one(
                "admission-2",
                "waybill.services.admission.server",
                {"WAYBILL_ADMISSION_ADDR": second},
            )
            wait_until(lambda: grpc_serving(second), "admission-2 serving")
            yield scheduled


@pytest.fixture
async def alice(scheduled: ScheduledStack) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=scheduled.stack.url, api_key=KEYS["alice"], timeout=30)
    yield client
    await client.aclose()


@pytest.fixture
async def bob(scheduled: ScheduledStack) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=scheduled.stack.url, api_key=KEYS["bob"], timeout=30)
    yield client
    await client.aclose()


def due_times(start: datetime, minutes: range) -> list[datetime]:
    return [start + minute * MINUTE for minute in minutes]


async def test_every_minute_for_a_simulated_hour_fires_once_per_minute_on_two_replicas(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start = scheduled.next_minute()
    cron = await alice.crons.create(
        "lead_agent", schedule="* * * * *", input=says("tick"), on_run_completed="keep"
    )
    assert datetime.fromisoformat(cron["next_run_date"]) == start + MINUTE
    for minute in range(1, 61):
        scheduled.set_clock(start + minute * MINUTE)
        scheduled.wait_for_firings(cron["cron_id"], minute)
    # Both replicas keep waking at the last due time: still one firing each.
    await asyncio.sleep(1.0)
    firings = scheduled.firings(cron["cron_id"])
    assert [f.due_at for f in firings] == due_times(start, range(1, 61))
    assert {f.outcome for f in firings} == {"started"}
    runs = scheduled.runs_of(cron["cron_id"])
    assert len(runs) == 60
    assert {run_id for run_id, *_ in runs} == {f.run_id for f in firings}
    assert len({thread_id for _, thread_id, *_ in runs}) == 60  # a fresh thread each
    assert {owner for _, _, owner, _ in runs} == {"alice"}  # acting as the cron's owner
    # Each run names the due minute that started it (test_crons_api.py proves that on
    # the real clock, embedded).
    due_of_run = scheduled.query(
        "SELECT run_id, metadata->>'cron_due_at' FROM runs WHERE metadata->>'cron_id' = %s",
        cron["cron_id"],
    )
    assert {str(run_id): due for run_id, due in due_of_run} == {
        str(f.run_id): f.due_at.astimezone(UTC).isoformat() for f in firings
    }
    # Both replicas raced for every minute, and each won some of them.
    log_dir = Path(str(scheduled.stack.log_dir))
    wins = [
        (log_dir / f"{name}.log").read_text().count(f"cron {cron['cron_id']}: fired")
        for name in ("admission", "admission-2")
    ]
    assert sum(wins) == 60 and min(wins) > 0, wins
    wait_until(
        lambda: {s for *_, s in scheduled.runs_of(cron["cron_id"])} == {"success"},
        "every fired run to succeed",
        seconds=120,
    )
    await alice.crons.delete(cron["cron_id"])


async def fired_once_then_down_ten_minutes(
    scheduled: ScheduledStack, alice: LangGraphClient, missed_policy: str
) -> tuple[datetime, dict[str, Any]]:
    """A minutely cron fires once; then ten due minutes pass while no admission runs
    (the newest 30 s late, past the grace), and the admissions come back with
    `missed_policy`. Returns the start minute and the cron."""
    start = scheduled.next_minute()
    cron = await alice.crons.create("lead_agent", schedule="* * * * *", on_run_completed="keep")
    scheduled.set_clock(start + MINUTE)
    scheduled.wait_for_firings(cron["cron_id"], 1)
    scheduled.stop_admissions()
    scheduled.set_clock(start + 11 * MINUTE + timedelta(seconds=30))
    scheduled.start_admissions(WAYBILL_CRON_MISSED_FIRINGS=missed_policy)
    return start, dict(cron)


async def test_after_downtime_missed_firings_are_skipped(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start, cron = await fired_once_then_down_ten_minutes(scheduled, alice, "skip")
    resumes_at = (start + 12 * MINUTE).isoformat()
    wait_until(
        lambda: (
            scheduled.query("SELECT next_run_at FROM crons WHERE cron_id = %s", cron["cron_id"])[0][
                0
            ].isoformat()
            == resumes_at
        ),
        "the scheduler to skip to the next due minute",
    )
    assert [f.due_at for f in scheduled.firings(cron["cron_id"])] == [start + MINUTE]

    scheduled.set_clock(start + 12 * MINUTE)
    firings = scheduled.wait_for_firings(cron["cron_id"], 2)
    assert [f.due_at for f in firings] == [start + MINUTE, start + 12 * MINUTE]
    assert len(scheduled.runs_of(cron["cron_id"])) == 2
    await alice.crons.delete(cron["cron_id"])


async def test_after_downtime_missed_firings_are_caught_up(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start, cron = await fired_once_then_down_ten_minutes(scheduled, alice, "catch_up")
    firings = scheduled.wait_for_firings(cron["cron_id"], 11)
    await asyncio.sleep(0.5)  # and no more than that
    firings = scheduled.firings(cron["cron_id"])
    assert [f.due_at for f in firings] == due_times(start, range(1, 12))
    assert {f.outcome for f in firings} == {"started"}
    assert len(scheduled.runs_of(cron["cron_id"])) == 11
    await alice.crons.delete(cron["cron_id"])
    scheduled.stop_admissions()  # back to the default policy for the tests after
    scheduled.start_admissions()


async def test_a_busy_thread_skips_a_reject_firing_and_queues_an_enqueue_one(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start = scheduled.next_minute()
    thread = await alice.threads.create()
    tid = thread["thread_id"]
    skipping = await alice.crons.create_for_thread(
        tid, "lead_agent", schedule="* * * * *", input=says("hi"), multitask_strategy="reject"
    )
    queueing = await alice.crons.create_for_thread(
        tid, "lead_agent", schedule="* * * * *", input=says("hi"), multitask_strategy="enqueue"
    )
    slow = await start_slow_tool(alice, tid, seconds=60)
    scheduled.set_clock(start + MINUTE)
    [skipped] = scheduled.wait_for_firings(skipping["cron_id"], 1)
    [queued] = scheduled.wait_for_firings(queueing["cron_id"], 1)
    assert skipped.outcome == "skipped" and "already has an active run" in skipped.detail
    assert skipped.run_id is None
    assert queued.outcome == "started" and queued.thread_id == tid
    run = await alice.runs.get(tid, str(queued.run_id))
    assert run["status"] == "pending"  # waiting behind the slow run
    await alice.runs.cancel(tid, slow["run_id"])
    for cron in (skipping, queueing):
        await alice.crons.delete(cron["cron_id"])
    await alice.runs.join(tid, str(queued.run_id))


async def test_a_fresh_thread_is_deleted_after_its_run_when_asked(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start = scheduled.next_minute()
    cron = await alice.crons.create("lead_agent", schedule="* * * * *", input=says("once"))
    assert cron["on_run_completed"] == "delete"
    scheduled.set_clock(start + MINUTE)
    [firing] = scheduled.wait_for_firings(cron["cron_id"], 1)
    assert firing.outcome == "started"
    wait_until(
        lambda: scheduled.firings(cron["cron_id"])[0].thread_cleanup == "done",
        "the fired run's thread to be deleted",
    )
    with pytest.raises(NotFoundError):
        await alice.threads.get(str(firing.thread_id))
    await alice.crons.delete(cron["cron_id"])


async def test_a_cron_belongs_to_its_creator(
    scheduled: ScheduledStack, alice: LangGraphClient, bob: LangGraphClient
) -> None:
    cron = await alice.crons.create("lead_agent", schedule="0 9 1 1 *", metadata={"who": "a"})
    assert cron["user_id"] == "alice"
    with pytest.raises(NotFoundError):
        await bob.http.get(f"/runs/crons/{cron['cron_id']}")
    with pytest.raises(NotFoundError):
        await bob.crons.update(cron["cron_id"], enabled=False)
    with pytest.raises(NotFoundError):
        await bob.crons.delete(cron["cron_id"])
    assert await bob.crons.count(metadata={"who": "a"}) == 0
    assert await alice.crons.count(metadata={"who": "a"}) == 1
    admin = get_client(url=scheduled.stack.url, api_key=ADMIN_KEY)
    assert (await admin.http.get(f"/runs/crons/{cron['cron_id']}"))["user_id"] == "alice"
    await admin.aclose()
    # Bob cannot hang a cron on Alice's thread either.
    thread = await alice.threads.create()
    with pytest.raises(NotFoundError):
        await bob.crons.create_for_thread(thread["thread_id"], "lead_agent", schedule="* * * * *")
    await alice.crons.delete(cron["cron_id"])


async def test_a_fresh_thread_cron_with_reject_skips_while_its_last_run_is_active(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start = scheduled.next_minute()
    cron = await alice.crons.create(
        "lead_agent",
        schedule="* * * * *",
        input=says('/tool wait {"seconds": 60}'),
        multitask_strategy="reject",
        on_run_completed="keep",
    )
    scheduled.set_clock(start + MINUTE)
    [first] = scheduled.wait_for_firings(cron["cron_id"], 1)
    assert first.outcome == "started"
    scheduled.set_clock(start + 2 * MINUTE)
    second = scheduled.wait_for_firings(cron["cron_id"], 2)[1]
    assert second.outcome == "skipped" and str(first.run_id) in second.detail
    await alice.crons.delete(cron["cron_id"])
    await alice.runs.cancel(str(first.thread_id), str(first.run_id), wait=True)


async def test_a_cron_stops_at_its_end_time(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    start = scheduled.next_minute()
    cron = await alice.crons.create(
        "lead_agent",
        schedule="* * * * *",
        end_time=start + 2 * MINUTE + timedelta(seconds=30),
        on_run_completed="keep",
    )
    for minute in (1, 2):
        scheduled.set_clock(start + minute * MINUTE)
        scheduled.wait_for_firings(cron["cron_id"], minute)
    assert (await alice.http.get(f"/runs/crons/{cron['cron_id']}"))["next_run_date"] is None
    scheduled.set_clock(start + 4 * MINUTE)
    await asyncio.sleep(0.5)  # the replicas wake every 0.1 s: they had their chance
    firings = scheduled.firings(cron["cron_id"])
    assert [f.due_at for f in firings] == due_times(start, range(1, 3))
    await alice.crons.delete(cron["cron_id"])


async def test_a_firing_abandoned_mid_way_is_fired_again_once(
    scheduled: ScheduledStack, alice: LangGraphClient
) -> None:
    """A replica that died between claiming a firing and starting its run leaves
    a `claimed` record: the replicas fire it again, and its key makes one run."""
    start = scheduled.next_minute()
    cron = await alice.crons.create(
        "lead_agent", schedule="0 9 1 1 *", input=says("late"), on_run_completed="keep"
    )
    due = start - 5 * MINUTE
    with psycopg.connect(scheduled.database_url) as conn:
        conn.execute(
            "INSERT INTO cron_firings (cron_id, due_at, fired_at, outcome, detail) "
            "VALUES (%s, %s, now() - interval '1 hour', 'claimed', '')",
            (cron["cron_id"], due),
        )
    [firing] = scheduled.wait_for_firings(cron["cron_id"], 1)
    assert firing.due_at == due and firing.outcome == "started"
    await asyncio.sleep(0.5)  # both replicas had several ticks to fire it again
    runs = scheduled.runs_of(cron["cron_id"])
    assert [run_id for run_id, *_ in runs] == [firing.run_id]
    assert scheduled.firings(cron["cron_id"])[0].run_id == firing.run_id
    await alice.crons.delete(cron["cron_id"])


async def test_a_cron_cannot_start_runs_its_creator_may_not(scheduled: ScheduledStack) -> None:
    carol = get_client(url=scheduled.stack.url, api_key=SCHEDULER_ONLY_KEY)
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await carol.crons.create("lead_agent", schedule="* * * * *", metadata={"who": "c"})
    assert refused.value.response.status_code == 403
    assert "runs:create" in refused.value.response.json()["detail"]
    assert await carol.crons.count(metadata={"who": "c"}) == 0
    await carol.aclose()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    """The embedded default (SQLite, one admission) with the file clock."""
    data_dir = tmp_path_factory.mktemp("cron-embedded")
    clock_file = data_dir / "clock"
    clock_file.write_text(START.isoformat())
    env = stack_env(
        data_dir, WAYBILL_CRON_CLOCK_FILE=str(clock_file), WAYBILL_CRON_MAX_SLEEP_SECONDS="0.1"
    )
    with running_stack(env, data_dir) as stack:
        yield stack, clock_file


async def test_the_embedded_default_fires_on_sqlite(embedded: tuple[Stack, Path]) -> None:
    stack, clock_file = embedded
    client = get_client(url=stack.url)
    thread = await client.threads.create()
    cron = await client.crons.create_for_thread(
        thread["thread_id"], "lead_agent", schedule="*/2 * * * *", input=says("ping")
    )
    database = Path(stack.env["WAYBILL_DATA_DIR"]) / "admission.db"

    def fired() -> list[tuple[str, str]]:
        with sqlite3.connect(database) as conn:
            return conn.execute(
                "SELECT due_at, outcome FROM cron_firings WHERE cron_id = ? ORDER BY due_at",
                (cron["cron_id"],),
            ).fetchall()

    for minute in range(1, 7):
        set_clock(clock_file, START + minute * MINUTE)
        wait_until(
            lambda m=minute: len(fired()) == m // 2 and "claimed" not in {o for _, o in fired()},
            f"{minute // 2} recorded firing(s)",
        )
    assert [outcome for _, outcome in fired()] == ["started"] * 3
    runs = await client.runs.list(thread["thread_id"], limit=10)
    assert len(runs) == 3 and all(r["metadata"]["cron_id"] == cron["cron_id"] for r in runs)
    await client.crons.delete(cron["cron_id"])
    await client.aclose()
