"""The rules a run must pass before it is stored. `StartRun` is the only way a
run is created, and it applies them in this order, each with its own error:

1. cancel permission for `interrupt`/`rollback` (they end someone's run): 403
2. thread id shape: 422
3. secret scan of `metadata` and `config`: 422 naming the path
4. model allowlist (the built-in lead_agent's model only): 400 naming the
   allowed models, or the model override that breaks common/model_overrides.py;
   the webhook target: 422; a run budget (`configurable.waybill_budget`) above
   the configured `quotas.run`: 422 (`check_run_budget`)
5. thread access and ownership: 404            (`RunIntake.check`, intake.py)
6. the caller in `configurable`, sealed secrets (`admitted_kwargs`)
7. the checkpoint belongs to the thread: 400/404 (`RunIntake.check`)

Nothing is written before all of them pass.
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

from waybill.common import codec
from waybill.common.config_file import RunBudget
from waybill.common.errors import forbidden, invalid, refused
from waybill.common.identity import Principal
from waybill.common.model_overrides import ModelOverrideError, model_overrides
from waybill.common.request_marks import REQUEST_MARKS
from waybill.common.run_budget import above_configured, requested_budget
from waybill.common.sealed import seal
from waybill.common.secret_scan import refuse_secrets
from waybill.common.settings import Settings
from waybill.common.statuses import DEFAULT_MULTITASK_STRATEGY, RunStatus
from waybill.common.webhook_targets import WebhookTargetRefused, check_webhook_url
from waybill.services.admission.assistants.assistants import with_assistant_defaults
from waybill.services.admission.rows import (
    CANCEL_ACTIONS,
    LOCAL_OWNER,
    AssistantRow,
    RunRow,
)
from waybill.v1 import admission_pb2

# Where LangGraph Platform puts the caller, in every run's `configurable`; a
# client's values are replaced. A graph's `context` is never touched: a graph
# whose context declares `user_id` (LangChain's memory template) gets the
# client's, as on the Platform; the built-in lead_agent reads the caller from
# `runtime.server_info.user` (made from `langgraph_auth_user`).
AUTH_USER = "langgraph_auth_user"
AUTH_USER_ID = "langgraph_auth_user_id"
AUTH_PERMISSIONS = "langgraph_auth_permissions"
# Identity keys no client may set in `configurable`.
SERVER_CONFIGURABLE_KEYS = (AUTH_USER, AUTH_USER_ID, AUTH_PERMISSIONS)
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


def check_model_allowed(kwargs: dict[str, Any], allowed: list[str]) -> None:
    """The allowlist governs Waybill's own agent only: a user graph's `model_name`
    is that graph's business (the caller decides which graphs this applies to)."""
    name = _model_name(kwargs)
    if name is not None and name not in allowed:
        raise refused(
            f"model_name '{name}' is not configured; allowed models: {', '.join(allowed)}."
        )
    configurable = (kwargs.get("config") or {}).get("configurable")
    try:
        model_overrides(kwargs.get("context"), configurable)
    except ModelOverrideError as error:
        raise refused(str(error)) from None


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


def check_run_budget(kwargs: dict[str, Any], configured: RunBudget) -> None:
    """A run may lower its budget, never raise it: refused before anything is
    written rather than clamped, so the caller learns its budget is not the one it asked."""
    try:
        reason = above_configured(requested_budget(kwargs), configured)
    except ValueError as error:
        raise invalid(f"{error}.") from None
    if reason is not None:
        raise invalid(reason)


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
    assistant: AssistantRow,
    allowed_models: list[str] | None,
    caller: Principal | None = None,
) -> RunRow:
    """Checks 1-4 of a StartRun request for `assistant` (resolved from its id);
    returns the pending record to insert, with the assistant's defaults merged in.
    `allowed_models` is None for a graph whose model choice is not Waybill's."""
    strategy = codec.MULTITASK_NAMES.get(request.multitask_strategy, DEFAULT_MULTITASK_STRATEGY)
    check_cancel_permission(strategy, caller)
    if not codec.is_uuid(request.thread_id):
        raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
    kwargs = codec.loads(request.kwargs_json, {})
    metadata = codec.loads(request.metadata_json, {})
    if not isinstance(kwargs, dict) or not isinstance(metadata, dict):
        raise invalid("kwargs and metadata must be JSON objects.")
    refuse_secrets(metadata, kwargs.get("config"))
    # The config the run inherits (its context mirrored in): scanned at the assistant's
    # creation since, but an assistant stored before then must not pass its keys on.
    refuse_secrets({}, assistant.config)
    kwargs = with_assistant_defaults(mirrored(kwargs), assistant)
    if allowed_models is not None:
        check_model_allowed(kwargs, allowed_models)
    delay = start_delay(request.after_seconds)
    now = codec.now_utc()
    return RunRow(
        run_id=str(uuid.uuid4()),
        thread_id=request.thread_id,
        assistant_id=assistant.assistant_id,
        graph_id=assistant.graph_id,
        status=RunStatus.PENDING,
        multitask_strategy=strategy,
        metadata=metadata,
        kwargs=kwargs,
        # As LangGraph does: a delayed run is created when it becomes due.
        created_at=now + delay,
        updated_at=now,
        owner_id=caller.user_id if caller else LOCAL_OWNER,
    )


def sent_config(request: admission_pb2.StartRunRequest) -> dict[str, Any]:
    """The run's `config` as the client sent it (before defaults and the caller)."""
    kwargs = codec.loads(request.kwargs_json, {})
    config = kwargs.get("config") if isinstance(kwargs, dict) else None
    return config if isinstance(config, dict) else {}


def mirrored(kwargs: dict[str, Any]) -> dict[str, Any]:
    """As LangGraph Platform does for a run that sends one of the two: its
    `context` is also its `configurable` (secrets aside), and a `configurable`
    alone is also its `context`, so that a graph reading either finds it.
    (The Platform refuses a run sending both; here both are kept as sent.)"""
    context = kwargs.get("context") or {}
    config = kwargs.get("config") or {}
    configurable = (config.get("configurable") if isinstance(config, dict) else None) or {}
    if not all(isinstance(part, dict) for part in (context, config, configurable)):
        return kwargs  # not objects: refused with the reason further on
    # The request's marks (common/request_marks.py) are the server's, not the client's.
    marks = {key: value for key, value in configurable.items() if key in REQUEST_MARKS}
    sent = {key: value for key, value in configurable.items() if key not in REQUEST_MARKS}
    if context and not sent:
        shared = {key: value for key, value in context.items() if key != SECRETS_KEY}
        return {**kwargs, "config": {**config, "configurable": {**shared, **marks}}}
    if sent and not context:
        return {**kwargs, "context": sent}
    return kwargs


def identity_of(caller: Principal | None, owner_id: str) -> dict[str, Any]:
    """Who the run acts for; a service acting on nobody's behalf acts for the owner."""
    if caller is not None:
        return caller.identity()
    return {"user_id": owner_id, "role": "service"}


def auth_user_of(caller: Principal | None, identity: dict[str, Any]) -> dict[str, Any]:
    """The caller as LangGraph Platform hands it to a graph (`langgraph_auth_user`),
    in JSON: `identity`, `permissions`, `display_name`, `is_authenticated`, and
    the rest of what authentication said about the user."""
    user_id = str(identity["user_id"])
    custom = getattr(caller, "user", None)  # a custom authenticator's user, when there is one
    user: dict[str, Any] = dict(custom) if isinstance(custom, dict) else _waybill_fields(identity)
    user.update(
        identity=user_id,
        permissions=_permissions_of(caller),
        display_name=user.get("display_name") or user_id,
        is_authenticated=True,
    )
    return user


def _waybill_fields(identity: dict[str, Any]) -> dict[str, Any]:
    """A Waybill principal's `role`, and its chat `channel` when it has one: what the
    lead agent reads from `runtime.server_info.user`."""
    return {key: identity[key] for key in ("role", "channel") if key in identity}


def _permissions_of(caller: Principal | None) -> list[str]:
    if caller is not None and caller.by_project_auth:  # the project's authenticator's,
        return list(caller.permissions)  # kept in its order
    return sorted(caller.scopes) if caller is not None else []


def admitted_kwargs(
    kwargs: dict[str, Any], auth_user: dict[str, Any], secrets_key: bytes | None
) -> dict[str, Any]:
    """Check 6: the context stays the client's, every key of it (the runner passes
    the graph the keys its schema declares, as LangGraph Platform does), its
    secrets sealed. The caller goes into `configurable` where LangGraph Platform
    puts it, and nowhere else."""
    context = kwargs.get("context") or {}
    if not isinstance(context, dict):
        raise invalid("context must be a JSON object.")
    admitted = {**kwargs, "context": dict(context)}
    secrets = context.get(SECRETS_KEY)
    if secrets is not None:
        admitted["context"][SECRETS_KEY] = _sealed(secrets, secrets_key)
    admitted["config"] = _config_with_caller(kwargs.get("config"), auth_user)
    return admitted


def _sealed(secrets: Any, secrets_key: bytes | None) -> dict[str, Any]:
    if not isinstance(secrets, dict) or not secrets:
        raise invalid("context.secrets must be a non-empty JSON object of named secrets.")
    if secrets_key is None:
        raise refused("context.secrets is not available: no secrets key is configured.")
    return seal(secrets, secrets_key)


def _config_with_caller(config: Any, auth_user: dict[str, Any]) -> dict[str, Any]:
    """`configurable` with LangGraph Platform's auth keys set from the caller (a
    client's values for them are dropped); the client's other keys are as sent,
    `user_id` among them: only when the client sent none is it the caller's, as
    the reference falls back to the authenticated user."""
    config = dict(config) if isinstance(config, dict) else {}
    configurable = config.get("configurable")
    configurable = dict(configurable) if isinstance(configurable, dict) else {}
    for key in SERVER_CONFIGURABLE_KEYS:
        configurable.pop(key, None)
    configurable.update(
        {
            AUTH_USER: auth_user,
            AUTH_USER_ID: auth_user["identity"],
            AUTH_PERMISSIONS: auth_user["permissions"],
        }
    )
    configurable.setdefault("user_id", auth_user["identity"])
    return {**config, "configurable": configurable}


def merged_metadata(
    run_metadata: dict[str, Any], assistant: AssistantRow, thread_metadata: dict[str, Any]
) -> dict[str, Any]:
    """A run's metadata as LangGraph Platform merges it: the assistant's, then the
    thread's as the run stamps it (`graph_id`, `assistant_id`), then the run's own
    (the later wins); `assistant_id` always the run's assistant, so no client
    spoofs it."""
    return {
        **assistant.metadata,
        **thread_metadata,
        "graph_id": assistant.graph_id,
        **run_metadata,
        "assistant_id": assistant.assistant_id,
    }


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
