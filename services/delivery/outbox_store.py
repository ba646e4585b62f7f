"""The webhook outbox, its attempts, and the subscriptions that fill it.

A row's life (one transition each, every one a conditional UPDATE, so that two
delivery replicas never both act on a row):

| from    | event                                   | to         |
|---------|-----------------------------------------|------------|
| held    | the run's terminal status is confirmed  | pending    |
| held    | a newer epoch ended the run             | superseded |
| pending | an attempt got a 2xx                    | delivered  |
| pending | an attempt failed, time left            | pending (next_attempt_at later) |
| pending | an attempt failed, retry time is over   | failed     |
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common.errors import not_found
from waybill.services.delivery.tables import (
    webhook_attempts,
    webhook_deliveries,
    webhook_subscriptions,
)


@dataclass
class DeliveryRow:
    delivery_id: str
    run_id: str
    thread_id: str
    epoch: int
    url: str
    source: str
    state: str
    payload: bytes
    values_json: bytes
    receipt_json: bytes
    attempts: int
    next_attempt_at: datetime | None
    claimed_until: datetime | None
    created_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> DeliveryRow:
        return cls(**row._mapping)


@dataclass
class AttemptRow:
    attempt_id: str
    delivery_id: str
    attempt: int
    sent_at: datetime
    status_code: int
    error: str


@dataclass
class SubscriptionRow:
    subscription_id: str
    scope: str
    scope_id: str
    url: str
    owner_id: str
    created_at: datetime


class OutboxStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    # ---- held -> pending | superseded -------------------------------------------

    async def held(self, run_id: str, epoch: int) -> list[DeliveryRow]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(webhook_deliveries).where(
                        webhook_deliveries.c.run_id == run_id,
                        webhook_deliveries.c.epoch == epoch,
                        webhook_deliveries.c.state == "held",
                    )
                )
            ).all()
        return [DeliveryRow.from_row(row) for row in rows]

    async def held_before(self, moment: datetime, limit: int = 100) -> list[DeliveryRow]:
        """Held rows created before `moment`: their runner may never confirm."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(webhook_deliveries)
                    .where(
                        webhook_deliveries.c.state == "held",
                        webhook_deliveries.c.created_at < moment,
                    )
                    .order_by(webhook_deliveries.c.created_at)
                    .limit(limit)
                )
            ).all()
        return [DeliveryRow.from_row(row) for row in rows]

    async def release(self, delivery_id: str, payload: bytes, now: datetime) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(webhook_deliveries)
                .where(
                    webhook_deliveries.c.delivery_id == delivery_id,
                    webhook_deliveries.c.state == "held",
                )
                .values(state="pending", payload=payload, next_attempt_at=now)
            )
        return bool(result.rowcount)

    async def supersede(self, delivery_id: str, now: datetime) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(webhook_deliveries)
                .where(
                    webhook_deliveries.c.delivery_id == delivery_id,
                    webhook_deliveries.c.state == "held",
                )
                .values(state="superseded", finished_at=now)
            )

    # ---- pending -> attempts -> delivered | failed ------------------------------

    async def next_due(self, now: datetime) -> datetime | None:
        """When the next pending row may be claimed here: its next attempt's time,
        or, while another replica holds its claim, the claim's end (a row claimed
        elsewhere is not due here however late its attempt is)."""
        claimable_at = case(
            (
                and_(
                    webhook_deliveries.c.claimed_until.is_not(None),
                    webhook_deliveries.c.claimed_until > webhook_deliveries.c.next_attempt_at,
                ),
                webhook_deliveries.c.claimed_until,
            ),
            else_=webhook_deliveries.c.next_attempt_at,
        )
        async with self.engine.connect() as conn:
            return (  # type: ignore[no-any-return]
                await conn.execute(
                    select(func.min(claimable_at)).where(webhook_deliveries.c.state == "pending")
                )
            ).scalar()

    async def claim_due(self, now: datetime, hold: timedelta, limit: int) -> list[DeliveryRow]:
        """Due rows nobody else is sending; each claimed until now + hold."""
        free = or_(
            webhook_deliveries.c.claimed_until.is_(None),
            webhook_deliveries.c.claimed_until < now,
        )
        due = and_(
            webhook_deliveries.c.state == "pending",
            webhook_deliveries.c.next_attempt_at <= now,
            free,
        )
        async with self.engine.connect() as conn:
            candidates = (
                await conn.execute(
                    select(webhook_deliveries.c.delivery_id)
                    .where(due)
                    .order_by(webhook_deliveries.c.next_attempt_at)
                    .limit(limit)
                )
            ).scalars()
            ids = list(candidates)
        claimed = []
        for delivery_id in ids:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(webhook_deliveries)
                    .where(webhook_deliveries.c.delivery_id == delivery_id, due)
                    .values(claimed_until=now + hold)
                    .returning(*webhook_deliveries.c)
                )
                row = result.first()
            if row is not None:
                claimed.append(DeliveryRow.from_row(row))
        return claimed

    async def begin_attempt(self, row: DeliveryRow, now: datetime) -> AttemptRow:
        """Count the attempt before it is sent: a crash mid-send still shows it."""
        attempt = AttemptRow(str(uuid.uuid4()), row.delivery_id, row.attempts + 1, now, 0, "")
        async with self.engine.begin() as conn:
            await conn.execute(insert(webhook_attempts).values(**attempt.__dict__))
            await conn.execute(
                update(webhook_deliveries)
                .where(webhook_deliveries.c.delivery_id == row.delivery_id)
                .values(attempts=attempt.attempt)
            )
        return attempt

    async def finish_attempt(
        self,
        attempt: AttemptRow,
        state: str,
        next_attempt_at: datetime | None,
        now: datetime,
    ) -> None:
        finished = now if state in ("delivered", "failed") else None
        async with self.engine.begin() as conn:
            await conn.execute(
                update(webhook_attempts)
                .where(webhook_attempts.c.attempt_id == attempt.attempt_id)
                .values(status_code=attempt.status_code, error=attempt.error)
            )
            await conn.execute(
                update(webhook_deliveries)
                .where(
                    webhook_deliveries.c.delivery_id == attempt.delivery_id,
                    webhook_deliveries.c.state == "pending",
                )
                .values(
                    state=state,
                    next_attempt_at=next_attempt_at,
                    claimed_until=None,
                    finished_at=finished,
                )
            )

    # ---- reads ------------------------------------------------------------------

    async def for_run(self, run_id: str) -> list[tuple[DeliveryRow, list[AttemptRow]]]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(webhook_deliveries)
                    .where(webhook_deliveries.c.run_id == run_id)
                    .order_by(webhook_deliveries.c.epoch, webhook_deliveries.c.created_at)
                )
            ).all()
            deliveries = [DeliveryRow.from_row(row) for row in rows]
            ids = [d.delivery_id for d in deliveries]
            attempt_rows = (
                await conn.execute(
                    select(webhook_attempts)
                    .where(webhook_attempts.c.delivery_id.in_(ids))
                    .order_by(webhook_attempts.c.attempt)
                )
            ).all()
        attempts: dict[str, list[AttemptRow]] = {}
        for row in attempt_rows:
            attempts.setdefault(row.delivery_id, []).append(AttemptRow(**row._mapping))
        return [(d, attempts.get(d.delivery_id, [])) for d in deliveries]

    # ---- subscriptions -----------------------------------------------------------

    async def subscribe(self, subscription: SubscriptionRow) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(webhook_subscriptions).values(**subscription.__dict__))

    async def subscriptions(self, scope: str, scope_id: str) -> list[SubscriptionRow]:
        return await self.subscriptions_of([(scope, scope_id)])

    async def subscriptions_of(self, scopes: list[tuple[str, str]]) -> list[SubscriptionRow]:
        """The subscriptions of every (scope, scope id), in `scopes`' order and, within
        a scope, oldest first; one statement (every receipt asks)."""
        if not scopes:
            return []
        table = webhook_subscriptions
        wanted = [and_(table.c.scope == scope, table.c.scope_id == one) for scope, one in scopes]
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(select(table).where(or_(*wanted)).order_by(table.c.created_at))
            ).all()
        found = [SubscriptionRow(**row._mapping) for row in rows]
        order = {scope: index for index, scope in enumerate(scopes)}
        return sorted(found, key=lambda row: order[(row.scope, row.scope_id)])

    async def unsubscribe(self, scope: str, scope_id: str, subscription_id: str) -> None:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                webhook_subscriptions.delete().where(
                    webhook_subscriptions.c.subscription_id == subscription_id,
                    webhook_subscriptions.c.scope == scope,
                    webhook_subscriptions.c.scope_id == scope_id,
                )
            )
        if not result.rowcount:
            raise not_found(f"Subscription {subscription_id} not found.")
