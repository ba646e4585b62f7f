"""The project's own auth: `auth` in langgraph.json, a `langgraph_sdk.Auth` object.

As on LangGraph Platform, `@auth.authenticate` turns a request into a user and
`@auth.on...` handlers authorize each action on a resource. A handler may stamp
`value["metadata"]` (the routes store what it leaves there), allow (`None`,
`True`), refuse (`False`: 403, a failed `assert`: 403 with its message, an
`Auth.exceptions.HTTPException`: its status), or return a filter on the
resource's metadata (`{"owner": "alice"}`, `{"k": {"$eq": v}}`,
`{"tags": {"$contains": x}}`, `$or`, `$and`). The filter is not applied here: it
travels to admission with the request's gRPC calls (`waybill-auth-filters`)
and is enforced in SQL there, so a resource it excludes is not found (404).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from langgraph_sdk import Auth

from waybill.common.identity import MAX_PRINCIPAL_METADATA_BYTES, ROLE_SCOPES, Principal
from waybill.common.project import Project, ProjectError

log = logging.getLogger("waybill.gateway.auth")

T = TypeVar("T")

# Resource -> filter returned by the project's handlers while serving this request.
CURRENT_FILTERS: contextvars.ContextVar[dict[str, dict[str, Any]] | None] = contextvars.ContextVar(
    "waybill_auth_filters", default=None
)

# The parameters `@auth.authenticate` may ask for by name (LangGraph Platform's set).
AUTHENTICATE_PARAMETERS = (
    "request",
    "headers",
    "authorization",
    "path",
    "method",
    "query_params",
    "path_params",
    "scope",
    "scopes",
    "user",
)

FILTER_OPERATORS = ("$eq", "$contains")


class ProjectUser:
    """`ctx.user` for the handlers: the object `@auth.authenticate` returned, with
    `identity`, `display_name`, `is_authenticated` and `permissions` always there,
    readable as attributes or as keys (as LangGraph Platform's user is)."""

    def __init__(self, returned: Any, as_json: dict[str, Any]) -> None:
        self._returned = returned
        self._json = as_json

    @property
    def identity(self) -> str:
        return str(self._json["identity"])

    @property
    def display_name(self) -> str:
        return str(self._json["display_name"])

    @property
    def is_authenticated(self) -> bool:
        return bool(self._json["is_authenticated"])

    @property
    def permissions(self) -> list[str]:
        return list(self._json.get("permissions") or [])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._json:
            return self._json[name]
        return getattr(self._returned, name)

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __contains__(self, key: object) -> bool:
        return key in self._json

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def get(self, key: str, default: Any = None) -> Any:
        return self._json.get(key, default)

    def dict(self) -> dict[str, Any]:
        return dict(self._json)


class ProjectAuth:
    def __init__(self, auth: Auth) -> None:
        if auth._authenticate_handler is None:
            raise ProjectError(
                "auth: the Auth object has no @auth.authenticate handler; define one."
            )
        self.auth = auth
        self.authenticate_fn = auth._authenticate_handler
        self.wanted = _authenticate_parameters(self.authenticate_fn)
        _warn_on_uncovered(auth)

    @classmethod
    def from_project(cls, project: Project | None) -> ProjectAuth | None:
        """The project's auth, or None when langgraph.json has no `auth.path`."""
        section = project.section("auth") if project is not None else None
        if not section:
            return None
        if not isinstance(section, dict) or not isinstance(section.get("path"), str):
            raise ProjectError('auth: expected {"path": "./auth.py:auth", ...}')
        assert project is not None
        found = project.import_target("auth.path", section["path"])
        if not isinstance(found, Auth):
            raise ProjectError(
                f"auth.path {section['path']!r}: expected a langgraph_sdk.Auth object, got "
                f"{type(found).__name__}"
            )
        return cls(found)

    # ---- authentication ---------------------------------------------------------------

    async def authenticate(self, request: Request) -> Principal:
        arguments = _authenticate_arguments(request, self.wanted)
        try:
            if inspect.iscoroutinefunction(self.authenticate_fn):
                returned = await self.authenticate_fn(**arguments)
            else:
                sync_fn: Callable[..., Any] = self.authenticate_fn
                returned = await asyncio.to_thread(sync_fn, **arguments)
        except Auth.exceptions.HTTPException as error:
            raise _http_error(error) from None
        except HTTPException:
            raise
        except Exception:
            log.exception("the project's @auth.authenticate failed")
            raise HTTPException(500, "Authentication failed: the auth handler raised.") from None
        permissions, user = _normalized(returned)
        request.state.project_user = ProjectUser(returned, user)
        principal = Principal(
            user_id=user["identity"],
            role="user",
            # LangGraph Platform has no scopes: the handlers authorize.
            scopes=ROLE_SCOPES["user"],
            user=user,
            permissions=permissions,
        )
        _check_size(principal)
        return principal

    # ---- authorization ----------------------------------------------------------------

    async def authorize(
        self, request: Request, resource: str, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Run the most specific handler for (resource, action) on `value`; raise
        on refusal; return its filter and remember it for the services."""
        handler = self._handler(resource, action)
        if handler is None:
            return None
        principal: Principal = request.state.principal
        ctx = Auth.types.AuthContext(
            user=request.state.project_user,
            permissions=list(principal.permissions),
            resource=resource,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
        )
        try:
            result = await handler(ctx=ctx, value=value)
        except Auth.exceptions.HTTPException as error:
            raise _http_error(error) from None
        except AssertionError as error:
            raise HTTPException(403, str(error) or "Forbidden") from None
        except Exception:
            log.exception("the project's auth handler for %s.%s failed", resource, action)
            raise HTTPException(500, "Authorization failed: the auth handler raised.") from None
        if result is None or result is True:
            return None
        if result is False:
            raise HTTPException(403, "Forbidden")
        checked = _checked_filter(result, f"{resource}.{action}")
        CURRENT_FILTERS.set({**(CURRENT_FILTERS.get() or {}), resource: checked})
        return checked

    def _handler(self, resource: str, action: str) -> Callable[..., Any] | None:
        """The most specific handler wins, as in the SDK: resource+action, resource,
        action, every resource and action, then the global `@auth.on`."""
        handlers = self.auth._handlers
        for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
            if key in handlers:
                return handlers[key][-1]  # type: ignore[no-any-return]
        if self.auth._global_handlers:
            return self.auth._global_handlers[-1]  # type: ignore[no-any-return]
        return None


async def authorize(
    request: Request, resource: str, action: str, value: dict[str, Any]
) -> dict[str, Any] | None:
    """What the routes call: the project's handler for this action, when the
    request was authenticated by the project's auth (an operator key skips it)."""
    project_auth: ProjectAuth | None = getattr(request.app.state, "project_auth", None)
    principal: Principal | None = getattr(request.state, "principal", None)
    if project_auth is None or principal is None or not principal.by_project_auth:
        return None
    return await project_auth.authorize(request, resource, action, value)


async def apart_from_request(work: Awaitable[T]) -> tuple[T, dict[str, dict[str, Any]]]:
    """`work`'s result and the filters its handlers returned, kept out of the
    request's own (a task runs in a copy of the context): a batch's items each
    carry theirs."""

    async def isolated() -> tuple[T, dict[str, dict[str, Any]]]:
        CURRENT_FILTERS.set(None)
        result = await work
        return result, CURRENT_FILTERS.get() or {}

    return await asyncio.create_task(isolated())


def _check_size(principal: Principal) -> None:
    """A user too big to travel to the services (as gRPC metadata) is refused here,
    rather than failing every call it makes."""
    size = principal.metadata_bytes()
    if size > MAX_PRINCIPAL_METADATA_BYTES:
        raise HTTPException(
            400,
            f"The user @auth.authenticate returned is {size} bytes as JSON; at most "
            f"{MAX_PRINCIPAL_METADATA_BYTES} may travel with a request: return a smaller user.",
        )


def stamped_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """The metadata a handler left in `value` (it may replace or extend it)."""
    metadata = value.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise HTTPException(500, "The auth handler set metadata to something not an object.")
    return metadata


# ---- loading ----------------------------------------------------------------------------


def _authenticate_parameters(fn: Callable[..., Any]) -> set[str]:
    unsupported = [
        name
        for name, parameter in inspect.signature(fn).parameters.items()
        if name not in AUTHENTICATE_PARAMETERS and parameter.default is parameter.empty
    ]
    if unsupported:
        raise ProjectError(
            f"@auth.authenticate asks for unsupported parameters {unsupported}; "
            f"supported: {', '.join(AUTHENTICATE_PARAMETERS)}"
        )
    return {name for name in inspect.signature(fn).parameters if name in AUTHENTICATE_PARAMETERS}


def _warn_on_uncovered(auth: Auth) -> None:
    if not auth._handlers and not auth._global_handlers:
        log.warning(
            "The project's auth has no @auth.on handler: every authenticated user may "
            "read and change every thread, run, assistant, cron and store item."
        )


# ---- the authenticate call ------------------------------------------------------------


def _authenticate_arguments(request: Request, wanted: set[str]) -> dict[str, Any]:
    scope = request.scope
    headers = dict(scope.get("headers") or [])
    available: dict[str, Callable[[], Any]] = {
        "request": lambda: request,
        "headers": lambda: headers,
        "authorization": lambda: request.headers.get("authorization"),
        "path": lambda: scope["path"],
        "method": lambda: request.method,
        "query_params": lambda: request.query_params,
        "path_params": lambda: dict(request.path_params),
        "scope": lambda: scope,
        "scopes": lambda: [],
        "user": lambda: None,
    }
    return {name: available[name]() for name in wanted}


def _normalized(returned: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """(permissions, user as JSON) from what `@auth.authenticate` returned: a string
    identity, a dict with `identity`, an object with `identity`, or (permissions, user)."""
    if isinstance(returned, tuple) and len(returned) == 2:
        permissions, user = returned
    elif isinstance(returned, dict):
        permissions, user = returned.get("permissions") or [], returned
    else:
        permissions, user = getattr(returned, "permissions", None) or [], returned
    if isinstance(user, str):
        fields: dict[str, Any] = {"identity": user}
    elif isinstance(user, dict):
        fields = dict(user)
    elif hasattr(user, "identity"):
        fields = _fields_of(user)
    else:
        raise HTTPException(500, "The auth handler returned no user identity.")
    if not isinstance(fields.get("identity"), str) or not fields["identity"]:
        raise HTTPException(500, "The auth handler returned no user identity.")
    fields.setdefault("display_name", fields["identity"])
    fields.setdefault("is_authenticated", True)
    if isinstance(permissions, str):  # one permission, not its letters
        permissions = [permissions]
    fields["permissions"] = [str(p) for p in permissions]
    as_json = json.loads(json.dumps(fields, default=str))  # what travels must be JSON
    return tuple(as_json["permissions"]), as_json


def _fields_of(user: Any) -> dict[str, Any]:
    if callable(getattr(user, "model_dump", None)):
        fields = dict(user.model_dump(mode="json"))
    elif callable(getattr(user, "dict", None)):
        fields = dict(user.dict())
    else:
        fields = {}
    fields["identity"] = user.identity
    for name in ("display_name", "is_authenticated"):
        if hasattr(user, name):
            fields[name] = getattr(user, name)
    return fields


def _http_error(error: Any) -> HTTPException:
    headers = dict(error.headers) if error.headers else None
    return HTTPException(error.status_code, error.detail, headers=headers)


# ---- filters ------------------------------------------------------------------------------


def _checked_filter(result: Any, where: str) -> dict[str, Any]:
    """A handler's filter, checked here so that admission only ever sees valid ones."""
    if not isinstance(result, dict):
        raise HTTPException(
            500,
            f"The auth handler for {where} returned {type(result).__name__}: expected "
            "a filter dict, None or a boolean.",
        )
    _check_filter(result, where, depth=0)
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError):
        raise HTTPException(
            500, f"The auth handler for {where} returned a non-JSON filter."
        ) from None
    return result


def _check_filter(found: dict[str, Any], where: str, depth: int) -> None:
    if depth > 2:
        raise HTTPException(500, f"The auth filter of {where} nests operators too deeply.")
    for key, value in found.items():
        if key in ("$or", "$and"):
            if not isinstance(value, list) or len(value) < 2:
                raise HTTPException(500, f"{key} in the auth filter of {where} needs 2+ filters.")
            for group in value:
                if not isinstance(group, dict) or not group:
                    raise HTTPException(
                        500, f"{key} in the auth filter of {where}: not a non-empty dict."
                    )
                _check_filter(group, where, depth + 1)
        elif _matches_anything(value):
            # Containing nothing is true of every row: fail closed, not open.
            raise HTTPException(500, f"The auth filter of {where} on {key!r} is empty.")
        elif isinstance(value, dict) and (
            len(value) != 1 or next(iter(value)) not in FILTER_OPERATORS
        ):
            raise HTTPException(
                500,
                f"The auth filter of {where} on {key!r}: expected one of "
                f"{', '.join(FILTER_OPERATORS)}.",
            )


def _matches_anything(value: Any) -> bool:
    """An empty list or object, as a value or an operator's operand."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in FILTER_OPERATORS:
        value = next(iter(value.values()))
    return isinstance(value, list | dict) and not value
