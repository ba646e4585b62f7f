"""Idempotency keys: a client that retries `StartRun` with the same key gets the
run it created the first time, and no second execution starts.

A key is scoped to its caller and remembers a digest of the request it came
with; the same key with a different request is refused. The key's row is
inserted in the same transaction as the run, so of two concurrent requests
with one key exactly one creates a run and the other returns it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from waybill.common import codec
from waybill.common.errors import busy
from waybill.common.request_marks import without_request_marks
from waybill.v1 import admission_pb2


@dataclass
class IdempotencyKey:
    owner_id: str
    key: str
    request_digest: str
    expires_at: datetime


@dataclass
class KeyedRun:
    """What a live key points at."""

    request_digest: str
    thread_id: str
    run_id: str


def request_digest(request: admission_pb2.StartRunRequest) -> str:
    canonical = {
        "thread_id": request.thread_id,
        "assistant_id": request.assistant_id,
        "kwargs": without_request_marks(codec.loads(request.kwargs_json, {})),
        "metadata": codec.loads(request.metadata_json, {}),
        "multitask_strategy": request.multitask_strategy,
        "if_not_exists": request.if_not_exists,
        "after_seconds": request.after_seconds,
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def key_for(
    request: admission_pb2.StartRunRequest, owner_id: str, ttl_seconds: float
) -> IdempotencyKey | None:
    if not request.idempotency_key:
        return None
    expires_at = codec.now_utc() + timedelta(seconds=ttl_seconds)
    return IdempotencyKey(owner_id, request.idempotency_key, request_digest(request), expires_at)


def replayed_run_id(key: IdempotencyKey, found: KeyedRun) -> str:
    """The run a repeated request gets back; a different request with the key is refused."""
    if found.request_digest != key.request_digest:
        raise busy(
            f"Idempotency-Key '{key.key}' was already used with a different request; "
            "use a new key for a new run."
        )
    return found.run_id
