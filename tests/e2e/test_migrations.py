"""Migrations run once per deploy (`python -m waybill.common.migrate`); a service only
checks its schema at start and refuses one it does not run on, saying why.
Real processes, SQLite files and a fresh Postgres database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
import sqlalchemy
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext

from tests.support.stacks import fresh_postgres_database, stack_env
from waybill.common.grpc_server import SCHEMA_EXIT_CODE
from waybill.common.migrate import UPGRADES, schema_of

pytestmark = pytest.mark.timeout(180)

Completed = subprocess.CompletedProcess[str]

# Each service's newest revision in this build (other branches add migrations).
HEAD = {service: schema_of(service).head() for service in UPGRADES}


def run_module(module: str, env: dict[str, str], timeout: float = 60) -> Completed:
    return subprocess.run(
        [sys.executable, "-m", module],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refusal(module: str, env: dict[str, str]) -> str:
    """Start a service that must refuse to start; return what it said."""
    done = run_module(module, env)
    assert done.returncode == SCHEMA_EXIT_CODE, done.stdout + done.stderr
    return done.stderr


def test_a_service_never_migrated_refuses_to_start(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    said = refusal("waybill.services.delivery.server", env)
    needs = f"(this build needs {HEAD['delivery']})"
    assert f"refusing to start: the delivery schema is not migrated {needs}" in said
    assert "waybill migrate" in said
    # ...and it created nothing: the schema is the migration step's alone.
    tables = sqlite3.connect(tmp_path / "delivery.db").execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    )
    assert [name for (name,) in tables] == []


def test_migrate_then_every_service_checks_its_revision(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    done = run_module("waybill.common.migrate", env)
    assert done.returncode == 0, done.stderr
    for service, head in HEAD.items():
        assert f"{service}: schema at {head}" in done.stdout
    # Twice is harmless: nothing to do the second time.
    assert run_module("waybill.common.migrate", env).returncode == 0

    # A revision this build knows, older than its head: the head's predecessor.
    older = schema_of("journal").script_directory().get_revision(HEAD["journal"]).down_revision
    assert isinstance(older, str)
    journal = sqlite3.connect(tmp_path / "journal.db")
    with journal:
        journal.execute("UPDATE alembic_version_journal SET version_num = ?", (older,))
    said = refusal("waybill.services.journal.server", env)
    needs = f"this build needs {HEAD['journal']}: run the migrations"
    assert f"the journal schema is at {older}, {needs}" in said

    with journal:
        journal.execute("UPDATE alembic_version_journal SET version_num = '0042'")
    said = refusal("waybill.services.journal.server", env)
    assert f"this build does not know journal schema 0042 (its newest is {HEAD['journal']})" in said
    assert "migrated by a newer release" in said


def test_migrate_refuses_a_schema_a_newer_release_migrated(tmp_path: Path) -> None:
    """`waybill migrate` of an older build leaves a newer release's tables alone, and says why."""
    env = stack_env(tmp_path)
    assert run_module("waybill.common.migrate", env).returncode == 0
    journal = sqlite3.connect(tmp_path / "journal.db")
    with journal:
        journal.execute("UPDATE alembic_version_journal SET version_num = '0042'")
    done = run_module("waybill.common.migrate", env)
    assert done.returncode == 1, done.stdout
    newest = HEAD["journal"]
    said = f"failed: this build does not know journal schema 0042 (its newest is {newest})"
    assert said in done.stderr
    assert "migrated by a newer release" in done.stderr
    [(version,)] = journal.execute("SELECT version_num FROM alembic_version_journal")
    assert version == "0042"


