"""Quotas at the choke point (the YAML `quotas` section): a creation over a limit
is 429 before anything is written, and the limits hold across admission replicas.

Real stacks, on SQLite and Postgres: two admission replicas behind two gateways
racing 100 creations of one user against `max_active_runs`, `runs_per_minute`
with its Retry-After honoured, `tokens_per_day` against the ledger with a test
clock. On SQLite: `/quotas/me` and the gateway's per-key rate, a cron firing over
the quota. Store-level: two replicas' stores taking turns, `max_pending_runs`, a
batch refused whole. And a typo in the section stops start-up.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
import yaml
from sqlalchemy import func, select

from tests.conftest import MODES
from tests.support.admission_stores import BACKENDS, a_pending_run, admission_stores
from tests.support.helpers import says, slow
from tests.support.stacks import (
    fresh_postgres_database,
    metrics_url,
    running_stack,
    scrape,
    stack_env,
    stack_in_mode,
    start_second,
    start_second_gateway,
)
from waybill.cli.doctor import Finding, quota_finding
from waybill.common.config_file import QuotaLimits, QuotasSection
from waybill.common.errors import ServiceError
from waybill.common.launch import Stack
from waybill.common.settings import Settings
from waybill.common.sql import create_engine
from waybill.common.statuses import RunStatus
from waybill.gateway.request_rate import RequestRate
from waybill.services.admission.runs import quotas
from waybill.services.admission.runs.leases import Lease
from waybill.services.admission.runs.quotas import QuotaGate, active_runs_of
from waybill.services.admission.runs.run_store import Admit, RunStore
from waybill.services.admission.tables import threads
from waybill.services.admission.threads.thread_store import ThreadStore

pytestmark = pytest.mark.timeout(180)

RUN = {"assistant_id": "lead_agent", "input": says("hi"), "if_not_exists": "create"}


def write_quotas(path: Path, quotas: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"quotas": quotas}))
    return path


def thread_path(thread_id: str | None = None) -> str:
    return f"/threads/{thread_id or uuid.uuid4()}/runs"


# ---- the section ---------------------------------------------------------------


def test_limits_are_the_default_then_the_role_then_the_principal(tmp_path: Path) -> None:
    section = QuotasSection.model_validate(
        {
            "default": {"max_active_runs": 10, "runs_per_minute": 120, "tokens_per_day": 2000},
            "roles": {"viewer": {"max_active_runs": 2}},
            "principals": {"alice": {"max_active_runs": 3, "tokens_per_day": 50}},
            "run": {"max_tokens": 200000, "max_cost": 2.0},
            "gateway": {"requests_per_second": 50},
            "reset_hour_utc": 4,
        }
    )
    assert section.limits_for("bob", "viewer") == QuotaLimits(
        max_active_runs=2, runs_per_minute=120, tokens_per_day=2000
    )
    assert section.limits_for("alice", "viewer") == QuotaLimits(
        max_active_runs=3, runs_per_minute=120, tokens_per_day=50
    )
    assert section.limits_for("carol", "user") == section.default


def test_the_issues_example_loads(tmp_path: Path) -> None:
    example = """
quotas:
  default:   {max_active_runs: 10, runs_per_minute: 120, tokens_per_day: 2000000,
              cost_per_day: 20.0}
  roles:     {viewer: {max_active_runs: 2}}
  principals: {alice: {max_active_runs: 3, tokens_per_day: 50000}}
  run:       {max_tokens: 200000, max_cost: 2.0}
  gateway:   {requests_per_second: 50}
  reset_hour_utc: 0
