"""Real Waybill stacks for tests: the five processes on free loopback ports,
against SQLite files (embedded) or a fresh Postgres database."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import redis

from tests.support.paths import FIXTURES
from waybill.common import codec
from waybill.common.grpc_channels import blocking_channel, open_channel
from waybill.common.launch import Stack, grpc_serving
from waybill.common.settings import Settings
from waybill.v1 import runner_pb2, runner_pb2_grpc

POSTGRES_ADMIN_URL = os.environ.get(
    "WAYBILL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)

# The journal's Redis (live fan-out across replicas); tests use a key prefix each.
SHARED_REDIS = os.environ.get("WAYBILL_TEST_REDIS", "redis://127.0.0.1:6379/0")

# A small LangGraph project (with a subgraph) served beside lead_agent in tests.
TEST_GRAPHS = FIXTURES / "graphs" / "langgraph.json"


# Webhooks: quick retries, and 127.0.0.1 allowed as a target (a local receiver).
WEBHOOK_SECRET = "webhook-test-secret"
WEBHOOK_ENV = {
    "WAYBILL_WEBHOOK_SECRET": WEBHOOK_SECRET,
    "WAYBILL_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",
    "WAYBILL_WEBHOOK_BACKOFF_SECONDS": "0.2",
    "WAYBILL_WEBHOOK_BACKOFF_MAX_SECONDS": "0.5",
    "WAYBILL_WEBHOOK_POLL_SECONDS": "0.2",
    "WAYBILL_WEBHOOK_HELD_SECONDS": "1",
    "WAYBILL_WEBHOOK_TIMEOUT_SECONDS": "2",
}


def wait_until(ready: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.1)


async def eventually(check: Callable[[], Awaitable[Any]], what: str, seconds: float = 30.0) -> Any:
    """Await `check()` until it returns something truthy, and return that."""
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


def http_ok(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ok").status_code == 200
    except httpx.HTTPError:
        return False


# Test ports come from below the kernel's ephemeral range (32768+ by default), so no
# outgoing connection's source port and no other bind-to-0 can take one between the
# check here and the service's own bind; and none is handed out twice in a session
# (bind-to-0 can return the same port to two calls in a row once the first is closed).
# Under pytest-xdist each worker takes its own slice of the range, so that two workers
# never pick the same free port before either binds it.
ALL_TEST_PORTS = range(20000, 32000)
_handed_out: set[int] = set()


def _worker_ports() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", … or unset
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return ALL_TEST_PORTS
    size = len(ALL_TEST_PORTS) // workers
    start = ALL_TEST_PORTS.start + int(worker[2:]) * size
    return range(start, start + size)


TEST_PORTS = _worker_ports()


def free_port() -> int:
    """A loopback port nothing listens on, not yet given to another test process."""
    for _ in range(1000):
        port = random.choice(TEST_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {TEST_PORTS}")


# The service token of test stacks (common/service_token.py): a test calling a
# service's gRPC directly presents it through `service_channel`.
TEST_SERVICE_TOKEN = "test-service-token-0000"


def service_channel(address: str) -> grpc.Channel:
    """A blocking channel to a test stack's service, its calls carrying the token."""
    return blocking_channel(address, Settings(service_token=TEST_SERVICE_TOKEN))


def aio_service_channel(address: str) -> grpc.aio.Channel:
    """An asyncio channel to a test stack's service, its calls carrying the token."""
    return open_channel(address, settings=Settings(service_token=TEST_SERVICE_TOKEN))


def stack_env(data_dir: Path, database_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {
        "WAYBILL_DATA_DIR": str(data_dir),
        "WAYBILL_SERVICE_TOKEN": TEST_SERVICE_TOKEN,
        "WAYBILL_HTTP_PORT": str(free_port()),
        "WAYBILL_ADMISSION_ADDR": f"127.0.0.1:{free_port()}",
        "WAYBILL_RUNNER_ADDR": f"127.0.0.1:{free_port()}",
        "WAYBILL_JOURNAL_ADDR": f"127.0.0.1:{free_port()}",
        "WAYBILL_DELIVERY_ADDR": f"127.0.0.1:{free_port()}",
        # Every service's /metrics, so that tests can scrape what they ran.
        "WAYBILL_ADMISSION_METRICS_PORT": str(free_port()),
        "WAYBILL_RUNNER_METRICS_PORT": str(free_port()),
        "WAYBILL_JOURNAL_METRICS_PORT": str(free_port()),
        "WAYBILL_DELIVERY_METRICS_PORT": str(free_port()),
        "WAYBILL_SHUTDOWN_GRACE_SECONDS": "2",
        # A cancel cuts a tool executing after this (test_tool_calls.py sets its own).
        "WAYBILL_CANCEL_GRACE_SECONDS": "0.2",
        "WAYBILL_SSE_HEARTBEAT_SECONDS": "1",
        # Test stacks share the machine with each other: a runner at the default nice
        # (10) waits behind every other stack's processes (test_lifecycle checks it).
        "WAYBILL_RUNNER_NICE": "0",
        "WAYBILL_WAIT_KEEPALIVE_SECONDS": "0.5",
        "WAYBILL_GRAPHS": str(TEST_GRAPHS),
        **extra,
    }
    if database_url:
        env["WAYBILL_DATABASE_URL"] = database_url
    return env


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """Create an empty database for one test session; drop it afterwards."""
    name = f"waybill_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_redis_keys(redis_url: str, prefix: str) -> None:
    """Delete a test's keys (a prefix of its own) from a Redis, if it is still up."""
    try:
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
    except redis.RedisError:
        pass


@contextmanager
def running_stack(env: dict[str, str], log_dir: Path) -> Iterator[Stack]:
    stack = Stack(env=env, log_dir=str(log_dir))
    try:
        stack.start()
        yield stack
    except BaseException:
        for log_file in sorted(log_dir.glob("*.log")):
            print(f"---- {log_file.name} ----\n{log_file.read_text()[-4000:]}")
        raise
    finally:
        stack.stop()


@contextmanager
def stack_in_mode(mode: str, data_dir: Path, **extra: str) -> Iterator[Stack]:
    """The five services as real processes: "sqlite" (embedded: SQLite, in-memory
    fan-out) or "postgres" (a fresh database, and Redis for the journal's fan-out)."""
    if mode == "sqlite":
        with running_stack(stack_env(data_dir, **extra), data_dir) as stack:
            yield stack
        return
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    redis_env = {"WAYBILL_REDIS_URL": SHARED_REDIS, "WAYBILL_JOURNAL_REDIS_PREFIX": prefix}
    try:
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url, **redis_env, **extra), data_dir) as stack,
        ):
            yield stack
    finally:
        drop_redis_keys(SHARED_REDIS, prefix)


