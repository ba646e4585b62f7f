"""The multi-replica profile: 2 gateways, 2 admission, 2 runners, 2 journals and
1 delivery as real processes on one Postgres and one Redis.

Wiring (so that every request crosses replicas somewhere): runner-i holds its work
stream to admission-i and appends to journal-i; gateway-i talks to admission-i and
journal-i; both gateways read graph state from either runner. A run admitted
through gateway-1 may execute on runner-2 (admission replicas wake each other's
runners) and be streamed through gateway-2 (journal fan-out through Redis).
"""

from __future__ import annotations

import random
import signal
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from tests.support.helpers import Frame, sse
from tests.support.stacks import (
    SHARED_REDIS,
    drop_redis_keys,
    free_port,
    fresh_postgres_database,
    http_ok,
    replica_env,
    running_stack,
    scrape,
    stack_env,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving


@dataclass
class Replica:
    name: str
    module: str
    env: dict[str, str]  # what it has beside the stack's env
    metrics: str  # its /metrics URL
    address: str  # its gRPC address


@dataclass
class ScaledStack:
    stack: Stack
    database_url: str
    gateways: list[str]  # URLs
    replicas: dict[str, Replica] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(8))

    def gateway(self) -> str:
        """A gateway picked at random: no request relies on a sticky session."""
        return self.rng.choice(self.gateways)

    def runners(self) -> list[str]:
        return [name for name in self.replicas if name.startswith("runner")]

    def kill(self, name: str) -> None:
        """SIGKILL: no drain, no hand-back; its leases must expire and be taken over."""
        process = self.stack.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def restart(self, name: str) -> None:
        replica = self.replicas[name]
        self.stack.start_one(name, replica.module, replica.env)
        if name.startswith("gateway"):
            wait_until(lambda: http_ok(replica.address), f"{name} answering", 60)
        else:
            wait_until(lambda: grpc_serving(replica.address), f"{name} serving", 60)

    def of(self, service: str) -> list[str]:
        """The process names of every replica of `service`."""
        return [name for name in self.replicas if name.startswith(service)]

    def metrics(self, service: str) -> list[dict[str, float]]:
        """Every replica of `service`'s /metrics page."""
        return [scrape(r.metrics) for n, r in self.replicas.items() if n.startswith(service)]

    def total(self, service: str, sample: str) -> float:
        return sum(page.get(sample, 0.0) for page in self.metrics(service))

    def sql(self, query: str, *args: object) -> list[tuple[object, ...]]:
        """Read the shared database directly: the test checks the facts themselves."""
        url = self.database_url.replace("postgresql+asyncpg://", "postgresql://")
        with psycopg.connect(url) as conn:
            return list(conn.execute(query, args).fetchall())  # type: ignore[arg-type]


def _metrics_url(env: dict[str, str], service: str) -> str:
    return f"http://127.0.0.1:{env[f'WAYBILL_{service.upper()}_METRICS_PORT']}/metrics"


@contextmanager
def scaled_stack(
    data_dir: Path,
    lease_seconds: float = 2.0,
    database_url: str | None = None,
    redis_url: str = SHARED_REDIS,
    **extra: str,
) -> Iterator[ScaledStack]:
    """On a fresh database of the shared Postgres and a key prefix of the shared
    Redis, unless given a database and a Redis (the soak's own, which it restarts)."""
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    runner_2 = f"127.0.0.1:{free_port()}"
    with ExitStack() as cleanup:
        url = database_url or cleanup.enter_context(fresh_postgres_database())
        env = stack_env(
            data_dir,
            url,
            WAYBILL_REDIS_URL=redis_url,
            WAYBILL_JOURNAL_REDIS_PREFIX=prefix,
            WAYBILL_LEASE_SECONDS=str(lease_seconds),
            **extra,
        )
        env["WAYBILL_RUNNER_READ_TARGET"] = f"ipv4:{env['WAYBILL_RUNNER_ADDR']},{runner_2}"
        try:
            with running_stack(env, data_dir) as stack:
                yield _grow(stack, env, url, runner_2)
        finally:
            drop_redis_keys(redis_url, prefix)


def _grow(stack: Stack, env: dict[str, str], url: str, runner_2: str) -> ScaledStack:
    """Start the second replica of every replicated service beside the first."""
    scaled = ScaledStack(stack, url, [stack.url])
    scaled.replicas["gateway"] = Replica(
        "gateway", "waybill.gateway.server", {}, f"{stack.url}/metrics", stack.url
    )
    for service in ("admission", "runner", "journal", "delivery"):
        scaled.replicas[service] = Replica(
            service,
            f"waybill.services.{service}.server",
            {},
            _metrics_url(env, service),
            stack.address_of(service),
        )
    journal_2 = replica_env("journal", f"127.0.0.1:{free_port()}")
    admission_2 = replica_env("admission", f"127.0.0.1:{free_port()}")
    runner_env = {
        **replica_env("runner", runner_2),
        "WAYBILL_ADMISSION_ADDR": admission_2["WAYBILL_ADMISSION_ADDR"],
        "WAYBILL_JOURNAL_ADDR": journal_2["WAYBILL_JOURNAL_ADDR"],
    }
    for name, service, extra in (
        ("journal-2", "journal", journal_2),
        ("admission-2", "admission", admission_2),
        ("runner-2", "runner", runner_env),
    ):
        module = f"waybill.services.{service}.server"
        address = extra[f"WAYBILL_{service.upper()}_ADDR"]
        scaled.replicas[name] = Replica(name, module, extra, _metrics_url(extra, service), address)
        scaled.restart(name)
    port = free_port()
    gateway_2 = f"http://127.0.0.1:{port}"
    gateway_env = {
        "WAYBILL_HTTP_PORT": str(port),
        "WAYBILL_ADMISSION_ADDR": admission_2["WAYBILL_ADMISSION_ADDR"],
        "WAYBILL_JOURNAL_ADDR": journal_2["WAYBILL_JOURNAL_ADDR"],
    }
    scaled.replicas["gateway-2"] = Replica(
        "gateway-2", "waybill.gateway.server", gateway_env, f"{gateway_2}/metrics", gateway_2
    )
    scaled.restart("gateway-2")
    scaled.gateways.append(gateway_2)
    return scaled


async def join(
    scaled: ScaledStack, thread_id: str, run_id: str, last_event_id: str, limit: int | None = None
) -> list[Frame]:
    """Join a run's stream through a random gateway; stop after `limit` frames."""
    frames: list[Frame] = []
    async with (
        httpx.AsyncClient(base_url=scaled.gateway(), timeout=60) as http,
        http.stream(
            "GET",
            f"/threads/{thread_id}/runs/{run_id}/stream",
            headers={"Last-Event-ID": last_event_id},
        ) as response,
    ):
        assert response.status_code == 200
        async for frame in sse(response):
            frames.append(frame)
            if limit is not None and len(frames) >= limit:
                break
    return frames