"""
    path = tmp_path / "waybill.yaml"
    path.write_text(example)
    quotas = Settings(config=path).quotas()
    assert quotas.principals["alice"].tokens_per_day == 50000
    assert quotas.gateway.requests_per_second == 50


@pytest.mark.parametrize(
    ("quotas", "said"),
    [
        (
            {"default": {"max_actve_runs": 5}},
            "unknown key `quotas.default.max_actve_runs` (did you mean `max_active_runs`?)",
        ),
        (
            {"principals": {"alice": {"tokens_per_dya": 5}}},
            "unknown key `quotas.principals.alice.tokens_per_dya` (did you mean `tokens_per_day`?)",
        ),
        ({"defaults": {}}, "unknown key `quotas.defaults` (did you mean `default`?)"),
        ({"reset_hour_utc": 24}, "quotas.reset_hour_utc: Input should be less than or equal to 23"),
        ({"default": {"max_active_runs": -1}}, "quotas.default.max_active_runs"),
    ],
)
def test_a_bad_quota_key_or_value_is_refused_naming_it(
    tmp_path: Path, quotas: dict[str, Any], said: str
) -> None:
    path = write_quotas(tmp_path / "waybill.yaml", quotas)
    with pytest.raises(ValueError) as refused:
        Settings(config=path).quotas()
    assert said in str(refused.value)


def test_admission_with_a_quota_typo_does_not_start(tmp_path: Path) -> None:
    path = write_quotas(tmp_path / "waybill.yaml", {"default": {"runs_per_minit": 5}})
    env = {**os.environ, **stack_env(tmp_path / "data"), "WAYBILL_CONFIG": str(path)}
    done = subprocess.run(
        [sys.executable, "-m", "waybill.services.admission.server"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    said = f"{path}: unknown key `quotas.default.runs_per_minit` (did you mean `runs_per_minute`?)"
    assert said in done.stderr


def test_doctor_reports_the_quota_configuration(tmp_path: Path) -> None:
    assert quota_finding(Settings()) == Finding("skip", "quotas", "none configured (no limits)")
    path = write_quotas(
        tmp_path / "waybill.yaml",
        {
            "default": {"max_active_runs": 10, "runs_per_minute": 120},
            "roles": {"viewer": {"max_active_runs": 2}},
            "gateway": {"requests_per_second": 50},
            "run": {"max_tokens": 1000},
            "reset_hour_utc": 4,
        },
    )
    found = quota_finding(Settings(config=path))
    assert found == Finding(
        "ok",
        "quotas",
        "default max_active_runs 10, runs_per_minute 120; 1 role(s), 0 principal(s) own; "
        "day resets 04:00 UTC; 50 requests/s per key per gateway; "
        "run budget max_tokens 1000",
    )


def test_the_gateway_rate_refills_at_its_rate() -> None:
    now = [100.0]
    rate = RequestRate(2.0, clock=lambda: now[0])
    assert [rate.wait_for("k") for _ in range(2)] == [None, None]
    assert rate.wait_for("k") == pytest.approx(0.5)
    assert rate.wait_for("other") is None  # each key its own bucket
    now[0] += 0.5
    assert rate.wait_for("k") is None
    assert rate.wait_for("k") == pytest.approx(0.5)


# ---- the store: counted and reserved in the admit ----------------------------------


def gate_of(tmp_path: Path, limits: dict[str, Any]) -> tuple[QuotaGate, QuotaLimits]:
    config = write_quotas(tmp_path / "waybill.yaml", {"default": limits})
    gate = QuotaGate(Settings(config=config))
    return gate, gate.limits_for("local", "local", "admin")


async def test_max_pending_runs_counts_runs_waiting_not_those_claimed_at_once(
    tmp_path: Path,
) -> None:
    gate, limits = gate_of(tmp_path, {"max_pending_runs": 2})
    async with admission_stores(tmp_path) as stores:
        stores.runs.quotas = gate
        for _ in range(2):
            await stores.runs.admit_run(a_pending_run(), "create", quota=limits)
        with pytest.raises(ServiceError) as refused:
            await stores.runs.admit_run(a_pending_run(), "create", quota=limits)
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_pending_runs is 2, and 2 in use" in refused.value.message
        claimed = await stores.runs.admit_run(
            a_pending_run(), "create", Lease("runner-1", 30.0), quota=limits
        )
        assert claimed.status == RunStatus.RUNNING  # a free runner took it: not pending
        async with stores.threads.engine.connect() as conn:
            assert await active_runs_of(conn, "local") == (3, 2)


async def test_a_batch_over_the_quota_is_refused_whole(tmp_path: Path) -> None:
    gate, limits = gate_of(tmp_path, {"max_active_runs": 2})
    async with admission_stores(tmp_path) as stores:
        stores.runs.quotas = gate
        batch = [Admit(a_pending_run(), "create", quota=limits) for _ in range(3)]
        with pytest.raises(ServiceError) as refused:
            await stores.runs.admit_runs(batch)
        assert "max_active_runs is 2" in refused.value.message
        async with stores.threads.engine.connect() as conn:
            assert await active_runs_of(conn, "local") == (0, 0)
            assert await conn.scalar(select(func.count()).select_from(threads)) == 0
        await stores.runs.admit_runs(batch[:2])  # within the limit: all of it
        async with stores.threads.engine.connect() as conn:
            assert await active_runs_of(conn, "local") == (2, 2)


# ---- two admission replicas racing one user -----------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_stores_on_one_database_take_turns_per_owner(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas' stores (two engines, each with its own in-process locks) admit
    one owner's runs at once; each count is slowed down, so that an admit that did
    not wait for the owner's turn would count before the other's insert commits."""
    config = write_quotas(tmp_path / "waybill.yaml", {"default": {"max_active_runs": 5}})
    gate = QuotaGate(Settings(config=config))
    limits = gate.limits_for("local", "local", "admin")

    async def slow_count(conn: Any, owner_id: str) -> tuple[int, int]:
        counted = await active_runs_of(conn, owner_id)
        await asyncio.sleep(0.02)
        return counted

    monkeypatch.setattr(quotas, "active_runs_of", slow_count)
    async with admission_stores(tmp_path, backend) as stores:
        other_engine = create_engine(str(stores.threads.engine.url))
        other = RunStore(ThreadStore(other_engine), gate)
        stores.runs.quotas = gate
        try:
            outcomes = await asyncio.gather(
                *(
                    store.admit_run(a_pending_run(), "create", quota=limits)
                    for store in (stores.runs, other) * 20
                ),
                return_exceptions=True,
            )
        finally:
            await other_engine.dispose()
        refused = [error for error in outcomes if isinstance(error, ServiceError)]
        assert len(refused) == 35, [o for o in outcomes if not isinstance(o, ServiceError)]
        assert all(error.code == grpc.StatusCode.RESOURCE_EXHAUSTED for error in refused)
        async with stores.threads.engine.connect() as conn:
            assert await active_runs_of(conn, "local") == (5, 5)


