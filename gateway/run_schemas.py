"""The request bodies that start or stop runs: a run (on a thread, stateless, or
one of a batch), the runs to cancel, and a cron with the run each firing starts.
Their shared parts (the envelope, config, checkpoint and command checks) are in
schemas.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import Field, field_validator, model_validator

from waybill.gateway.schemas import CheckpointDict, Envelope, Offset, RunCommand, RunConfig

STREAM_MODES = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "debug",
    "tasks",
    "checkpoints",
    "events",
)

MAX_START_DELAY_SECONDS = 365 * 24 * 3600  # as admission's policy


class RunCreate(Envelope):
    assistant_id: str = Field(min_length=1)
    input: Any = None
    command: RunCommand | None = None
    metadata: dict[str, Any] | None = None
    config: RunConfig | None = None
    context: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    checkpoint: CheckpointDict | None = None
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False  # every Waybill stream is resumable
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    # Stateless runs (/runs/...): drop the temporary thread when done, or keep it.
    on_completion: Literal["delete", "keep"] = "delete"
    # Wait this long before the run may start; it stays `pending` meanwhile.
    after_seconds: float | None = Field(default=None, ge=0, le=MAX_START_DELAY_SECONDS)
    # Told of the run's end by delivery's outbox (signed POST, retried; see docs/api.md).
    webhook: str | None = Field(default=None, max_length=2048)
    feedback_keys: list[str] | None = None
    # LangGraph's default: a step's checkpoint is stored while the next step
    # runs (a takeover may redo one step); "sync" waits for it before each step.
    durability: Literal["sync", "async", "exit"] = "async"

    @field_validator("stream_mode")
    @classmethod
    def _known_modes(cls, value: str | list[str]) -> str | list[str]:
        for mode in [value] if isinstance(value, str) else value:
            if mode not in STREAM_MODES:
                known = ", ".join(STREAM_MODES)
                raise ValueError(f"unknown stream_mode '{mode}'; use one of {known}")
        return value

    def kwargs(self) -> dict[str, Any]:
        """What the run record keeps as LangGraph's `kwargs`."""
        fields = (
            "input",
            "command",
            "config",
            "context",
            "checkpoint_id",
            "checkpoint",
            "stream_mode",
            "stream_subgraphs",
            "interrupt_before",
            "interrupt_after",
            "on_disconnect",
            "feedback_keys",
            "durability",
            "webhook",
        )
        kwargs = {name: getattr(self, name) for name in fields}
        if self.checkpoint and not self.checkpoint_id:
            kwargs["checkpoint_id"] = self.checkpoint.get("checkpoint_id")
        # Kept so that an Idempotency-Key's digest covers every field of the request.
        kwargs["resumable"] = self.stream_resumable
        kwargs["on_completion"] = self.on_completion
        return kwargs


class RunsCancel(Envelope):
    """`POST /runs/cancel`: the listed runs of one thread, or every run in a status."""

    thread_id: UUID | None = None
    run_ids: list[UUID] | None = Field(default=None, min_length=1, max_length=1000)
    status: Literal["pending", "running", "all"] | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> RunsCancel:
        by_ids = self.thread_id is not None or self.run_ids is not None
        if self.status is not None and by_ids:
            raise ValueError(
                "give either status, or thread_id with run_ids: status cancels every run "
                "in that status, whatever its thread"
            )
        if self.status is None and (self.thread_id is None or not self.run_ids):
            raise ValueError("give either status, or both thread_id and run_ids")
        return self


class BatchRunCreate(RunCreate):
    """One run of `POST /runs/batch`: on the thread it names, or stateless without one."""

    thread_id: UUID | None = None


CronSortBy = Literal[
    "cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "next_run_date", "end_time"
]
CronField = Literal[
    "cron_id",
    "assistant_id",
    "thread_id",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "now",
    "on_run_completed",
    "enabled",
]


class CronRunFields(Envelope):
    """The run each firing starts (the schedule itself is admission's to check)."""

    input: Any = None
    config: RunConfig | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None  # every Waybill stream is resumable
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    checkpoint_during: bool | None = None  # deprecated by LangGraph: durability says it
    webhook: str | None = None

    @field_validator("stream_mode")
    @classmethod
    def _known_modes(cls, value: str | list[str] | None) -> str | list[str] | None:
        for mode in [value] if isinstance(value, str) else value or []:
            if mode not in STREAM_MODES:
                known = ", ".join(STREAM_MODES)
                raise ValueError(f"unknown stream_mode '{mode}'; use one of {known}")
        return value

    def kwargs(self) -> dict[str, Any]:
        """The run kwargs a firing uses: only the fields given."""
        names = (
            "input",
            "config",
            "context",
            "stream_mode",
            "stream_subgraphs",
            "interrupt_before",
            "interrupt_after",
            "durability",
            "webhook",
        )
        return {name: getattr(self, name) for name in names if name in self.model_fields_set}


class CronCreate(CronRunFields):
    assistant_id: str = Field(min_length=1)
    schedule: str = Field(min_length=1)
    timezone: str | None = None
    end_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None


class CronPatch(CronRunFields):
    """Only what is given changes; `end_time: null` clears the end."""

    schedule: str | None = None
    timezone: str | None = None
    end_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: Literal["delete", "keep"] | None = None


class CronCount(Envelope):
    assistant_id: str | None = None
    thread_id: UUID | None = None
    metadata: dict[str, Any] | None = None


class CronSearch(CronCount):
    enabled: bool | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: CronSortBy | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[CronField] | None = None
