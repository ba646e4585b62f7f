"""The Channels gRPC servicer, hosted by the delivery process, and its start-up:
the message router, one listener per channel that holds a connection, the upkeep."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import urllib.parse

import grpc
import httpx

from waybill.common import codec
from waybill.common.background import BackgroundLoop
from waybill.common.grpc_channels import PeerChannels
from waybill.common.settings import Settings
from waybill.services.delivery.channels.adapter import (
    ChannelAdapter,
    Delivery,
    PlatformCallFailed,
)
from waybill.services.delivery.channels.listening import ChannelListener
from waybill.services.delivery.channels.platforms import load_channels
from waybill.services.delivery.channels.routing import MessageRouter
from waybill.services.delivery.channels.store import ChannelStore
from waybill.v1 import admission_pb2_grpc, channels_pb2, channels_pb2_grpc, journal_pb2_grpc

log = logging.getLogger("waybill.channels")


class ChannelsServicer(channels_pb2_grpc.ChannelsServicer):
    def __init__(self, router: MessageRouter) -> None:
        self.router = router

    async def Receive(
        self, request: channels_pb2.InboundDelivery, context: grpc.aio.ServicerContext
    ) -> channels_pb2.InboundReply:
        delivery = Delivery(
            headers={header.name.lower(): header.value for header in request.headers},
            body=request.body,
            method=request.method or "POST",
            query=dict(urllib.parse.parse_qsl(request.query, keep_blank_values=True)),
        )
        answer = await self.router.receive(request.platform, request.channel, delivery)
        if answer.text is not None:
            return channels_pb2.InboundReply(
                http_status=200, body_json=answer.text.encode(), content_type="text/plain"
            )
        return channels_pb2.InboundReply(http_status=200, body_json=codec.dumps(answer.body))

    async def Check(
        self, request: channels_pb2.ChannelCheckRequest, context: grpc.aio.ServicerContext
    ) -> channels_pb2.ChannelCheckReply:
        adapters = list(self.router.adapters.values())
        found = await asyncio.gather(*(_checked(adapter) for adapter in adapters))
        return channels_pb2.ChannelCheckReply(
            channels=[
                channels_pb2.ChannelCheck(
                    channel=adapter.spec.name, platform=adapter.platform, ok=ok, detail=detail
                )
                for adapter, (ok, detail) in zip(adapters, found, strict=True)
            ]
        )


async def _checked(adapter: ChannelAdapter) -> tuple[bool, str]:
    """One platform's verdict on its channel; never a secret in the detail."""
    timeout = adapter.settings.channel_http_timeout_seconds
    try:
        return True, await asyncio.wait_for(adapter.check(), timeout)
    except PlatformCallFailed as error:
        return False, str(error)
    except TimeoutError:
        return False, f"{adapter.platform}: no answer in {timeout:g} s"
    except Exception as error:  # a check must answer, whatever the platform did
        return False, f"{adapter.platform}: {type(error).__name__}"


class ChannelsService:
    """The message router and its background work (pollers, replies); its peers' channels
    are the delivery process's, closed by it."""

    def __init__(self, settings: Settings, store: ChannelStore, peers: PeerChannels) -> None:
        # The platform URLs carry bot tokens (Telegram's path): httpx logs every
        # request URL at INFO, so its loggers stay at WARNING.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        specs = load_channels(settings)
        self.http = httpx.AsyncClient(timeout=settings.channel_http_timeout_seconds)
        self.router = MessageRouter(
            settings,
            specs,
            store,
            admission_pb2_grpc.AdmissionStub(peers.admission()),
            journal_pb2_grpc.JournalStub(peers.journal()),
            self.http,
        )
        self.listeners = [
            ChannelListener(adapter, self.router, store, settings)
            for adapter in self.router.adapters.values()
            if adapter.listens()
        ]
        self.settings = settings
        self.store = store
        self.upkeep = BackgroundLoop(
            "channels-upkeep",
            self.upkeep_pass,
            log=log,
            retry_seconds=settings.channel_reply_sweep_seconds,
            traceback_on_error=False,  # a platform call's error may carry a bot token
        )
        self._forgotten_at = -math.inf
        if specs:
            log.info("channels: %s", ", ".join(f"{s.name} ({s.platform})" for s in specs.values()))

    def register(self, server: grpc.aio.Server) -> None:
        channels_pb2_grpc.add_ChannelsServicer_to_server(ChannelsServicer(self.router), server)

    def start(self) -> None:
        for listener in self.listeners:
            listener.start()
        if self.router.adapters:
            self.upkeep.start()

    async def upkeep_pass(self) -> float:
        """Answers a dead replica was streaming are resumed here; old event ids
        are forgotten now and then."""
        await self.router.adopt_orphans()
        if time.monotonic() - self._forgotten_at >= self.settings.channel_dedupe_sweep_seconds:
            await self.store.forget_events(self.settings.channel_dedupe_seconds)
            self._forgotten_at = time.monotonic()
        return self.settings.channel_reply_sweep_seconds

    async def stop(self) -> None:
        await asyncio.gather(self.upkeep.stop(), *(listener.stop() for listener in self.listeners))
        await self.router.close()
        await self.http.aclose()