def active_runs_counter(data_dir: Path, database_url: str | None) -> Callable[[], int]:
    """Reads the runs pending or running from the database itself, not through Waybill."""
    query = "SELECT count(*) FROM runs WHERE status IN ('pending', 'running')"
    if database_url is None:

        def count_sqlite() -> int:
            with sqlite3.connect(f"file:{data_dir / 'admission.db'}?mode=ro", uri=True) as db:
                return int(db.execute(query).fetchone()[0])

        return count_sqlite
    plain = database_url.replace("postgresql+asyncpg://", "postgresql://")

    def count_postgres() -> int:
        with psycopg.connect(plain) as db:
            row = db.execute(query).fetchone()
            assert row is not None
            return int(row[0])

    return count_postgres


@pytest.fixture(params=["sqlite", "postgres"])
def two_replicas(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Stack, str, Callable[[], int]]]:
    """Gateway 1 -> admission 1 (which holds the runner), gateway 2 -> admission 2."""
    config = write_quotas(tmp_path / "waybill.yaml", {"default": {"max_active_runs": 5}})
    with ExitStack() as held:
        url = held.enter_context(fresh_postgres_database()) if request.param == "postgres" else None
        env = stack_env(tmp_path, url, WAYBILL_CONFIG=str(config))
        stack = held.enter_context(running_stack(env, tmp_path))
        admission_2 = start_second(stack, "admission")
        url_2 = start_second_gateway(stack, WAYBILL_ADMISSION_ADDR=admission_2)
        yield stack, url_2, active_runs_counter(tmp_path, url)


