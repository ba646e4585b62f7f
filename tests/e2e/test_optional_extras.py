"""The embedded default needs none of the `postgres` and `redis` extras: with their
packages made unimportable, every service imports and `waybill up` serves a run; a
setting that asks for one of them stops the service with one line naming the extra.

The packages are hidden by a `sitecustomize` on PYTHONPATH (a meta-path finder that
raises ImportError for them), in every process the launcher starts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.launched import ctrl_c, launcher_env, running
from tests.support.stacks import free_port
from waybill.common.extras import MISSING_EXTRA_EXIT_CODE

# What the `postgres` and `redis` extras install (by import name).
OPTIONAL = (
    "asyncpg",
    "psycopg",
    "psycopg_pool",
    "psycopg_binary",
    "redis",
    "langgraph.checkpoint.postgres",
    "langgraph.store.postgres",
)

BLOCKER = f"""
import sys

BLOCKED = {OPTIONAL!r}


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if any(name == blocked or name.startswith(blocked + ".") for blocked in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
        return None


sys.meta_path.insert(0, Blocker())
"""

SERVICES = (
    "waybill.gateway.server",
    "waybill.services.admission.server",
    "waybill.services.runner.server",
    "waybill.services.journal.server",
    "waybill.services.delivery.server",
    "waybill.common.migrate",
    "waybill.common.launch",
    "waybill.cli.main",
)


@pytest.fixture
def hidden(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with the blocker first: the extras' packages cannot be imported."""
    folder = tmp_path / "blocker"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


def python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_blocker_hides_the_extras(tmp_path: Path, hidden: dict[str, str]) -> None:
    env = launcher_env(tmp_path / ".waybill", free_port(), **hidden)
    for module in OPTIONAL:
        done = python(f"import {module}", env, tmp_path)
        assert done.returncode != 0 and "(hidden)" in done.stderr, (module, done.stderr)


def test_every_service_imports_without_the_extras(tmp_path: Path, hidden: dict[str, str]) -> None:
    env = launcher_env(tmp_path / ".waybill", free_port(), **hidden)
    code = "\n".join(
        [
            "import importlib, sys",
            *(f"importlib.import_module({module!r})" for module in SERVICES),
            f"loaded = [m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}"
            f" or m.startswith(('langgraph.checkpoint.postgres', 'langgraph.store.postgres'))]",
            "assert not loaded, loaded",
        ]
    )
    done = python(code, env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_embedded_stack_serves_a_run_without_the_extras(
    tmp_path: Path, hidden: dict[str, str]
) -> None:
    with running(tmp_path / "stack", free_port(), **hidden) as up:

        async def use() -> None:
            client = get_client(url=up.url, timeout=30)
            thread = await client.threads.create()
            values = await client.runs.wait(
                thread["thread_id"],
                "lead_agent",
                input={"messages": [{"role": "user", "content": "no extras here"}]},
            )
            assert isinstance(values, dict)
            assert "no extras here" in str(values["messages"][-1]["content"])

        asyncio.run(use())
        assert ctrl_c(up) == 0
    assert "(hidden)" not in up.text()


POSTGRES_LINE = (
    "WAYBILL_DATABASE_URL is a Postgres URL: it needs the `postgres` extra "
    "(asyncpg is not installed): pip install 'waybill[postgres]'"
)
REDIS_LINE = (
    "WAYBILL_REDIS_URL is set: it needs the `redis` extra "
    "(redis is not installed): pip install 'waybill[redis]'"
)


def refusals(stderr: str) -> list[str]:
    """The errors a service logged (one JSON object a line)."""
    logged = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [entry["msg"] for entry in logged if entry["level"] == "error"]


SCALED = {
    "WAYBILL_SERVICE_TOKEN": "a-test-token",
    # Nothing listens there: the missing driver stops the service before any connection.
    "WAYBILL_DATABASE_URL": "postgres://waybill@127.0.0.1:9/waybill",
}


@pytest.mark.parametrize(
    "module",
    [
        "waybill.services.admission.server",
        "waybill.services.runner.server",
        "waybill.services.journal.server",
        "waybill.services.delivery.server",
    ],
)
def test_a_postgres_url_without_the_extra_is_one_line(
    tmp_path: Path, hidden: dict[str, str], module: str
) -> None:
    env = launcher_env(tmp_path / ".waybill", free_port(), **hidden, **SCALED)
    done = subprocess.run(
        [sys.executable, "-m", module],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == MISSING_EXTRA_EXIT_CODE, done.stderr[-3000:]
    assert refusals(done.stderr) == [f"refusing to start: {POSTGRES_LINE}"], done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_migrate_with_a_postgres_url_without_the_extra_is_one_line(
    tmp_path: Path, hidden: dict[str, str]
) -> None:
    env = launcher_env(tmp_path / ".waybill", free_port(), **hidden, **SCALED)
    done = subprocess.run(
        [sys.executable, "-m", "waybill.common.migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == MISSING_EXTRA_EXIT_CODE, done.stderr[-3000:]
    assert done.stderr.strip() == f"waybill migrate: refusing to migrate: {POSTGRES_LINE}"


def test_a_redis_url_without_the_extra_is_one_line(tmp_path: Path, hidden: dict[str, str]) -> None:
    """The journal on SQLite (embedded) but told to fan out through Redis."""
    env = launcher_env(
        tmp_path / ".waybill",
        free_port(),
        **hidden,
        WAYBILL_SERVICE_TOKEN="a-test-token",
        WAYBILL_REDIS_URL="redis://127.0.0.1:9/0",
    )
    migrated = subprocess.run(
        [sys.executable, "-m", "waybill.common.migrate"], env=env, cwd=tmp_path, timeout=120
    )
    assert migrated.returncode == 0  # SQLite: the journal's schema is there
    done = subprocess.run(
        [sys.executable, "-m", "waybill.services.journal.server"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == MISSING_EXTRA_EXIT_CODE, done.stderr[-3000:]
    assert refusals(done.stderr) == [f"refusing to start: {REDIS_LINE}"], done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
