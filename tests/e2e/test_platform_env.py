"""LangGraph Platform's environment names (DATABASE_URI, REDIS_URI, N_JOBS_PER_WORKER,
BG_JOB_TIMEOUT_SECS, LOG_LEVEL) and every usual spelling of a Postgres URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.stacks import POSTGRES_ADMIN_URL, fresh_postgres_database
from waybill.common.launch import local_stack
from waybill.common.settings import Settings

WAYBILL = str(Path(sys.executable).with_name("waybill"))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("WAYBILL_") or name in ("DATABASE_URI", "REDIS_URI", "LOG_LEVEL"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_platform_names_set_the_settings_they_mean(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DATABASE_URI", "postgres://u:p@db.internal:5432/app")
    clean_env.setenv("REDIS_URI", "redis://cache:6379/1")
    clean_env.setenv("N_JOBS_PER_WORKER", "4")
    clean_env.setenv("BG_JOB_TIMEOUT_SECS", "90")
    clean_env.setenv("LOG_LEVEL", "WARNING")
    settings = Settings()
    assert settings.database_url == "postgresql+asyncpg://u:p@db.internal:5432/app"
    assert settings.checkpointer_url() == "postgresql://u:p@db.internal:5432/app"
    assert settings.redis_url == "redis://cache:6379/1"
    assert settings.runner_slots == 4
    assert settings.run_timeout_seconds == 90.0
    assert settings.log_level == "warning"
    # The launcher hands them on as the services read them (its own view included).
    assert local_stack(os.environ).settings.database_url == settings.database_url


def test_a_waybill_name_wins_over_the_platform_one(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("N_JOBS_PER_WORKER", "4")
    clean_env.setenv("WAYBILL_RUNNER_SLOTS", "7")
    assert Settings().runner_slots == 7


@pytest.mark.parametrize(
    "scheme", ["postgres://", "postgresql://", "postgresql+psycopg://", "postgresql+asyncpg://"]
)
def test_every_postgres_spelling_reaches_the_async_driver(scheme: str) -> None:
    url = Settings.model_validate({"database_url": f"{scheme}h/db"}).database_url
    assert url == "postgresql+asyncpg://h/db"


def test_a_bad_log_level_is_refused_by_name(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="log level 'loud'"):
        Settings()


@pytest.mark.parametrize("name", ["DATABASE_URI", "WAYBILL_DATABASE_URL"])
def test_migrate_on_a_postgres_url_as_langgraph_writes_it(name: str, tmp_path: Path) -> None:
    """A real Postgres, named `postgres://…` as LangGraph Platform's docs write it."""
    with fresh_postgres_database() as url:
        plain = url.replace("postgresql+asyncpg://", "postgres://")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAYBILL_")}
        env.update({name: plain, "WAYBILL_DATA_DIR": str(tmp_path)})
        done = subprocess.run(
            [WAYBILL, "migrate"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Postgres" in done.stdout
        database = url.rsplit("/", 1)[1]
        admin = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
        with psycopg.connect(f"{admin}/{database}") as conn:
            tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables")}
        assert {"threads", "runs"} <= tables