async def test_two_replicas_never_admit_more_than_max_active_runs(
    two_replicas: tuple[Stack, str, Callable[[], int]],
) -> None:
    stack, url_2, active_runs = two_replicas
    seen: list[int] = []
    racing = asyncio.Event()

    async def poll() -> None:
        while not racing.is_set():
            seen.append(await asyncio.to_thread(active_runs))
            await asyncio.sleep(0.01)

    body = {**RUN, "input": slow(120)}
    thread_ids = [str(uuid.uuid4()) for _ in range(100)]
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=60) as one,
        httpx.AsyncClient(base_url=url_2, timeout=60) as two,
    ):
        poller = asyncio.create_task(poll())
        replies = await asyncio.gather(
            *(
                client.post(thread_path(thread_id), json=body)
                for thread_id, client in zip(thread_ids, itertools.cycle((one, two)), strict=False)
            )
        )
        racing.set()
        await poller
        seen.append(active_runs())
        answered = list(zip(thread_ids, replies, strict=True))
        admitted = [(t, r.json()["run_id"]) for t, r in answered if r.is_success]
        refused = [(t, r) for t, r in answered if r.status_code == 429]
        print(
            f"\nrace: admitted {len(admitted)}, refused {len(refused)}, "
            f"largest active count seen {max(seen)} in {len(seen)} polls"
        )
        assert (len(admitted), len(refused)) == (5, 95), [r.status_code for r in replies]
        assert max(seen) == 5
        for thread_id, reply in refused:
            assert "retry-after" not in reply.headers  # no wait helps: runs end when they end
            said = reply.json()
            assert (said["limit"], said["value"], said["use"]) == ("max_active_runs", 5, 5)
            assert "max_active_runs is 5" in said["detail"]
            # Nothing written: the thread the run would have created does not exist.
            assert (await one.get(f"/threads/{thread_id}")).status_code == 404
        for thread_id, run_id in admitted:
            ended = await one.post(
                f"/threads/{thread_id}/runs/{run_id}/cancel", params={"wait": "true"}
            )
            assert ended.is_success, ended.text
        assert active_runs() == 0
        again = await asyncio.gather(
            *(client.post(thread_path(), json=RUN) for client in (one, two) * 2)
        )
        assert [reply.status_code for reply in again] == [200] * 4


# ---- one stack ---------------------------------------------------------------------


@pytest.fixture(params=MODES)
def rate_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    config = write_quotas(
        tmp_path / "waybill.yaml", {"principals": {"local": {"runs_per_minute": 10}}}
    )
    with stack_in_mode(request.param, tmp_path, WAYBILL_CONFIG=str(config)) as stack:
        yield stack


async def test_the_eleventh_run_in_a_minute_waits_as_retry_after_says(rate_stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=rate_stack.url, timeout=60) as client:
        started = time.monotonic()
        for _ in range(10):
            created = await client.post(thread_path(), json=RUN)
            assert created.status_code == 200, created.text
        assert time.monotonic() - started < 6, "ten creations must fit in one interval (6 s)"
        refused_thread = str(uuid.uuid4())
        refused = await client.post(thread_path(refused_thread), json=RUN)
        assert refused.status_code == 429, refused.text
        said = refused.json()
        assert (said["limit"], said["value"], said["use"]) == ("runs_per_minute", 10, 10)
        wait = int(refused.headers["retry-after"])
        assert 1 <= wait <= 6 and said["retry_after"] == wait
        assert (await client.get(f"/threads/{refused_thread}")).status_code == 404
        use = (await client.get("/quotas/me")).json()["use"]
        assert use["runs_this_minute"] == 10
        await asyncio.sleep(wait)
        honoured = await client.post(thread_path(), json=RUN)
        assert honoured.status_code == 200, honoured.text
        again = await client.post(thread_path(), json=RUN)
        assert again.status_code == 429  # the honoured one took the token that came back
    refusals = scrape(metrics_url(rate_stack, "admission"))
    assert refusals['waybill_quota_refusals_total{limit="runs_per_minute"}'] == 2


