"""Migrations run once per deploy (`python -m common.migrate`); a service only
checks its schema at start and refuses one it does not run on, saying why.
Real processes, SQLite files and a fresh Postgres database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from common.grpc_server import SCHEMA_EXIT_CODE
from common.migrate import UPGRADES, schema_of
from tests.stacks import fresh_postgres_database, stack_env

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
    said = refusal("services.delivery.server", env)
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
    done = run_module("common.migrate", env)
    assert done.returncode == 0, done.stderr
    for service, head in HEAD.items():
        assert f"{service}: schema at {head}" in done.stdout
    # Twice is harmless: nothing to do the second time.
    assert run_module("common.migrate", env).returncode == 0

    # A revision this build knows, older than its head: the head's predecessor.
    older = schema_of("journal").script_directory().get_revision(HEAD["journal"]).down_revision
    assert isinstance(older, str)
    journal = sqlite3.connect(tmp_path / "journal.db")
    with journal:
        journal.execute("UPDATE alembic_version_journal SET version_num = ?", (older,))
    said = refusal("services.journal.server", env)
    needs = f"this build needs {HEAD['journal']}: run the migrations"
    assert f"the journal schema is at {older}, {needs}" in said

    with journal:
        journal.execute("UPDATE alembic_version_journal SET version_num = '0042'")
    said = refusal("services.journal.server", env)
    assert f"this build does not know journal schema 0042 (its newest is {HEAD['journal']})" in said
    assert "migrated by a newer release" in said


def test_postgres_migrations_run_once_even_when_started_twice(tmp_path: Path) -> None:
    with fresh_postgres_database() as url:
        env = stack_env(tmp_path, url)
        # Two migration jobs at once (a retried Job, two deploys): they take turns.
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda _: run_module("common.migrate", env, 120), range(2)))
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
        said = refusal("services.runner.server", env)
        assert f"LangGraph's checkpoint_migrations is at {newest - 1}, this build needs " in said
        assert "run the migrations" in said


def test_wait_returns_once_another_run_has_migrated(tmp_path: Path) -> None:
    """`migrate --wait` (a pod's init step) migrates nothing; it waits for the Job."""
    env = stack_env(tmp_path)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "common.migrate", "--wait"],
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
        assert run_module("common.migrate", env).returncode == 0
        assert waiter.wait(60) == 0
        assert "every schema is at this build's head" in waiter.stdout.read()
    finally:
        if waiter.poll() is None:
            waiter.kill()
