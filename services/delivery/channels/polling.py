"""Telegram long polling, once per cluster.

Each polling channel has a lease row in the database; only its holder calls
`getUpdates`, and it keeps the next offset in the same row, so a new leader
goes on where the old one stopped. A poll waits at most half the lease, so the
leader renews it in time; should two leaders overlap anyway (a stalled
process), the inbound dedupe still starts each message's run once.
"""

from __future__ import annotations

import logging

from waybill.common.background import BackgroundLoop
from waybill.common.settings import Settings
from waybill.services.delivery.channels.adapter import InboundMessage, PlatformCallFailed
from waybill.services.delivery.channels.dispatch import ChannelDispatcher
from waybill.services.delivery.channels.store import HOLDER, ChannelStore
from waybill.services.delivery.channels.telegram import TelegramAdapter

log = logging.getLogger("waybill.channels")


class TelegramPoller:
    def __init__(
        self,
        adapter: TelegramAdapter,
        dispatcher: ChannelDispatcher,
        store: ChannelStore,
        settings: Settings,
    ) -> None:
        self.adapter = adapter
        self.dispatcher = dispatcher
        self.store = store
        self.lease = f"telegram-poll:{adapter.spec.name}"
        self.lease_seconds = settings.channel_leader_seconds
        self.wait_seconds = min(settings.channel_poll_seconds, self.lease_seconds / 2)
        self.retry_seconds = settings.channel_poll_retry_seconds

        # A poll in progress is dropped at once on stop: the offset moves on only
        # past updates already taken, so the next leader fetches the rest again.
        self.loop = BackgroundLoop(
            self.lease,
            self.poll_round,
            log=log,
            retry_seconds=self.retry_seconds,
            stop_seconds=0.0,
            traceback_on_error=False,  # the platform URL carries the bot token
        )

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        """Stop polling and give up the lease, so another replica leads at once."""
        await self.loop.stop()
        try:
            await self.store.drop_lease(self.lease, HOLDER)
        except Exception as error:  # the database may be restarting: the lease expires
            log.warning("%s: lease not dropped: %s", self.lease, type(error).__name__)

    async def poll_round(self) -> float:
        """Poll again at once after a round as leader; else after a pause."""
        return 0.0 if await self.poll_once() else self.retry_seconds

    async def poll_once(self) -> bool:
        """One round as leader; False when not the leader or the round failed."""
        try:
            cursor = await self.store.hold_lease(self.lease, HOLDER, self.lease_seconds)
        except Exception as error:  # the database may be restarting
            log.warning("%s: lease unavailable: %s", self.lease, type(error).__name__)
            return False
        if cursor is None:
            return False
        try:
            updates = await self.adapter.updates(cursor, self.wait_seconds)
        except PlatformCallFailed as error:
            log.warning("%s: %s", self.lease, error)
            return False
        for update in sorted(updates, key=lambda u: int(u.get("update_id", 0))):
            parsed = self.adapter.message_of(update)
            if isinstance(parsed, InboundMessage):
                try:
                    await self.dispatcher.take(self.adapter, parsed)
                except Exception as error:  # not taken: poll it again later
                    log.warning("%s: update not taken: %s", self.lease, type(error).__name__)
                    return False
            cursor = max(cursor, int(update.get("update_id", 0)) + 1)
            if not await self.store.advance_lease(self.lease, HOLDER, cursor):
                return False  # another replica leads now
        return True