@pytest.fixture(params=MODES)
def budget_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Stack, Path]]:
    clock = tmp_path / "quota-clock"
    clock.write_text(datetime.now(UTC).isoformat())
    config = write_quotas(
        tmp_path / "waybill.yaml",
        {"default": {"tokens_per_day": 1, "max_pending_runs": 50}, "reset_hour_utc": 3},
    )
    with stack_in_mode(
        request.param,
        tmp_path,
        WAYBILL_CONFIG=str(config),
        WAYBILL_QUOTA_CLOCK_FILE=str(clock),
        WAYBILL_API_KEY="quota-admin-key",
    ) as stack:
        yield stack, clock


async def test_a_day_spent_is_refused_until_its_reset(budget_stack: tuple[Stack, Path]) -> None:
    stack, clock = budget_stack
    headers = {"x-api-key": "quota-admin-key"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60, headers=headers) as client:
        thread_id = str(uuid.uuid4())
        done = await client.post(f"{thread_path(thread_id)}/wait", json=RUN)
        assert done.status_code == 200, done.text
        report = (await client.get("/quotas/me")).json()
        spent = report["use"]["tokens_today"]
        assert spent > 1 and report["limits"]["tokens_per_day"] == 1
        assert report["limits"]["max_active_runs"] is None
        refused = await client.post(thread_path(thread_id), json={**RUN, "input": says("more")})
        assert refused.status_code == 429, refused.text
        said = refused.json()
        assert (said["limit"], said["value"], said["use"]) == ("tokens_per_day", 1, spent)
        resets_at = datetime.fromisoformat(report["resets_at"])
        assert resets_at.hour == 3 and resets_at > datetime.now(UTC)
        now = datetime.fromisoformat(clock.read_text())
        assert abs(int(refused.headers["retry-after"]) - (resets_at - now).total_seconds()) <= 2
        runs = (await client.get(f"/threads/{thread_id}/runs")).json()
        assert len(runs) == 1  # the refused run was never stored
        clock.write_text((resets_at + timedelta(seconds=1)).isoformat())  # the next day
        admitted = await client.post(thread_path(thread_id), json=RUN)
        assert admitted.status_code == 200, admitted.text
        assert (await client.get("/quotas/admin")).json()["use"]["tokens_today"] == 0


async def test_quotas_of_another_principal_are_for_admins(tmp_path: Path) -> None:
    import hashlib

    config = {
        "auth": {
            "principals": [
                {"user_id": "alice", "key_sha256": hashlib.sha256(b"alice-key").hexdigest()},
                {
                    "user_id": "root",
                    "role": "admin",
                    "key_sha256": hashlib.sha256(b"root-key").hexdigest(),
                },
            ]
        },
        "quotas": {
            "default": {"max_active_runs": 4},
            "principals": {"alice": {"max_active_runs": 1}},
            "gateway": {"requests_per_second": 3},
        },
    }
    path = tmp_path / "waybill.yaml"
    path.write_text(yaml.safe_dump(config))
    with running_stack(stack_env(tmp_path, WAYBILL_CONFIG=str(path)), tmp_path) as stack:
        alice = httpx.AsyncClient(base_url=stack.url, headers={"x-api-key": "alice-key"})
        root = httpx.AsyncClient(base_url=stack.url, headers={"x-api-key": "root-key"})
        async with alice, root:
            mine = (await alice.get("/quotas/me")).json()
            assert mine["principal"] == "alice" and mine["limits"]["max_active_runs"] == 1
            assert mine["limits"]["requests_per_second"] == 3
            assert (await alice.get("/quotas/root")).status_code == 403
            of_alice = (await root.get("/quotas/alice")).json()
            assert of_alice["limits"] == mine["limits"]
            assert of_alice["use"]["active_runs"] == 0
            # Three requests a second per key, in this gateway: the next ones wait.
            await asyncio.sleep(1.1)
            replies = [await alice.get("/quotas/me") for _ in range(5)]
            codes = [reply.status_code for reply in replies]
            assert codes[:3] == [200] * 3 and 429 in codes[3:], codes
            limited = next(reply for reply in replies if reply.status_code == 429)
            assert limited.json()["limit"] == "requests_per_second"
            assert int(limited.headers["retry-after"]) >= 1
            assert (await root.get("/quotas/me")).status_code == 200  # root has its own bucket


