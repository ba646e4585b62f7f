"""Quotas at the choke point: the YAML `quotas` limits, checked and reserved in
the transaction that admits a run.

Every admit of a run whose owner has limits first writes the owner's row of
`quota_principals` (and, on Postgres, locks it FOR UPDATE). That write is the
transaction's first statement, so on both databases the admits of one owner take
turns across every admission replica: Postgres queues them on the row lock, and
SQLite's one writer lock is taken by that first write (no snapshot read before
it, so the wait is SQLite's busy handler, never a stale-snapshot failure). The
counts read after it include every run the previous turn committed, so two
replicas never admit more than the limit between them.

A run counts against its owner: the user whose thread it runs on, as the token
ledger charges it. Limits over an owner are the `default`, then their role's,
then their own (`QuotasSection.limits_for`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter, Gauge
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common.config_file import QuotaLimits, QuotasSection
from waybill.common.errors import forbidden, invalid, over_quota
from waybill.common.identity import Principal
from waybill.common.settings import Settings
from waybill.common.statuses import ACTIVE_RUN_STATUSES, RunStatus
from waybill.services.admission.crons.schedule_clock import SystemClock, clock_for
from waybill.services.admission.tables import quota_principals, runs, token_usage

QUOTA_REFUSALS = Counter(
    "waybill_quota_refusals", "Run creations refused over a quota, by limit.", ["limit"]
)
QUOTA_USE = Gauge(
    "waybill_quota_use",
    "The use the latest admission check found, by limit, for the owner it checked.",
    ["limit"],
)

# The limits admission checks (the run budget and the gateway's are others').
ADMISSION_LIMITS = (
    "max_active_runs",
    "max_pending_runs",
    "runs_per_minute",
    "tokens_per_day",
    "cost_per_day",
)


def checked_by_admission(limits: QuotaLimits) -> bool:
    """True when admitting a run of these limits needs the owner's turn."""
    return any(getattr(limits, name) is not None for name in ADMISSION_LIMITS)


@dataclass(frozen=True)
class Refusal:
    """Which limit a creation is over: its value, the use found, and how long to
    wait until it may pass (None where no wait helps)."""

    limit: str
    value: float
    use: float
    retry_after: float | None

    def as_error(self, owner_id: str) -> Exception:
        body = {
            "limit": self.limit,
            "value": self.value,
            "use": self.use,
            "retry_after": None if self.retry_after is None else math.ceil(self.retry_after),
        }
        message = (
            f"Quota exceeded for {owner_id}: {self.limit} is {_shown(self.value)}, "
            f"and {_shown(self.use)} in use."
        )
        return over_quota(message, json.dumps(body))


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:.4f}"


@dataclass
class Spend:
    """An owner's ledger since the day's reset."""

    tokens: int
    cost: float


