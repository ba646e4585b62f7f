"""Who is asking: the principal the gateway authenticated, as every service sees it.

The gateway resolves an API key to a `Principal` and sends it with every gRPC
call as metadata (`waybill-user`, `waybill-role`, `waybill-scopes`, and
`waybill-channel` for channel adapters). Services read it back with
`caller_of(context)`. A call without it comes from another service (a runner
reporting a run's end, the scheduler) and is trusted with every user's data: it
reached the service only by presenting the deployment's service token or a client
certificate (common/service_token.py; docs/security.md).

With a project's own auth (`auth` in langgraph.json) the principal also carries
the user its `@auth.authenticate` returned (`waybill-auth-user`, JSON) and its
permissions, and the filters its `@auth.on` handlers returned for the request
(`waybill-auth-filters`: `{resource: filter}`), which admission applies in SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

SCOPES = (
    "threads:read",
    "threads:write",
    "threads:delete",
    "runs:create",
    "runs:read",
    "runs:cancel",
    "store:read",
    "store:write",
    "crons:write",
    "admin",  # every scope, and every user's resources
)

USER_KEY = "waybill-user"
ROLE_KEY = "waybill-role"
SCOPES_KEY = "waybill-scopes"
CHANNEL_KEY = "waybill-channel"
AUTH_USER_KEY = "waybill-auth-user"
PERMISSIONS_KEY = "waybill-permissions"
AUTH_FILTERS_KEY = "waybill-auth-filters"
# At most this much of a call's metadata is the principal: gRPC refuses calls whose
# metadata passes 8 KiB (its soft limit: some calls; 16 KiB hard: all) with
# RESOURCE_EXHAUSTED, and the auth filters and tracing headers travel beside it.
MAX_PRINCIPAL_METADATA_BYTES = 6144
# gRPC metadata values are printable ASCII: identities and JSON travel percent-encoded
# (`metadata_value`), so a user named "José" or a filter on "équipe" passes.


@dataclass(frozen=True)
class Principal:
    user_id: str
    role: str = "user"
    scopes: frozenset[str] = field(default_factory=frozenset)
    # Set when a channel adapter or the scheduler acts on behalf of `user_id`:
    # who on the platform sent the message, e.g. {"platform": "slack", "user": "U1"}.
    channel: dict[str, str] | None = None
    # Set when the project's own `@auth.authenticate` made this principal: the
    # user as the handler returned it (JSON), and its permissions.
    user: dict[str, Any] | None = None
    permissions: tuple[str, ...] = ()

    @property
    def by_project_auth(self) -> bool:
        return self.user is not None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    def allows(self, scope: str) -> bool:
        return self.is_admin or scope in self.scopes

    @property
    def owner_filter(self) -> str | None:
        """The owner whose resources this principal may see; None means all (admin).
        A project-auth principal is not confined by owner: as on LangGraph Platform,
        the project's `@auth.on` handlers decide, through the filters they return."""
        return None if self.is_admin or self.by_project_auth else self.user_id

    def identity(self) -> dict[str, Any]:
        """What a run's context carries about who started it (injected, never sent)."""
        found: dict[str, Any] = {"user_id": self.user_id, "role": self.role}
        if self.channel:
            found["channel"] = dict(self.channel)
        return found

    def to_metadata(self) -> list[tuple[str, str]]:
        pairs = [
            (USER_KEY, metadata_value(self.user_id)),
            (ROLE_KEY, metadata_value(self.role)),
            (SCOPES_KEY, ",".join(sorted(self.scopes))),
        ]
        if self.channel:
            pairs.append((CHANNEL_KEY, metadata_value(json.dumps(self.channel, sort_keys=True))))
        if self.user is not None:
            pairs.append((AUTH_USER_KEY, metadata_value(json.dumps(self.user, sort_keys=True))))
            pairs.append((PERMISSIONS_KEY, metadata_value(json.dumps(list(self.permissions)))))
        return pairs

    def metadata_bytes(self) -> int:
        """How much of a call's gRPC metadata this principal takes."""
        return sum(len(key) + len(value) for key, value in self.to_metadata())

    @classmethod
    def from_metadata(cls, metadata: Iterable[tuple[str, Any]]) -> Principal | None:
        found = {key: unquote(value) for key, value in metadata if isinstance(value, str)}
        user_id = found.get(USER_KEY)
        if not user_id:
            return None
        channel = json.loads(found[CHANNEL_KEY]) if found.get(CHANNEL_KEY) else None
        user = json.loads(found[AUTH_USER_KEY]) if found.get(AUTH_USER_KEY) else None
        permissions = json.loads(found.get(PERMISSIONS_KEY) or "[]")
        return cls(
            user_id=user_id,
            role=found.get(ROLE_KEY, "user"),
            scopes=frozenset(s for s in found.get(SCOPES_KEY, "").split(",") if s),
            channel=channel,
            user=user,
            permissions=tuple(str(p) for p in permissions),
        )


def every_scope() -> frozenset[str]:
    return frozenset(SCOPES)


READ_ONLY = ("threads:read", "runs:read", "store:read")
# A role's scopes when its principal lists none (the gateway's keys, and the
# owners channel adapters act for).
ROLE_SCOPES: dict[str, frozenset[str]] = {
    "admin": every_scope(),
    "user": frozenset(s for s in SCOPES if s != "admin"),
    "reader": frozenset(READ_ONLY),
}


# The one user of a deployment that runs with auth off (the embedded default).
LOCAL_USER = Principal(user_id="local", role="admin", scopes=every_scope())
# The principal `WAYBILL_API_KEY` names.
API_KEY_USER = Principal(user_id="admin", role="admin", scopes=every_scope())


def caller_of(context: Any) -> Principal | None:
    """The principal of an incoming gRPC call, or None for a service-to-service call."""
    metadata: Sequence[tuple[str, Any]] = context.invocation_metadata() or ()
    return Principal.from_metadata(metadata)


def acting_user(context: Any) -> str:
    """Who a call acts for: its principal, or the local user for a service's own call."""
    caller = caller_of(context)
    return caller.user_id if caller else LOCAL_USER.user_id


def owner_filter(context: Any) -> str | None:
    """The owner a call is confined to; None for admins and other services."""
    caller = caller_of(context)
    return None if caller is None else caller.owner_filter


def metadata_value(text: str) -> str:
    """`text` as a gRPC metadata value (see AUTH_FILTERS_KEY)."""
    return quote(text)


def auth_filters(context: Any) -> dict[str, dict[str, Any]]:
    """The filters the project's auth handlers returned while serving this call,
    by resource ("threads", "assistants", "crons")."""
    metadata: Sequence[tuple[str, Any]] = context.invocation_metadata() or ()
    raw = next((v for k, v in metadata if k == AUTH_FILTERS_KEY and isinstance(v, str)), None)
    return _filters_in(unquote(raw) if raw else "")


def _filters_in(text: str | bytes) -> dict[str, dict[str, Any]]:
    found = json.loads(text) if text else {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, dict) and v}


def with_run_filters(
    filters: dict[str, dict[str, Any]], own_json: bytes
) -> dict[str, dict[str, Any]]:
    """The call's filters and one run's own (a batch item's), both to hold."""
    combined = dict(filters)
    for resource, own in _filters_in(own_json).items():
        combined[resource] = {"$and": [combined[resource], own]} if resource in combined else own
    return combined


def auth_filter(context: Any, resource: str) -> dict[str, Any] | None:
    """The filter for `resource`; None when there is none."""
    return auth_filters(context).get(resource)