# ---- crons meet the limits -----------------------------------------------------------


def cron_firings(data_dir: Path, cron_id: str) -> list[tuple[str, str]]:
    """(outcome, detail) of each firing of `cron_id`, oldest first, from SQL itself."""
    with sqlite3.connect(f"file:{data_dir / 'admission.db'}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT outcome, detail FROM cron_firings WHERE cron_id = ? ORDER BY due_at",
            (cron_id,),
        ).fetchall()
    return [(str(outcome), str(detail)) for outcome, detail in rows]


def wait_for_firing(data_dir: Path, cron_id: str, count: int) -> list[tuple[str, str]]:
    for _ in range(600):
        found = cron_firings(data_dir, cron_id)
        if len(found) >= count and all(outcome != "claimed" for outcome, _ in found):
            return found
        time.sleep(0.05)
    raise AssertionError(f"cron {cron_id}: {count} firings never recorded: {found}")


async def test_a_cron_firing_over_the_quota_is_recorded_and_the_next_fires(
    tmp_path: Path,
) -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    clock = tmp_path / "cron-clock"
    clock.write_text(start.isoformat())
    config = write_quotas(tmp_path / "waybill.yaml", {"default": {"max_active_runs": 1}})
    env = stack_env(
        tmp_path,
        WAYBILL_CONFIG=str(config),
        WAYBILL_CRON_CLOCK_FILE=str(clock),
        WAYBILL_CRON_MAX_SLEEP_SECONDS="0.1",
        WAYBILL_CRON_MISFIRE_GRACE_SECONDS="600",
    )
    with running_stack(env, tmp_path) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=60) as client:
            created = await client.post(
                "/runs/crons",
                json={
                    "assistant_id": "lead_agent",
                    "schedule": "* * * * *",
                    "input": slow(120),
                    "multitask_strategy": "enqueue",  # only the quota stops an overlap
                    "on_run_completed": "keep",
                },
            )
            assert created.status_code == 200, created.text
            cron_id = created.json()["cron_id"]
            clock.write_text((start + timedelta(minutes=1)).isoformat())
            [(first, _)] = wait_for_firing(tmp_path, cron_id, 1)
            assert first == "started"
            clock.write_text((start + timedelta(minutes=2)).isoformat())
            second = wait_for_firing(tmp_path, cron_id, 2)[1]
            assert second[0] == "refused" and "max_active_runs is 1" in second[1], second
            assert active_runs_counter(tmp_path, None)() == 1  # the refused firing stored no run
            cancelled = await client.post("/runs/cancel", json={"status": "all"})
            assert cancelled.is_success, cancelled.text
            for _ in range(200):
                if active_runs_counter(tmp_path, None)() == 0:
                    break
                await asyncio.sleep(0.05)
            clock.write_text((start + timedelta(minutes=3)).isoformat())
            third = wait_for_firing(tmp_path, cron_id, 3)[2]
            assert third[0] == "started", third