class QuotaGate:
    """The `quotas` section as admission applies it, on one clock."""

    def __init__(self, settings: Settings, clock: SystemClock | None = None) -> None:
        self.section: QuotasSection = settings.quotas()
        self.window_seconds = settings.quota_window_seconds
        self.clock = clock or clock_for(settings.quota_clock_file)
        # An owner's role, when the caller is not the owner (an admin on their thread).
        self.roles = {spec.user_id: spec.role for spec in settings.principals()}

    def limits_for(self, owner_id: str, caller_id: str | None, caller_role: str) -> QuotaLimits:
        role = caller_role if caller_id == owner_id else self.roles.get(owner_id, "user")
        return self.section.limits_for(owner_id, role)

    # ---- the admit's turn ------------------------------------------------------

    async def take_turn(self, conn: AsyncConnection, owner_ids: list[str]) -> None:
        """The first writes of an admit: each owner's row, in id order (Postgres:
        locked FOR UPDATE; two batches naming the same owners never wait in a circle)."""
        is_postgres = conn.dialect.name == "postgresql"
        insert = postgres_insert if is_postgres else sqlite_insert
        for owner_id in sorted(set(owner_ids)):
            await conn.execute(
                insert(quota_principals)
                .values(principal_id=owner_id, rate_arrival=0.0)
                .on_conflict_do_nothing(index_elements=["principal_id"])
            )
            if is_postgres:
                await conn.execute(
                    select(quota_principals.c.principal_id)
                    .where(quota_principals.c.principal_id == owner_id)
                    .with_for_update()
                )

    async def reserve(
        self, conn: AsyncConnection, owner_id: str, limits: QuotaLimits, starts_now: bool
    ) -> None:
        """Check one run against `limits` (its owner's turn held) and reserve its
        place in the rate; a refusal raises RESOURCE_EXHAUSTED, and the caller's
        transaction, rolled back, writes nothing."""
        now = self.clock.now()
        refusal = await self._counted_refusal(conn, owner_id, limits, starts_now, now)
        if refusal is None:
            refusal = await self._rate_refusal(conn, owner_id, limits, now)
        if refusal is not None:
            QUOTA_REFUSALS.labels(refusal.limit).inc()
            raise refusal.as_error(owner_id)

    async def _counted_refusal(
        self,
        conn: AsyncConnection,
        owner_id: str,
        limits: QuotaLimits,
        starts_now: bool,
        now: datetime,
    ) -> Refusal | None:
        active, pending = await active_runs_of(conn, owner_id)
        QUOTA_USE.labels("max_active_runs").set(active)
        QUOTA_USE.labels("max_pending_runs").set(pending)
        if limits.max_active_runs is not None and active + 1 > limits.max_active_runs:
            return Refusal("max_active_runs", limits.max_active_runs, active, None)
        if (
            limits.max_pending_runs is not None
            and not starts_now
            and pending + 1 > limits.max_pending_runs
        ):
            return Refusal("max_pending_runs", limits.max_pending_runs, pending, None)
        if limits.tokens_per_day is None and limits.cost_per_day is None:
            return None
        spend = await spend_since(conn, owner_id, self.day_started(now))
        wait = (self.resets_at(now) - now).total_seconds()
        QUOTA_USE.labels("tokens_per_day").set(spend.tokens)
        QUOTA_USE.labels("cost_per_day").set(spend.cost)
        if limits.tokens_per_day is not None and spend.tokens >= limits.tokens_per_day:
            return Refusal("tokens_per_day", limits.tokens_per_day, spend.tokens, wait)
        if limits.cost_per_day is not None and spend.cost >= limits.cost_per_day:
            return Refusal("cost_per_day", limits.cost_per_day, spend.cost, wait)
        return None

    async def _rate_refusal(
        self, conn: AsyncConnection, owner_id: str, limits: QuotaLimits, now: datetime
    ) -> Refusal | None:
        """GCRA: each creation moves the owner's theoretical arrival on by one
        interval; a creation that would put it further ahead than the burst allows
        is refused, and told when it would not."""
        if limits.runs_per_minute is None:
            return None
        interval = self.window_seconds / limits.runs_per_minute
        tolerance = interval * ((limits.burst or limits.runs_per_minute) - 1)
        stored = await conn.scalar(
            select(quota_principals.c.rate_arrival).where(
                quota_principals.c.principal_id == owner_id
            )
        )
        moment = now.timestamp()
        arrival = max(float(stored or 0.0), moment)
        QUOTA_USE.labels("runs_per_minute").set(
            self.recent_runs(float(stored or 0.0), moment, interval)
        )
        if arrival - moment > tolerance:
            used = self.recent_runs(arrival, moment, interval)
            return Refusal(
                "runs_per_minute", limits.runs_per_minute, used, arrival - tolerance - moment
            )
        await conn.execute(
            update(quota_principals)
            .where(quota_principals.c.principal_id == owner_id)
            .values(rate_arrival=arrival + interval)
        )
        return None

    @staticmethod
    def recent_runs(arrival: float, moment: float, interval: float) -> int:
        """Creations the rate still counts: how many intervals the arrival is ahead."""
        return math.ceil(max(0.0, arrival - moment) / interval - 1e-9)

    # ---- the day ---------------------------------------------------------------

    def day_started(self, now: datetime) -> datetime:
        """The latest reset at or before `now` (`reset_hour_utc`, every day)."""
        reset = now.replace(hour=self.section.reset_hour_utc, minute=0, second=0, microsecond=0)
        return reset if reset <= now else reset - timedelta(days=1)

    def resets_at(self, now: datetime) -> datetime:
        return self.day_started(now) + timedelta(days=1)

    # ---- what GET /quotas shows ----------------------------------------------

    async def report(
        self, engine: AsyncEngine, owner_id: str, limits: QuotaLimits
    ) -> dict[str, Any]:
        """`{"limits", "use", "resets_at"}` of one owner (read, nothing reserved)."""
        now = self.clock.now()
        async with engine.connect() as conn:
            active, pending = await active_runs_of(conn, owner_id)
            spend = await spend_since(conn, owner_id, self.day_started(now))
            stored = await conn.scalar(
                select(quota_principals.c.rate_arrival).where(
                    quota_principals.c.principal_id == owner_id
                )
            )
        interval = self.window_seconds / (limits.runs_per_minute or 1)
        return {
            "principal": owner_id,
            "limits": {
                **limits.model_dump(),
                "max_tokens": self.section.run.max_tokens,
                "max_cost": self.section.run.max_cost,
                "requests_per_second": self.section.gateway.requests_per_second,
            },
            "use": {
                "active_runs": active,
                "pending_runs": pending,
                "runs_this_minute": self.recent_runs(
                    float(stored or 0.0), now.timestamp(), interval
                ),
                "tokens_today": spend.tokens,
                "cost_today": spend.cost,
            },
            "resets_at": self.resets_at(now).isoformat(),
        }


def principal_asked(asked: str, caller: Principal | None) -> str:
    """Whose quota a GetQuota reports: the caller's own, or anyone's for an admin
    or a service (which must name one)."""
    if caller is None:
        if not asked:
            raise invalid("principal_id: say whose quota to report.")
        return asked
    if asked and asked != caller.user_id and not caller.is_admin:
        raise forbidden("Only admins may read another principal's quota; ask for your own.")
    return asked or caller.user_id


async def active_runs_of(conn: AsyncConnection, owner_id: str) -> tuple[int, int]:
    """(pending + running, pending) runs of `owner_id`."""
    query = (
        select(runs.c.status, func.count())
        .where(runs.c.owner_id == owner_id, runs.c.status.in_(ACTIVE_RUN_STATUSES))
        .group_by(runs.c.status)
    )
    counts = {str(status): int(count) for status, count in (await conn.execute(query)).all()}
    return sum(counts.values()), counts.get(RunStatus.PENDING, 0)


async def spend_since(conn: AsyncConnection, owner_id: str, since: datetime) -> Spend:
    """The ledger's tokens and cost of `owner_id` recorded at or after `since`."""
    query = select(
        func.coalesce(func.sum(token_usage.c.total_tokens), 0),
        func.coalesce(func.sum(token_usage.c.cost), 0.0),
    ).where(token_usage.c.owner_id == owner_id, token_usage.c.recorded_at >= since)
    tokens, cost = (await conn.execute(query)).one()
    return Spend(int(tokens), float(cost))