def runner_stats(address: str) -> dict[str, int]:
    """The counters a runner process keeps (runs started, models built, stale writes...)."""
    with service_channel(address) as channel:
        reply = runner_pb2_grpc.RunnerStub(channel).GetStats(runner_pb2.GetStatsRequest())
    return dict(codec.loads(reply.json))


SERVICE_ADDR_ENV = {
    "admission": "WAYBILL_ADMISSION_ADDR",
    "runner": "WAYBILL_RUNNER_ADDR",
    "journal": "WAYBILL_JOURNAL_ADDR",
    "delivery": "WAYBILL_DELIVERY_ADDR",
}


def replica_env(service: str, address: str) -> dict[str, str]:
    """What a further replica of `service` needs of its own: its address and metrics port."""
    return {
        SERVICE_ADDR_ENV[service]: address,
        f"WAYBILL_{service.upper()}_METRICS_PORT": str(free_port()),
    }


def start_second(stack: Stack, service: str, name: str | None = None) -> str:
    """A second replica of `service` beside the stack's own; returns its gRPC address."""
    address = f"127.0.0.1:{free_port()}"
    name = name or f"{service}-2"
    stack.start_one(name, f"waybill.services.{service}.server", replica_env(service, address))
    wait_until(lambda: grpc_serving(address), f"{name} serving")
    return address


def start_second_gateway(stack: Stack, **env: str) -> str:
    """A second gateway (dialling the services `env` names); returns its URL."""
    port = str(free_port())
    name = next(f"gateway-{n}" for n in range(2, 100) if f"gateway-{n}" not in stack.processes)
    stack.start_one(name, "waybill.gateway.server", {**env, "WAYBILL_HTTP_PORT": port})
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_ok(url), f"{name} answering")
    return url


@dataclass
class TwoRunners:
    """A stack with a second runner process beside the first."""

    stack: Stack
    runners: dict[str, str]  # process name -> gRPC address

    def executing(self) -> str:
        """The runner process that started the (only) run."""
        started = [n for n, a in self.runners.items() if runner_stats(a)["runs_started"] > 0]
        assert len(started) == 1, started
        return started[0]

    def other_than(self, name: str) -> str:
        return next(n for n in self.runners if n != name)

    def stats(self, name: str) -> dict[str, int]:
        return runner_stats(self.runners[name])


@contextmanager
def two_runner_stack(
    data_dir: Path, database_url: str | None = None, lease_seconds: float = 2.0, **extra: str
) -> Iterator[TwoRunners]:
    """Short leases, so that takeovers in tests are quick; 2 s by default so that a
    busy machine does not make a healthy runner miss its renewals."""
    env = stack_env(data_dir, database_url, WAYBILL_LEASE_SECONDS=str(lease_seconds), **extra)
    second = f"127.0.0.1:{free_port()}"
    # The gateway reads graph state from whichever runner is alive.
    env["WAYBILL_RUNNER_READ_TARGET"] = f"ipv4:{env['WAYBILL_RUNNER_ADDR']},{second}"
    with running_stack(env, data_dir) as stack:
        stack.start_one("runner-2", "waybill.services.runner.server", replica_env("runner", second))
        wait_until(lambda: grpc_serving(second), "runner-2 serving")
        yield TwoRunners(stack, {"runner": stack.address_of("runner"), "runner-2": second})


def metrics_url(stack: Stack, service: str) -> str:
    """Where `service` (gateway, admission, runner, journal, delivery) serves /metrics."""
    if service == "gateway":
        return f"{stack.url}/metrics"
    return f"http://127.0.0.1:{stack.env[f'WAYBILL_{service.upper()}_METRICS_PORT']}/metrics"


def scrape(url: str) -> dict[str, float]:
    """One /metrics page as {'name{label="v",...}': value} (samples, labels sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples
