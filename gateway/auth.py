"""Who may call which endpoint.

An API key (`x-api-key: <key>` or `Authorization: Bearer <key>`) names a
principal from the config; only the keys' SHA-256 digests are kept. The
internal token (channel adapters, the scheduler) must name the owner it acts
for in `x-waybill-on-behalf-of`, and then has that owner's rights, limited to
what chats and schedules do (`INTERNAL_SCOPES`); it never acts for an admin.
With no keys configured, every request is the one local user (the embedded
default), and the gateway says so at start-up.

Each endpoint needs one scope, listed in `ROUTE_SCOPES`; an endpoint missing
from the table is refused (tests check that every route has an entry). Chat
platforms' webhooks are listed as `PLATFORM_SIGNED`: no API key, the platform's
own signature, verified by the Channels service. The
principal travels to the services as gRPC metadata, added by the interceptors
below to every call made while serving the request.

With the project's own auth (`auth` in langgraph.json, see project_auth.py) its
`@auth.authenticate` is the authentication of every API route, and its handlers
authorize; Waybill's own keys (WAYBILL_API_KEY, the config's principals, the
internal token) still work beside it, as operators' keys.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from fastapi import HTTPException, Request

from waybill.common.identity import (
    API_KEY_USER,
    AUTH_FILTERS_KEY,
    LOCAL_USER,
    ROLE_SCOPES,
    SCOPES,
    Principal,
    metadata_value,
)
from waybill.common.logs import bind_run
from waybill.common.settings import Settings
from waybill.gateway.project_auth import CURRENT_FILTERS

log = logging.getLogger("waybill.gateway.auth")

ON_BEHALF_OF_HEADER = "x-waybill-on-behalf-of"
CHANNEL_HEADER = "x-waybill-channel"

AUTHENTICATED = ""  # any authenticated principal may call it
# All the internal token may do for an owner: start and follow conversations.
INTERNAL_SCOPES = frozenset(
    {"threads:read", "threads:write", "runs:create", "runs:read", "runs:cancel"}
)
# Chat platforms call these routes: no API key, the platform's own proof (a
# signature, a secret token) checked by the Channels service. Only the channels
# router serves them, and `platform_signed` refuses any other route.
PLATFORM_SIGNED = "platform-signed"

THREAD, RUN = "/threads/{thread_id}", "/threads/{thread_id}/runs/{run_id}"
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("POST", "/threads"): "threads:write",
    ("POST", "/threads/search"): "threads:read",
    ("POST", "/threads/count"): "threads:read",
    ("GET", f"{THREAD}"): "threads:read",
    ("PATCH", f"{THREAD}"): "threads:write",
    ("DELETE", f"{THREAD}"): "threads:delete",
    ("GET", f"{THREAD}/state"): "threads:read",
    ("GET", f"{THREAD}/state/{{checkpoint_id}}"): "threads:read",
    ("POST", f"{THREAD}/state/checkpoint"): "threads:read",
    ("GET", f"{THREAD}/stream"): "threads:read",
    ("POST", f"{THREAD}/commands"): "runs:create",
    ("POST", f"{THREAD}/stream/events"): "threads:read",
    ("POST", "/threads/prune"): "threads:delete",
    ("POST", f"{THREAD}/state"): "threads:write",
    ("POST", f"{THREAD}/history"): "threads:read",
    ("GET", f"{THREAD}/history"): "threads:read",
    ("POST", f"{THREAD}/copy"): "threads:write",
    ("POST", f"{THREAD}/runs"): "runs:create",
    ("POST", f"{THREAD}/runs/stream"): "runs:create",
    ("POST", f"{THREAD}/runs/wait"): "runs:create",
    ("GET", f"{THREAD}/runs"): "runs:read",
    ("GET", f"{RUN}"): "runs:read",
    ("DELETE", f"{RUN}"): "runs:cancel",
    ("GET", f"{RUN}/stream"): "runs:read",
    ("GET", f"{RUN}/join"): "runs:read",
    ("POST", f"{RUN}/cancel"): "runs:cancel",
    ("GET", f"{RUN}/events"): "runs:read",
    ("GET", f"{RUN}/receipt"): "runs:read",
    ("GET", f"{RUN}/workspace-changes"): "runs:read",
    ("GET", f"{RUN}/deliveries"): "runs:read",
    ("GET", f"{THREAD}/outputs"): "threads:read",
    ("GET", f"{THREAD}/outputs/{{path:filepath}}"): "threads:read",
    ("POST", f"{THREAD}/uploads"): "threads:write",
    ("POST", f"{THREAD}/webhooks"): "threads:write",
    ("GET", f"{THREAD}/webhooks"): "threads:read",
    ("DELETE", f"{THREAD}/webhooks/{{subscription_id}}"): "threads:write",
    ("POST", "/assistants/{assistant_id}/webhooks"): "admin",
    ("GET", "/assistants/{assistant_id}/webhooks"): "admin",
    ("DELETE", "/assistants/{assistant_id}/webhooks/{subscription_id}"): "admin",
    ("GET", f"{THREAD}/token-usage"): "runs:read",
    ("GET", "/token-usage"): "runs:read",
    ("GET", "/quotas/me"): AUTHENTICATED,
    ("GET", "/quotas/{principal}"): "admin",
    ("POST", "/runs"): "runs:create",
    ("POST", "/runs/stream"): "runs:create",
    ("POST", "/runs/wait"): "runs:create",
    ("POST", "/runs/batch"): "runs:create",
    ("POST", "/runs/cancel"): "runs:cancel",
    ("POST", "/runs/crons"): "crons:write",
    ("POST", f"{THREAD}/runs/crons"): "crons:write",
    ("POST", "/runs/crons/search"): "runs:read",
    ("POST", "/runs/crons/count"): "runs:read",
    ("GET", "/runs/crons/{cron_id}"): "runs:read",
    ("PATCH", "/runs/crons/{cron_id}"): "crons:write",
    ("DELETE", "/runs/crons/{cron_id}"): "crons:write",
    ("POST", "/assistants/search"): AUTHENTICATED,
    ("POST", "/assistants/count"): AUTHENTICATED,
    ("GET", "/assistants/{assistant_id}"): AUTHENTICATED,
    ("GET", "/assistants/{assistant_id}/graph"): AUTHENTICATED,
    ("GET", "/assistants/{assistant_id}/schemas"): AUTHENTICATED,
    ("GET", "/assistants/{assistant_id}/subgraphs"): AUTHENTICATED,
    ("GET", "/assistants/{assistant_id}/subgraphs/{namespace}"): AUTHENTICATED,
    ("POST", "/assistants/{assistant_id}/versions"): AUTHENTICATED,
    ("POST", "/assistants"): "admin",
    ("PATCH", "/assistants/{assistant_id}"): "admin",
    ("DELETE", "/assistants/{assistant_id}"): "admin",
    ("POST", "/assistants/{assistant_id}/latest"): "admin",
    ("PUT", "/store/items"): "store:write",
    ("DELETE", "/store/items"): "store:write",
    ("GET", "/store/items"): "store:read",
    ("POST", "/store/items/search"): "store:read",
    ("POST", "/store/namespaces"): "store:read",
    ("GET", "/memory"): "store:read",
    ("POST", "/memory"): "store:write",
    ("PATCH", "/memory/{fact_id}"): "store:write",
    ("DELETE", "/memory/{fact_id}"): "store:write",
    # MCP and A2A: one route serves many methods, so any key gets in and each
    # method checks its own scope (a tool call or a message needs `runs:create`).
    ("POST", "/mcp"): AUTHENTICATED,
    ("GET", "/mcp"): AUTHENTICATED,
    ("DELETE", "/mcp"): AUTHENTICATED,
    ("POST", "/a2a/{assistant_id}"): AUTHENTICATED,
    ("GET", "/a2a/{assistant_id}"): AUTHENTICATED,
    ("DELETE", "/a2a/{assistant_id}"): AUTHENTICATED,
    ("GET", "/a2a/{assistant_id}/.well-known/agent-card.json"): AUTHENTICATED,
    ("GET", "/a2a/{assistant_id}/.well-known/agent.json"): AUTHENTICATED,
    ("GET", "/.well-known/agent-card.json"): AUTHENTICATED,
    ("POST", "/channels/telegram/{channel}/webhook"): PLATFORM_SIGNED,
    ("POST", "/channels/{platform}/{channel}/events"): PLATFORM_SIGNED,
    ("GET", "/channels/{platform}/{channel}/events"): PLATFORM_SIGNED,  # WeCom's URL check
    ("POST", "/channels/webhook/{channel}"): PLATFORM_SIGNED,
    ("GET", "/channels"): AUTHENTICATED,  # the bindings (a user sees their own)
}

# Waybill's own routes on a thread (no LangGraph Platform equivalent): with the
# project's auth, each is authorized as the thread's `read` (GET) or `update`, and
# the handler's filter reaches admission's lookup of the thread or run.
THREAD_EXTENSIONS = {
    f"{RUN}/receipt",
    f"{RUN}/workspace-changes",
    f"{RUN}/deliveries",
    f"{RUN}/events",
    f"{THREAD}/outputs",
    f"{THREAD}/outputs/{{path:filepath}}",
    f"{THREAD}/uploads",
    f"{THREAD}/webhooks",
    f"{THREAD}/webhooks/{{subscription_id}}",
    f"{THREAD}/token-usage",
}

# LangGraph Platform's own routes that Waybill keeps for admins: with the project's
# auth, any authenticated user may call them and the project's handlers decide.
HANDLER_AUTHORIZED = {
    ("POST", "/assistants"),
    ("PATCH", "/assistants/{assistant_id}"),
    ("DELETE", "/assistants/{assistant_id}"),
    ("POST", "/assistants/{assistant_id}/latest"),
}

# The principal of the request being served; the gRPC interceptors read it.
CURRENT_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "waybill_principal", default=None
)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class KeyRing:
    """API key digests -> principals; empty means auth is off."""

    by_digest: dict[str, Principal]
    internal_digest: str | None

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        by_digest: dict[str, Principal] = {}
        for spec in settings.principals():
            if spec.role not in ROLE_SCOPES and spec.scopes is None:
                raise ValueError(f"principal {spec.user_id}: unknown role {spec.role!r}")
            unknown = set(spec.scopes or ()) - set(SCOPES)
            if unknown:
                raise ValueError(f"principal {spec.user_id}: unknown scopes {sorted(unknown)}")
            scopes = frozenset(spec.scopes) if spec.scopes is not None else ROLE_SCOPES[spec.role]
            principal = Principal(spec.user_id, spec.role, scopes)
            by_digest[spec.key_sha256.lower()] = principal
        if settings.api_key:
            by_digest[digest(settings.api_key)] = API_KEY_USER
        internal = digest(settings.internal_token) if settings.internal_token else None
        return cls(by_digest, internal)

    @property
    def enabled(self) -> bool:
        return bool(self.by_digest or self.internal_digest)

    def recognizes(self, headers: Any) -> bool:
        """Whether the request presents one of Waybill's own keys (or the internal token)."""
        key = presented_key(headers)
        if key is None:
            return False
        key_digest = digest(key)
        internal = self.internal_digest
        return key_digest in self.by_digest or bool(
            internal and hmac.compare_digest(key_digest, internal)
        )

    def owner(self, user_id: str) -> Principal | None:
        return next((p for p in self.by_digest.values() if p.user_id == user_id), None)

    def authenticate(self, headers: Any) -> Principal:
        if not self.enabled:
            return LOCAL_USER
        key = presented_key(headers)
        if key is None:
            raise unauthenticated(
                "Missing API key: send it in the x-api-key header "
                "or as 'Authorization: Bearer <key>'."
            )
        key_digest = digest(key)
        if self.internal_digest and hmac.compare_digest(key_digest, self.internal_digest):
            return self._on_behalf_of(headers)
        principal = self.by_digest.get(key_digest)
        if principal is None:
            raise unauthenticated("Invalid API key.")
        return principal

    def _on_behalf_of(self, headers: Any) -> Principal:
        """The internal token acts as a named owner, never with more than the owner's rights."""
        user_id = headers.get(ON_BEHALF_OF_HEADER)
        if not user_id:
            raise HTTPException(
                403, f"The internal token must name the owner it acts for in {ON_BEHALF_OF_HEADER}."
            )
        owner = self.owner(user_id)
        if owner is None:
            raise HTTPException(
                403, f"{ON_BEHALF_OF_HEADER}: no principal '{user_id}' is configured."
            )
        if owner.role == "admin" or "admin" in owner.scopes:
            raise HTTPException(403, "The internal token cannot act for an admin.")
        scopes = owner.scopes & INTERNAL_SCOPES
        return Principal(owner.user_id, owner.role, scopes, channel_of(headers))


