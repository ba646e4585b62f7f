"""The rules a run must pass before it is stored. `StartRun` is the only way a
run is created, and it applies them in this order, each with its own error:

1. cancel permission for `interrupt`/`rollback` (they end someone's run): 403
2. thread id shape: 422
3. secret scan of `metadata` and `config`: 422 naming the path
4. model allowlist: 400 naming the allowed models; the webhook target: 422
5. thread access and ownership: 404            (`AdmissionServicer.StartRun`)
6. context whitelist and identity injection     (`admitted_kwargs`)
7. the checkpoint belongs to the thread: 400/404 (`AdmissionServicer.StartRun`)

Nothing is written before all of them pass.
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

from waybill.common import codec
from waybill.common.errors import forbidden, invalid, refused
from waybill.common.identity import Principal
from waybill.common.sealed import seal
from waybill.common.settings import Settings
from waybill.common.webhook_targets import WebhookTargetRefused, check_webhook_url
from waybill.services.admission.assistants import with_assistant_defaults
from waybill.services.admission.records import (
    CANCEL_ACTIONS,
    LOCAL_OWNER,
    AssistantRecord,
    RunRecord,
)
from waybill.services.admission.secret_scan import find_secret
from waybill.v1 import admission_pb2, common_pb2

# Set by the server from the authenticated caller; a client's values are dropped.
INJECTED_CONTEXT_KEYS = ("user_id", "role", "channel")
# The one sanctioned place for request-scoped secrets: sealed before storage.
SECRETS_KEY = "secrets"


def _model_name(kwargs: dict[str, Any]) -> str | None:
    context = kwargs.get("context") or {}
    configurable = (kwargs.get("config") or {}).get("configurable") or {}
    name = context.get("model_name") if isinstance(context, dict) else None
    return name or configurable.get("model_name")


def check_cancel_permission(strategy: str, caller: Principal | None) -> None:
    if strategy in CANCEL_ACTIONS and caller is not None and not caller.allows("runs:cancel"):
        raise forbidden(
            f"multitask_strategy '{strategy}' cancels the thread's active run, "
            "which needs the 'runs:cancel' scope; use 'enqueue' or 'reject'."
        )


def check_no_secrets(metadata: dict[str, Any], config: Any) -> None:
    for root, value in (("metadata", metadata), ("config", config)):
        finding = find_secret(value, root)
        if finding is not None:
            raise invalid(finding.message())


def check_model_allowed(kwargs: dict[str, Any], allowed: list[str]) -> None:
    name = _model_name(kwargs)
    if name is not None and name not in allowed:
        raise refused(
            f"model_name '{name}' is not configured; allowed models: {', '.join(allowed)}."
        )


async def check_webhook(kwargs: dict[str, Any], settings: Settings) -> None:
    """A run's `webhook` must be a URL delivery may call (the SSRF guard): 422 naming why."""
    url = kwargs.get("webhook")
    if url is None or url == "":
        return
    if not isinstance(url, str):
        raise invalid("webhook must be a URL string.")
    try:
        await check_webhook_url(url, settings)
    except WebhookTargetRefused as refused:
        raise invalid(f"{refused}.") from refused


# A year: far beyond any sensible delay, and well inside what a timestamp can hold.
MAX_START_DELAY_SECONDS = 365 * 24 * 3600


def start_delay(after_seconds: float) -> timedelta:
    """How long a run waits before it may start (`after_seconds`)."""
    if not math.isfinite(after_seconds) or not 0 <= after_seconds <= MAX_START_DELAY_SECONDS:
        raise invalid(
            f"after_seconds must be between 0 and {MAX_START_DELAY_SECONDS} (got {after_seconds})."
        )
    return timedelta(seconds=after_seconds)


