"""Admission replicas wake each other through Postgres LISTEN/NOTIFY.

A commit that gives runners something to do (a run admitted, cancelled,
released or finished) sends a notification in the same transaction; every
replica listens and wakes its dispatcher, or forwards the cancel order to the
runner it holds. With SQLite (one admission process) nothing is needed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from waybill.common.background import BackgroundLoop

log = logging.getLogger("waybill.admission.wakeups")

CHANNEL = "waybill_work"


# Who sent a notification: a replica acts on its own commits directly, so it
# skips its own notifications instead of handling them twice.
REPLICA_ID = uuid.uuid4().hex[:12]


async def notify(conn: AsyncConnection, payload: str) -> None:
    """Queue a notification; Postgres delivers it when the transaction commits."""
    if conn.dialect.name == "postgresql":
        await conn.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": CHANNEL, "payload": f"{REPLICA_ID}|{payload}"},
        )


def wake_payload() -> str:
    return "wake"


def cancel_payload(run_id: str, action: str) -> str:
    return f"cancel:{run_id}:{action}"


def crons_payload() -> str:
    """A cron was created or changed: schedulers re-read their next due time."""
    return "crons"


class WakeupListener:
    """Holds one LISTEN connection and reconnects it if it drops."""

    def __init__(
        self,
        database_url: str,
        on_wake: Callable[[], None],
        on_cancel: Callable[[str, str], object],
        reconnect_seconds: float = 1.0,
        on_crons: Callable[[], None] | None = None,
    ) -> None:
        self.dsn = database_url.replace("postgresql+asyncpg://", "postgresql://")
        self.on_wake = on_wake
        self.on_cancel = on_cancel
        self.reconnect_seconds = reconnect_seconds
        self.on_crons = on_crons
        # One pass listens until the connection is lost: stopping ends it at once.
        self.loop = BackgroundLoop(
            "wakeup-listener",
            self.listen_until_lost,
            log=log,
            retry_seconds=reconnect_seconds,
            stop_seconds=0.0,
        )

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    def _received(self, _conn: Any, _pid: int, _channel: str, message: str) -> None:
        origin, _, payload = message.partition("|")
        if origin == REPLICA_ID:
            return
        kind, _, rest = payload.partition(":")
        if kind == "crons":  # the scheduler's business only
            if self.on_crons is not None:
                self.on_crons()
            return
        if kind == "cancel":
            run_id, _, action = rest.partition(":")
            self.on_cancel(run_id, action)
        self.on_wake()

    async def listen_until_lost(self) -> float:
        """Listen until the connection drops; then reconnect after a pause."""
        import asyncpg  # the `postgres` extra: a listener is Postgres only

        lost = asyncio.Event()
        conn = None
        try:
            conn = await asyncpg.connect(self.dsn)
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            await conn.add_listener(CHANNEL, self._received)
            self.on_wake()  # anything committed while we were not listening
            if self.on_crons is not None:
                self.on_crons()
            await lost.wait()
        except (OSError, asyncpg.PostgresError) as error:
            log.warning("wake-up listener lost (%s); reconnecting", error)
        finally:
            if conn is not None and not conn.is_closed():
                await conn.close()
        return self.reconnect_seconds
