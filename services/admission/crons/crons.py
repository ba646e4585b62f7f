"""Crons: a schedule (five-field cron expression in a time zone, optional end)
and the run each firing starts on behalf of the cron's creator.

The schedule is checked here, once, for create and update alike: a bad
expression, an unknown time zone or an end already past is a 422 naming the
field, and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.identity import Principal
from waybill.v1 import admission_pb2

ON_RUN_COMPLETED = ("delete", "keep")


class FiringOutcome(StrEnum):
    """What became of one due time of a cron (`cron_firings.outcome`)."""

    CLAIMED = "claimed"  # a replica is firing it (left so by a crash: fired again later)
    STARTED = "started"  # its run was admitted
    SKIPPED = "skipped"  # the thread or the previous firing's run still busy (reject)
    # Over its owner's quota (the detail names the limit); the next due time fires anew.
    REFUSED = "refused"
    ERROR = "error"  # its run was refused otherwise (e.g. its thread was deleted)


class ThreadCleanup(StrEnum):
    """A fresh thread of a cron with on_run_completed=delete (`cron_firings.thread_cleanup`)."""

    PENDING = "pending"  # to be deleted once the firing's run has ended
    DONE = "done"


def parse_time_zone(name: str) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise invalid(
            f"timezone '{name}' is not an IANA time zone (e.g. 'Europe/Paris', 'UTC')."
        ) from error


def check_expression(expression: str) -> str:
    """Five fields, as LangGraph takes them; croniter's optional seconds field is refused."""
    fields = expression.split()
    if len(fields) != 5:
        raise invalid(
            f"schedule '{expression}' must have five fields "
            "(minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'."
        )
    try:
        schedule = croniter(expression)
    except (CroniterBadCronError, ValueError, KeyError) as error:
        raise invalid(f"schedule '{expression}' is not a valid cron expression: {error}") from error
    try:
        schedule.get_next(datetime)
    except CroniterBadDateError as error:  # e.g. February 30th
        raise invalid(f"schedule '{expression}' names a date that never comes.") from error
    return " ".join(fields)


def parse_end_time(value: str, now: datetime) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as error:
        raise invalid(f"end_time '{value}' is not an RFC 3339 time.") from error
    # Stored in UTC: SQLite keeps no zone, so every stored time must be in one.
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment <= now:
        raise invalid(
            f"end_time {moment.isoformat()} is in the past (now is {now.isoformat()}): "
            "give a later one, or none to never end."
        )
    return moment


@dataclass(frozen=True)
class Schedule:
    """When a cron fires: its expression read in its time zone, until its end."""

    expression: str
    time_zone: str  # "" means UTC
    end_time: datetime | None = None

    def next_after(self, moment: datetime) -> datetime | None:
        """The first firing strictly after `moment` (UTC), or None past the end."""
        local = moment.astimezone(parse_time_zone(self.time_zone))
        found = croniter(self.expression, local).get_next(datetime)
        assert isinstance(found, datetime)
        due = found.astimezone(UTC)
        if self.end_time is not None and due > self.end_time:
            return None
        return due


def checked_schedule(expression: str, time_zone: str, end_time: str, now: datetime) -> Schedule:
    parse_time_zone(time_zone)
    return Schedule(check_expression(expression), time_zone, parse_end_time(end_time, now))


@dataclass
class CronRecord:
    cron_id: str
    assistant_id: str
    thread_id: str | None
    owner_id: str
    schedule: str
    time_zone: str
    end_time: datetime | None
    enabled: bool
    on_run_completed: str | None
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    multitask_strategy: str
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # The creator's rights when the cron was made: each firing acts with them.
    owner_role: str = "user"
    owner_scopes: list[str] = field(default_factory=list)
    # A creator of the project's own auth: its user as `@auth.authenticate` returned
    # it (JSON, its `permissions` in it), and the filters the project's `@auth.on`
    # handlers returned for the cron's run at creation ({"threads": ..,
    # "assistants": ..}). None and {} for Waybill's own principals.
    owner_user: dict[str, Any] | None = None
    auth_filters: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_run_id: str | None = None

    @property
    def timing(self) -> Schedule:
        return Schedule(self.schedule, self.time_zone, self.end_time)

    def acting_principal(self) -> Principal:
        """Who a firing acts as: the owner, with the rights recorded at creation,
        and the cron named as the channel the run came through. A project user is
        that user again (its graph sees it in `langgraph_auth_user`, as a run it
        starts over HTTP does), its visibility given by `auth_filters`."""
        permissions = (self.owner_user or {}).get("permissions") or []
        return Principal(
            user_id=self.owner_id,
            role=self.owner_role,
            scopes=frozenset(self.owner_scopes),
            channel={"platform": "cron", "cron_id": self.cron_id},
            user=dict(self.owner_user) if self.owner_user is not None else None,
            permissions=tuple(str(p) for p in permissions),
        )

    def payload(self) -> dict[str, Any]:
        """LangGraph's `payload`: the run each firing creates, with the schedule, as
        LangGraph Platform keeps it (the request's body)."""
        return {
            "schedule": self.schedule,
            "assistant_id": self.assistant_id,
            **self.kwargs,
            "metadata": self.metadata,
            "multitask_strategy": self.multitask_strategy,
        }

    def to_proto(self) -> admission_pb2.Cron:
        return admission_pb2.Cron(
            cron_id=self.cron_id,
            assistant_id=self.assistant_id,
            thread_id=self.thread_id or "",
            schedule=self.schedule,
            timezone=self.time_zone,
            end_time=codec.iso(self.end_time),
            enabled=self.enabled,
            on_run_completed=self.on_run_completed or "",
            payload_json=codec.dumps(self.payload()),
            metadata_json=codec.dumps(self.metadata),
            owner_id=self.owner_id,
            next_run_date=codec.iso(self.next_run_at) if self.enabled else "",
            created_at=codec.iso(self.created_at),
            updated_at=codec.iso(self.updated_at),
        )