def build_run(
    request: admission_pb2.StartRunRequest,
    assistant: AssistantRecord,
    allowed_models: list[str],
    caller: Principal | None = None,
) -> RunRecord:
    """Checks 1-4 of a StartRun request for `assistant` (resolved from its id);
    returns the pending record to insert, with the assistant's defaults merged in."""
    strategy = codec.MULTITASK_NAMES.get(
        request.multitask_strategy or common_pb2.MULTITASK_STRATEGY_ENQUEUE, "enqueue"
    )
    check_cancel_permission(strategy, caller)
    if not codec.is_uuid(request.thread_id):
        raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
    kwargs = codec.loads(request.kwargs_json, {})
    metadata = codec.loads(request.metadata_json, {})
    if not isinstance(kwargs, dict) or not isinstance(metadata, dict):
        raise invalid("kwargs and metadata must be JSON objects.")
    check_no_secrets(metadata, kwargs.get("config"))
    kwargs = with_assistant_defaults(kwargs, assistant)
    check_model_allowed(kwargs, allowed_models)
    delay = start_delay(request.after_seconds)
    now = codec.now_utc()
    return RunRecord(
        run_id=str(uuid.uuid4()),
        thread_id=request.thread_id,
        assistant_id=assistant.assistant_id,
        graph_id=assistant.graph_id,
        status="pending",
        multitask_strategy=strategy,
        metadata=metadata,
        kwargs=kwargs,
        # As LangGraph does: a delayed run is created when it becomes due.
        created_at=now + delay,
        updated_at=now,
        owner_id=caller.user_id if caller else LOCAL_OWNER,
    )


def identity_of(caller: Principal | None, owner_id: str) -> dict[str, Any]:
    """Who the run acts for; a service acting on nobody's behalf acts for the owner."""
    if caller is not None:
        return caller.identity()
    return {"user_id": owner_id, "role": "service"}


def admitted_kwargs(
    kwargs: dict[str, Any],
    declared: frozenset[str] | None,
    identity: dict[str, Any],
    secrets_key: bytes | None,
) -> dict[str, Any]:
    """Check 6: only the context keys the graph declares pass (every key when it
    declares none); identity keys are the server's, never the client's; secrets
    are sealed. The same identity keys are stripped from `configurable`."""
    context = kwargs.get("context") or {}
    if not isinstance(context, dict):
        raise invalid("context must be a JSON object.")
    passed = {
        key: value
        for key, value in context.items()
        if key not in INJECTED_CONTEXT_KEYS
        and key != SECRETS_KEY
        and (declared is None or key in declared)
    }
    secrets = context.get(SECRETS_KEY)
    if secrets is not None:
        if not isinstance(secrets, dict) or not secrets:
            raise invalid("context.secrets must be a non-empty JSON object of named secrets.")
        if secrets_key is None:
            raise refused("context.secrets is not available: no secrets key is configured.")
        passed[SECRETS_KEY] = seal(secrets, secrets_key)
    admitted = {**kwargs, "context": {**passed, **identity}}
    config = kwargs.get("config")
    if isinstance(config, dict) and isinstance(config.get("configurable"), dict):
        configurable = {
            k: v for k, v in config["configurable"].items() if k not in INJECTED_CONTEXT_KEYS
        }
        admitted["config"] = {**config, "configurable": configurable}
    return admitted


def requested_checkpoint(kwargs: dict[str, Any], thread_id: str) -> str | None:
    """Check 7, the part admission can judge alone: a `checkpoint` naming another
    thread is a 400. Returns the checkpoint id to look up, if any."""
    checkpoint = kwargs.get("checkpoint")
    if checkpoint is not None:
        if not isinstance(checkpoint, dict):
            raise refused("checkpoint must be an object with a checkpoint_id.")
        named = checkpoint.get("thread_id")
        if named and named != thread_id:
            raise refused(
                f"checkpoint belongs to thread {named}, not {thread_id}; "
                "a run can only start from its own thread's checkpoints."
            )
    checkpoint_id = kwargs.get("checkpoint_id") or (checkpoint or {}).get("checkpoint_id")
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise refused("checkpoint_id must be a string.")
    return checkpoint_id or None
