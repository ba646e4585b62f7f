"""gRPC stubs the gateway talks to, and the one place gRPC errors become HTTP errors."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from fastapi import HTTPException

from waybill.common.errors import QUOTA_TRAILER, http_status_for
from waybill.common.grpc_channels import PeerChannels
from waybill.common.readiness import RUNNER_WORK_HEALTH, peer_health
from waybill.common.settings import Settings
from waybill.gateway.auth import principal_interceptors
from waybill.gateway.errors import QuotaRefused
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
    channels: PeerChannels
    # Chat platforms' deliveries, served by the delivery process.
    inbound: channels_pb2_grpc.ChannelsStub

    @classmethod
    def connect(cls, settings: Settings) -> Peers:
        # Every call carries the principal of the request it serves.
        channels = PeerChannels(settings, principal_interceptors())
        return cls(
            admission=admission_pb2_grpc.AdmissionStub(channels.admission()),
            runner=runner_pb2_grpc.RunnerStub(channels.runner_reads()),
            journal=journal_pb2_grpc.JournalStub(channels.journal()),
            delivery=delivery_pb2_grpc.DeliveryStub(channels.delivery()),
            channels=channels,
            inbound=channels_pb2_grpc.ChannelsStub(channels.delivery()),
        )

    async def health(self, deadline_seconds: float) -> dict[str, str]:
        """Each peer's readiness; the runner's is its work stream to admission being open."""
        return await peer_health(
            {
                "admission": (self.channels.admission(), ""),
                "runner": (self.channels.runner_reads(), RUNNER_WORK_HEALTH),
                "journal": (self.channels.journal(), ""),
                "delivery": (self.channels.delivery(), ""),
            },
            deadline_seconds,
        )

    async def close(self) -> None:
        await self.channels.close()


async def call(pending: Awaitable[T]) -> T:
    """Await a unary gRPC call; a service's refusal becomes the matching HTTP error."""
    try:
        return await pending
    except grpc.aio.AioRpcError as error:
        details = error.details() or ""
        refusal = quota_refusal_of(error)
        if refusal is not None:
            raise QuotaRefused(details, refusal) from error
        raise HTTPException(http_status_for(error.code(), details), details) from error


def quota_refusal_of(error: grpc.aio.AioRpcError) -> dict[str, Any] | None:
    """A quota refusal's limit, value, use and wait (admission's trailer), if it is one."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == QUOTA_TRAILER and isinstance(value, str):
            found: dict[str, Any] = json.loads(value)
            return found
    return None
