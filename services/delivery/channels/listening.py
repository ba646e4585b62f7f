"""Inbound connections held once per cluster: Telegram long polling, Discord's
gateway WebSocket, Matrix's sync loop, any adapter whose `listens()` is true.

Each such channel has a lease row in the database; only its holder listens,
and it keeps its position (an offset, a sync token, a session and sequence) in
the same row after every message it took, so a new leader, or the same one
after a dropped connection, goes on where the last one stopped. The lease is
renewed while the connection is held; should two leaders overlap anyway (a
stalled process), the inbound dedupe still starts each message's run once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from waybill.common.background import BackgroundLoop
from waybill.common.settings import Settings
from waybill.services.delivery.channels.adapter import (
    ChannelAdapter,
    InboundMessage,
    PlatformCallFailed,
)
from waybill.services.delivery.channels.routing import MessageRouter
from waybill.services.delivery.channels.store import HOLDER, ChannelStore

log = logging.getLogger("waybill.channels")


class ChannelListener:
    def __init__(
        self,
        adapter: ChannelAdapter,
        router: MessageRouter,
        store: ChannelStore,
        settings: Settings,
    ) -> None:
        self.adapter = adapter
        self.router = router
        self.store = store
        self.lease = f"listen:{adapter.spec.name}"
        self.lease_seconds = settings.channel_leader_seconds
        self.retry_seconds = settings.channel_poll_retry_seconds
        # A connection in progress is dropped at once on stop: the position moves
        # on only past messages already taken, so the next leader gets the rest.
        self.loop = BackgroundLoop(
            self.lease,
            self.listen_round,
            log=log,
            retry_seconds=self.retry_seconds,
            stop_seconds=0.0,
            traceback_on_error=False,  # the platform URL may carry the bot token
        )

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        """Stop listening and give up the lease, so another replica leads at once."""
        await self.loop.stop()
        try:
            await self.store.drop_lease(self.lease, HOLDER)
        except Exception as error:  # the database may be restarting: the lease expires
            log.warning("%s: lease not dropped: %s", self.lease, type(error).__name__)

    async def listen_round(self) -> float:
        """Lead and listen until the connection ends; then pause and try again."""
        try:
            position = await self.store.hold_lease(self.lease, HOLDER, self.lease_seconds)
        except Exception as error:  # the database may be restarting
            log.warning("%s: lease unavailable: %s", self.lease, type(error).__name__)
            return self.retry_seconds
        if position is None:
            return self.retry_seconds  # another replica leads
        listening = asyncio.create_task(self.adapter.listen(position, self.deliver))
        holding = asyncio.create_task(self.hold())
        try:
            await asyncio.wait({listening, holding}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (listening, holding):
                task.cancel()
            await asyncio.gather(listening, holding, return_exceptions=True)
        if listening.done() and not listening.cancelled():
            ended = listening.exception()
            if isinstance(ended, PlatformCallFailed):
                log.warning("%s: %s", self.lease, ended)
            elif ended is not None:
                log.warning("%s: connection ended: %s", self.lease, type(ended).__name__)
        return self.retry_seconds

    async def hold(self) -> None:
        """Renew the lease while listening; return when it is lost."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            with contextlib.suppress(Exception):  # the database is away: try again soon
                if await self.store.hold_lease(self.lease, HOLDER, self.lease_seconds) is None:
                    return

    async def deliver(self, message: InboundMessage | None, position: str) -> bool:
        """Take a message (a failure ends the connection before the position moves,
        so the message comes again), then record the position after it."""
        if message is not None:
            await self.router.take(self.adapter, message)
        return await self.store.advance_lease(self.lease, HOLDER, position)
