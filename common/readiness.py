"""Readiness: whether the installation can serve a run now.

Every service serves the standard gRPC health service (and, with
`WAYBILL_<SERVICE>_HEALTH_PORT`, serves it alone on a plaintext port for probes).
A runner also reports `RUNNER_WORK_HEALTH`: SERVING while its work stream to
admission is open (admission took its hello), so that a run admitted now will be
taken. The gateway's `/ok` asks its peers (`peer_health`) and answers 200 only when all are ready.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

RUNNER_WORK_HEALTH = "waybill.v1.Runner.work"


async def serve_health_port(servicer: health.aio.HealthServicer, address: str) -> grpc.aio.Server:
    """A plaintext server for the health service alone, sharing the main server's
    statuses. Kubelet's gRPC probes present no client certificate, so with mutual
    TLS on the main port they probe here; nothing but a status is served."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(address)
    await server.start()
    return server


async def serving(channel: grpc.aio.Channel, service: str, deadline_seconds: float) -> bool:
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=deadline_seconds
        )
    except grpc.aio.AioRpcError:  # unreachable, or the service is not known (yet)
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def peer_health(
    checks: dict[str, tuple[grpc.aio.Channel, str]], deadline_seconds: float
) -> dict[str, str]:
    """{peer: "healthy" | "unhealthy"} for each (channel, health service name)."""
    results = await asyncio.gather(
        *(serving(channel, service, deadline_seconds) for channel, service in checks.values())
    )
    return {
        name: "healthy" if ok else "unhealthy" for name, ok in zip(checks, results, strict=True)
    }


class WorkHealth:
    """A runner's `RUNNER_WORK_HEALTH`, kept in step with its work stream."""

    def __init__(self) -> None:
        self.connected = False
        self._servicer: health.aio.HealthServicer | None = None
        self._updates: set[asyncio.Task[None]] = set()

    async def attach(self, servicer: health.aio.HealthServicer) -> None:
        """Once the runner's health service runs: publish the current state."""
        self._servicer = servicer
        await self._publish()

    def set_connected(self, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        if self._servicer is not None:
            update = asyncio.ensure_future(self._publish())
            self._updates.add(update)
            update.add_done_callback(self._updates.discard)

    async def _publish(self) -> None:
        # Reads the state when it runs: the last one published is always the latest.
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.connected
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        if self._servicer is not None:
            await self._servicer.set(RUNNER_WORK_HEALTH, status)
