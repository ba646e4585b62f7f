"""gRPC stubs the gateway talks to, and the one place gRPC errors become HTTP errors."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from fastapi import HTTPException

from waybill.common.errors import http_status_for
from waybill.common.grpc_channels import open_channel, round_robin
from waybill.common.readiness import RUNNER_WORK_HEALTH, peer_health
from waybill.common.settings import Settings
from waybill.gateway.auth import principal_interceptors
from waybill.v1 import (
    admission_pb2_grpc,
    channels_pb2_grpc,
    delivery_pb2_grpc,
    journal_pb2_grpc,
    runner_pb2_grpc,
)

T = TypeVar("T")


@dataclass
class Peers:
    admission: admission_pb2_grpc.AdmissionStub
    runner: runner_pb2_grpc.RunnerStub
    journal: journal_pb2_grpc.JournalStub
    delivery: delivery_pb2_grpc.DeliveryStub
    channels: list[grpc.aio.Channel]
    # Chat platforms' deliveries, served by the delivery process.
    inbound: channels_pb2_grpc.ChannelsStub

    @classmethod
    def connect(cls, settings: Settings) -> Peers:
        # Every call carries the principal of the request it serves.
        interceptors = principal_interceptors()
        runner_reads = round_robin(
            settings.runner_read_target or settings.runner_addr,
            options=[("grpc.service_config", read_retries(settings.runner_read_backoff_seconds))],
            interceptors=interceptors,
        )
        channels = [
            open_channel(settings.admission_addr, interceptors=interceptors),
            runner_reads,
            open_channel(settings.journal_addr, interceptors=interceptors),
            open_channel(settings.delivery_addr, interceptors=interceptors),
        ]
        return cls(
            admission=admission_pb2_grpc.AdmissionStub(channels[0]),
            runner=runner_pb2_grpc.RunnerStub(channels[1]),
            journal=journal_pb2_grpc.JournalStub(channels[2]),
            delivery=delivery_pb2_grpc.DeliveryStub(channels[3]),
            channels=channels,
            inbound=channels_pb2_grpc.ChannelsStub(channels[3]),
        )

    async def health(self, deadline_seconds: float) -> dict[str, str]:
        """Each peer's readiness; the runner's is its work stream to admission being open."""
        return await peer_health(
            {
                "admission": (self.channels[0], ""),
                "runner": (self.channels[1], RUNNER_WORK_HEALTH),
                "journal": (self.channels[2], ""),
                "delivery": (self.channels[3], ""),
            },
            deadline_seconds,
        )

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


# Graph-side reads any runner can answer: one refused because its runner just
# died (UNAVAILABLE) is tried again on another, instead of failing the request.
RUNNER_READS = (
    "GetThreadState",
    "GetThreadHistory",
    "GetGraph",
    "GetSchemas",
    "GetSubgraphs",
    "StoreGet",
    "StoreSearch",
    "StoreListNamespaces",
)


def read_retries(backoff_seconds: float) -> str:
    """gRPC service config: retry the runner reads on UNAVAILABLE, up to 4 tries."""
    policy = {
        "maxAttempts": 4,
        "initialBackoff": f"{backoff_seconds:.3f}s",
        "maxBackoff": f"{backoff_seconds * 8:.3f}s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    names = [{"service": "waybill.v1.Runner", "method": method} for method in RUNNER_READS]
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


async def call(pending: Awaitable[T]) -> T:
    """Await a unary gRPC call; a service's refusal becomes the matching HTTP error."""
    try:
        return await pending
    except grpc.aio.AioRpcError as error:
        details = error.details() or ""
        raise HTTPException(http_status_for(error.code(), details), details) from error
