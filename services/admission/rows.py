"""Admission's rows of threads, runs and assistants, as plain dataclasses read
from its tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from waybill.common import codec
from waybill.common.identity import LOCAL_USER
from waybill.common.statuses import CancelAction, RunStatus, ThreadStatus
from waybill.common.usage import TokenCount
from waybill.v1 import admission_pb2, common_pb2

CANCEL_ACTIONS: tuple[str, ...] = tuple(CancelAction)

# Who owns what was created with auth off, or by a service on nobody's behalf.
LOCAL_OWNER = LOCAL_USER.user_id


# The thread's status after its run ends this way (when the runner does not say).
THREAD_STATUS_AFTER_RUN = {
    RunStatus.SUCCESS: ThreadStatus.IDLE,
    RunStatus.ERROR: ThreadStatus.ERROR,
    RunStatus.TIMEOUT: ThreadStatus.ERROR,
    RunStatus.INTERRUPTED: ThreadStatus.INTERRUPTED,
}


def _run_error(error: dict[str, Any] | None) -> common_pb2.RunError | None:
    if not error:
        return None
    return common_pb2.RunError(
        error=str(error.get("error", "")), message=str(error.get("message", ""))
    )


def thread_of(row: Any) -> ThreadRow:
    """A `threads` row (with its live status) as a record."""
    return ThreadRow(
        thread_id=row.thread_id,
        metadata=row.metadata or {},
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
        values=row.values,
        interrupts=row.interrupts,
        owner_id=row.owner_id,
        config=row.config or {},
        error=row.error,
        state_updated_at=row.state_updated_at or row.updated_at,  # rows from before 0011
        ttl_strategy=row.ttl_strategy,
        ttl_minutes=row.ttl_minutes,
        ttl_expires_at=row.ttl_expires_at,
    )


def run_of(row: Any) -> RunRow:
    """A `runs` row as a record."""
    return RunRow(
        run_id=row.run_id,
        thread_id=row.thread_id,
        assistant_id=row.assistant_id,
        graph_id=row.graph_id,
        status=row.status,
        multitask_strategy=row.multitask_strategy,
        metadata=row.metadata or {},
        kwargs=row.kwargs or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
        epoch=row.epoch,
        attempt=row.attempt,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        stop_reason=row.stop_reason,
        cancel_action=row.cancel_action,
        owner_id=row.owner_id,
        usage=row.usage,
    )


@dataclass
class ThreadRow:
    thread_id: str
    metadata: dict[str, Any]
    status: str
    created_at: datetime
    updated_at: datetime
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] | None = None
    owner_id: str = LOCAL_OWNER
    config: dict[str, Any] = field(default_factory=dict)
    # The last run's `{"error", "message"}` when it failed or was cancelled.
    error: dict[str, Any] | None = None
    state_updated_at: datetime | None = None
    # Its time-to-live (thread_ttl.py): None when it has none.
    ttl_strategy: str | None = None
    ttl_minutes: float | None = None
    ttl_expires_at: datetime | None = None  # None: not armed (or never expires)

    def visible_to(self, owner: str | None) -> bool:
        """`owner` None is an admin or a service: it sees every thread."""
        return owner is None or owner == self.owner_id

    def to_proto(self) -> common_pb2.Thread:
        return common_pb2.Thread(
            thread_id=self.thread_id,
            metadata_json=codec.dumps(self.metadata),
            status=self.status,
            created_at=codec.iso(self.created_at),
            updated_at=codec.iso(self.updated_at),
            values_json=codec.dumps(self.values) if self.values is not None else b"",
            interrupts_json=codec.dumps(self.interrupts or {}),
            owner_id=self.owner_id,
            config_json=codec.dumps(self.config),
            error=_run_error(self.error),
            state_updated_at=codec.iso(self.state_updated_at or self.created_at),
            ttl=self._ttl(),
        )

    def _ttl(self) -> common_pb2.ThreadTTL | None:
        if self.ttl_strategy is None:
            return None
        expires = codec.iso(self.ttl_expires_at) if self.ttl_expires_at else ""
        return common_pb2.ThreadTTL(
            strategy=self.ttl_strategy, minutes=self.ttl_minutes, expires_at=expires
        )


@dataclass
class RunRow:
    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str
    status: str
    multitask_strategy: str
    metadata: dict[str, Any]
    kwargs: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    epoch: int = 0
    attempt: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    stop_reason: str = ""
    cancel_action: str | None = None
    owner_id: str = LOCAL_OWNER  # the owner of the run's thread
    # Runs this one's admission cancelled (interrupt/rollback): (run_id, action).
    displaced: list[tuple[str, str]] = field(default_factory=list)
    # Not stored: the metadata the client sent, which is what the run stamps on its
    # thread (`metadata` is merged with the assistant's and the thread's).
    sent_metadata: dict[str, Any] | None = None
    # The config its thread keeps once it is admitted (assistants.thread_config).
    thread_config: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] | None = None  # token usage, once the run ended

    def to_proto(self) -> common_pb2.Run:
        return common_pb2.Run(
            run_id=self.run_id,
            thread_id=self.thread_id,
            assistant_id=self.assistant_id,
            graph_id=self.graph_id,
            status=codec.RUN_STATUS_VALUES[self.status],
            multitask_strategy=codec.MULTITASK_VALUES[self.multitask_strategy],
            metadata_json=codec.dumps(self.metadata),
            kwargs_json=codec.dumps(self.kwargs),
            created_at=codec.iso(self.created_at),
            updated_at=codec.iso(self.updated_at),
            epoch=self.epoch,
            attempt=self.attempt,
            stop_reason=self.stop_reason,
            cancel_action=self.cancel_action or "",
            owner_id=self.owner_id,
            usage_json=codec.dumps(self.usage) if self.usage is not None else b"",
        )


@dataclass
class RunEnd:
    """A runner's report of how a run ended."""

    run_id: str
    epoch: int
    status: str
    stop_reason: str = ""
    thread_status: str | None = None
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] | None = None
    rolled_back: bool = False
    token_counts: list[TokenCount] = field(default_factory=list)
    # `{"error", "message"}`: why it failed or was cancelled (its thread's `error`).
    error: dict[str, Any] | None = None


@dataclass
class AssistantRow:
    """An assistant at its current version, or (with `updated_at` None) one stored version."""

    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime | None = None
    owner_id: str = LOCAL_OWNER  # who made it; a graph's system assistant: the local user

    def to_proto(self) -> admission_pb2.Assistant:
        return admission_pb2.Assistant(
            assistant_id=self.assistant_id,
            graph_id=self.graph_id,
            name=self.name,
            description=self.description or "",
            config_json=codec.dumps(self.config),
            context_json=codec.dumps(self.context),
            metadata_json=codec.dumps(self.metadata),
            created_at=codec.iso(self.created_at),
            updated_at=codec.iso(self.updated_at),
            version=self.version,
        )