def channel_of(headers: Any) -> dict[str, str] | None:
    raw = headers.get(CHANNEL_HEADER)
    if not raw:
        return None
    try:
        channel = json.loads(raw)
    except ValueError:
        channel = None
    if not isinstance(channel, dict) or not all(isinstance(v, str) for v in channel.values()):
        raise HTTPException(422, f"{CHANNEL_HEADER} must be a JSON object of strings.")
    return channel


def presented_key(headers: Any) -> str | None:
    key = headers.get("x-api-key")
    if key:
        return str(key)
    scheme, _, credentials = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return None


def unauthenticated(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def required_scope(method: str, path: str) -> str | None:
    """The scope an endpoint needs ("" for any principal); None when it has no rule."""
    return ROUTE_SCOPES.get((method, path))


async def authenticate(request: Request) -> Principal:
    """Waybill's own keys first (operators, the internal token); then the project's
    `@auth.authenticate` when langgraph.json has `auth`; else the keyring's verdict."""
    keyring: KeyRing = request.app.state.keyring
    project_auth = getattr(request.app.state, "project_auth", None)
    if project_auth is None or keyring.recognizes(request.headers):
        return keyring.authenticate(request.headers)
    return await project_auth.authenticate(request)  # type: ignore[no-any-return]


async def authorize(request: Request) -> Principal:
    """The dependency every API router has: authenticate, then check the route's scope."""
    CURRENT_FILTERS.set(None)
    principal = await authenticate(request)
    route_path = getattr(request.scope.get("route"), "path", "")
    scope = required_scope(request.method, route_path)
    if scope is None or scope == PLATFORM_SIGNED:
        raise HTTPException(403, f"{request.method} {request.url.path} has no permission rule.")
    handlers_decide = (
        principal.by_project_auth and (request.method, route_path) in HANDLER_AUTHORIZED
    )
    if scope and not principal.allows(scope) and not handlers_decide:
        raise HTTPException(403, f"This API key lacks the '{scope}' scope.")
    request.state.principal = principal
    request_rate = getattr(request.app.state, "request_rate", None)
    if request_rate is not None:  # quotas.gateway.requests_per_second, per key (principal)
        request_rate.check(principal.user_id)
    if principal.by_project_auth and route_path in THREAD_EXTENSIONS:
        action = "read" if request.method == "GET" else "update"
        value: dict[str, Any] = {"thread_id": request.path_params.get("thread_id"), "metadata": {}}
        await request.app.state.project_auth.authorize(request, "threads", action, value)
    CURRENT_PRINCIPAL.set(principal)
    bind_run(user_id=principal.user_id)
    return principal


async def platform_signed(request: Request) -> None:
    """The dependency of the channels router: its routes must be declared
    PLATFORM_SIGNED. They act for no principal: the Channels service verifies
    the platform and acts for the channel's bound owner."""
    route = request.scope.get("route")
    if required_scope(request.method, getattr(route, "path", "")) != PLATFORM_SIGNED:
        raise HTTPException(403, f"{request.method} {request.url.path} has no permission rule.")
    CURRENT_PRINCIPAL.set(None)


# ---- carrying the principal to the services -----------------------------------


def _with_principal(details: Any) -> Any:
    principal = CURRENT_PRINCIPAL.get()
    if principal is None:
        return details
    metadata = list(details.metadata or ()) + principal.to_metadata()
    filters = CURRENT_FILTERS.get()
    if filters:  # the project's handlers' filters, enforced by admission
        metadata.append((AUTH_FILTERS_KEY, metadata_value(json.dumps(filters, sort_keys=True))))
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class UnaryPrincipal(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_principal(details), request)


class StreamPrincipal(grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_principal(details), request)


def principal_interceptors() -> list[Any]:
    return [UnaryPrincipal(), StreamPrincipal()]