def test_postgres_migrations_run_once_even_when_started_twice(tmp_path: Path) -> None:
    with fresh_postgres_database() as url:
        env = stack_env(tmp_path, url)
        # Two migration jobs at once (a retried Job, two deploys): they take turns.
        with ThreadPoolExecutor(2) as pool:
            runs = list(
                pool.map(lambda _: run_module("waybill.common.migrate", env, 120), range(2))
            )
        for done in runs:
            assert done.returncode == 0, done.stderr
            assert f"runner: schema at {HEAD['runner']}" in done.stdout
        plain = url.replace("postgresql+asyncpg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as conn:
            versions = conn.execute("SELECT version_num FROM alembic_version_admission").fetchall()
            assert versions == [(HEAD["admission"],)]
            # LangGraph's own tables are the runner's to check too.
            newest = conn.execute("SELECT max(v) FROM checkpoint_migrations").fetchone()[0]
            conn.execute("DELETE FROM checkpoint_migrations WHERE v = %s", (newest,))
        said = refusal("waybill.services.runner.server", env)
        assert f"LangGraph's checkpoint_migrations is at {newest - 1}, this build needs " in said
        assert "run the migrations" in said


def test_wait_returns_once_another_run_has_migrated(tmp_path: Path) -> None:
    """`migrate --wait` (a pod's init step) migrates nothing; it waits for the Job."""
    env = stack_env(tmp_path)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "waybill.common.migrate", "--wait"],
        env={**os.environ, **env, "WAYBILL_MIGRATE_LOCK_POLL_SECONDS": "0.1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdout is not None
    try:
        waiter.stdout.readline()  # "waybill migrate: SQLite under ..."
        waiting = waiter.stdout.readline()
        assert "waiting: the journal schema is not migrated" in waiting
        assert waiter.poll() is None
        assert run_module("waybill.common.migrate", env).returncode == 0
        assert waiter.wait(60) == 0
        assert "every schema is at this build's head" in waiter.stdout.read()
    finally:
        if waiter.poll() is None:
            waiter.kill()


def journal_to(url: str, revision: str, down: bool = False) -> None:
    """Move the journal's schema up (or `down`) to `revision`: Alembic's own commands
    through the journal's env.py, on a plain synchronous connection, no service
    (`url`: sqlite:/// or postgresql+psycopg://)."""
    from alembic import command
    from sqlalchemy import create_engine as create_sync_engine

    from waybill.common.sql import alembic_config
    from waybill.services.journal.store import MIGRATIONS

    engine = create_sync_engine(url)
    with engine.begin() as connection:
        config = alembic_config(MIGRATIONS, "journal", connection)
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def journal_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(synchronous URL, the service's async URL) of an empty journal database."""
    if request.param == "sqlite":
        path = tmp_path / "journal.db"
        yield f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
        return
    with fresh_postgres_database() as url:
        yield url.replace("+asyncpg", "+psycopg"), url


def test_stored_events_move_into_batch_rows_and_back(journal_database: tuple[str, str]) -> None:
    """0005 packs the events stored one row each into compressed batches (through the
    services' own migrate, asyncpg on Postgres); the store reads them as before, and
    a downgrade unpacks them again."""
    import asyncio
    import uuid
    from datetime import UTC, datetime

    from sqlalchemy import create_engine as create_sync_engine
    from sqlalchemy import text

    from waybill.common.sql import create_engine
    from waybill.services.journal.store import JournalStore

    sync_url, async_url = journal_database
    journal_to(sync_url, "0004")
    run_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    # More events than the migration reads at a time (2,000): stretches span its pages.
    events = [(run_id, seq, "messages", b'["tok%d"]' % seq) for seq in range(4100)]
    events += [(other, seq, "values", b"{}") for seq in range(3)]
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    database = create_sync_engine(sync_url)
    with database.begin() as conn:
        conn.execute(
            text("INSERT INTO run_events VALUES (:r, :s, :e, :d, :at)"),
            [{"r": r, "s": s, "e": e, "d": d, "at": at} for r, s, e, d in events],
        )
        conn.execute(
            text("INSERT INTO run_logs VALUES (:r, 1, :closed)"),
            [{"r": run_id, "closed": at}, {"r": other, "closed": None}],  # other: still open
        )

    async def upgrade_and_read() -> list[tuple[str, int, str, bytes]]:
        store = JournalStore(create_engine(async_url))
        try:
            await store.migrate()
            logs = [await store.load(run) for run in (run_id, other)]
            page = await store.page(run_id, 4000, 500)
        finally:
            await store.engine.dispose()
        assert page.closed and [e.seq for e in page.events] == list(range(4000, 4100))
        return [tuple(event) for log in logs if log is not None for event in log.events]

    assert asyncio.run(upgrade_and_read()) == events
    with database.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT first_seq, last_seq FROM run_event_batches "
                "WHERE run_id = :r ORDER BY first_seq"
            ),
            {"r": run_id},
        )
        stretches = [(first, min(first + 511, 4099)) for first in range(0, 4100, 512)]
        assert [tuple(row) for row in rows] == stretches

    journal_to(sync_url, "0004", down=True)
    with database.connect() as conn:
        back = conn.execute(text("SELECT run_id, seq, event, data FROM run_events"))
        assert sorted((r, s, e, bytes(d)) for r, s, e, d in back) == sorted(events)
    database.dispose()


def _upgrade_admission(url: str, target: str) -> None:
    """Admission's migrations up to `target`, on a SQLite file with foreign keys on
    (as the services open it), the way `waybill migrate` runs them."""
    schema = schema_of("admission")
    engine = sqlalchemy.create_engine(url)
    sqlalchemy.event.listen(
        engine, "connect", lambda connection, _: connection.execute("PRAGMA foreign_keys=ON")
    )
    script = schema.script_directory()
    config = Config()
    config.set_main_option("script_location", str(schema.migrations))
    with (
        engine.begin() as connection,
        EnvironmentContext(
            config, script, fn=lambda revision, _: script._upgrade_revs(target, revision)
        ) as environment,
    ):
        environment.configure(
            connection=connection, version_table=schema.version_table, render_as_batch=True
        )
        environment.run_migrations()
    engine.dispose()


def test_assistants_made_before_owners_keep_their_versions_and_belong_to_local(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'admission.db'}"
    _upgrade_admission(url, "0009")
    db = sqlite3.connect(tmp_path / "admission.db")
    with db:
        row = ("a1", "g", "n", None, "{}", "{}", "{}", 2, "2026-01-01", "2026-01-01")
        db.execute("INSERT INTO assistants VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        for version in (1, 2):
            db.execute(
                "INSERT INTO assistant_versions VALUES (?, ?, 'g', 'n', NULL, '{}', '{}', '{}', ?)",
                ("a1", version, "2026-01-01"),
            )
    db.close()
    _upgrade_admission(url, "0010")
    db = sqlite3.connect(tmp_path / "admission.db")
    assert db.execute("SELECT assistant_id, owner_id FROM assistants").fetchall() == [
        ("a1", "local")
    ]
    # The column was added in place: no copy of the table cascaded into its versions.
    assert db.execute("SELECT count(*) FROM assistant_versions").fetchone() == (2,)
    db.close()
