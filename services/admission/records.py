"""What admission knows about threads and runs, as plain records."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from waybill.common import codec
from waybill.common.identity import LOCAL_USER
from waybill.v1 import admission_pb2, common_pb2

ACTIVE_STATUSES = ("pending", "running")
TERMINAL_STATUSES = ("success", "error", "timeout", "interrupted")

# Which status a run may move to from which. Every status write in
# `AdmissionStore` uses this table as its WHERE clause.
RUN_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "pending": ("running", "interrupted", "error"),
    # running -> running is a takeover: a new epoch for another runner.
    "running": ("running", "success", "error", "timeout", "interrupted"),
}

CANCEL_ACTIONS = ("interrupt", "rollback")

# Who owns what was created with auth off, or by a service on nobody's behalf.
LOCAL_OWNER = LOCAL_USER.user_id


def allowed_sources(target: str) -> list[str]:
    """The statuses a run may be in for a write of `target` to succeed."""
    return [source for source, targets in RUN_TRANSITIONS.items() if target in targets]


# The thread's status after its run ends this way (when the runner does not say).
THREAD_STATUS_AFTER_RUN = {
    "success": "idle",
    "error": "error",
    "timeout": "error",
    "interrupted": "interrupted",
}


@dataclass
class ThreadRecord:
    thread_id: str
    metadata: dict[str, Any]
    status: str
    created_at: datetime
    updated_at: datetime
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] | None = None
    owner_id: str = LOCAL_OWNER

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
        )


@dataclass
class RunRecord:
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
class AssistantRecord:
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
