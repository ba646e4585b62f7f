"""The project's `http` section (`langgraph.json`), applied to the gateway.

As on LangGraph Platform (`langgraph_api/server.py`):

- `http.app`, a Starlette/FastAPI app of the project, is served beside the API.
  Its routes come after `/ok`, `/metrics`, `/docs` and `/openapi.json` and
  before every other route, so a custom route shadows an API route of the same
  path. They are open unless `enable_custom_route_auth` is true (then they need
  the same credentials as the API). The app's lifespan runs inside the
  gateway's (and in the runner too, for its graphs: common/project_app.py), and
  its middleware wraps every route (`middleware_order:
  "auth_first"` keeps it on the custom routes only).
- `cors` replaces the default CORS settings.
- `disable_assistants|threads|runs|store|meta|webhooks` take those routes away
  (404; `disable_webhooks` also drops a run's or cron's `webhook`).
  `disable_mcp` and `disable_a2a` take away `/mcp` and the A2A routes (`/a2a/...`,
  `/.well-known/agent-card.json`); `disable_ui` is accepted (Waybill serves no UI).
- `mount_prefix` serves everything under a path prefix (`/ok` stays at `/`).
- `configurable_headers` puts the request headers it picks into a run's
  `config.configurable`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, SimpleUser
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from waybill.common.project import Project, ProjectError
from waybill.common.project_app import load_user_app

# Routes no custom route can shadow (LangGraph Platform's `unshadowable_meta_routes`).
UNSHADOWABLE = {
    "/ok",
    "/livez",
    "/metrics",
    "/docs",
    "/openapi.json",
    "/docs/oauth2-redirect",
    "/redoc",
}
# Always served: the probes (`disable_meta` keeps them, so that operators see the server is up).
PROBES = {"/ok", "/livez"}
# What `disable_meta` takes away.
META = UNSHADOWABLE - PROBES | {"/info"}

CORS_KEYS: dict[str, type | tuple[type, ...]] = {
    "allow_origins": list,
    "allow_methods": list,
    "allow_headers": list,
    "allow_credentials": bool,
    "allow_origin_regex": str,
    "expose_headers": list,
    "max_age": int,
}

# The default CORS settings when the project has no `http.cors`.
DEFAULT_EXPOSE = ["Content-Location", "Location", "X-Pagination-Next", "X-Pagination-Total"]

# Never copied into a run's config, whatever `configurable_headers` says (credentials).
SECRET_HEADERS = {"authorization", "x-api-key", "x-service-key", "x-tenant-id"}

SWITCHES = (
    "disable_assistants",
    "disable_threads",
    "disable_runs",
    "disable_store",
    "disable_meta",
    "disable_webhooks",
    "disable_mcp",
    "disable_ui",
    "disable_a2a",
    "enable_custom_route_auth",
)


@dataclass(frozen=True)
class HttpConfig:
    app: str | None = None
    cors: dict[str, Any] | None = None
    mount_prefix: str | None = None
    middleware_order: str = "middleware_first"
    switches: frozenset[str] = field(default_factory=frozenset)
    # `configurable_headers`: (include patterns, exclude patterns), `*` wildcards.
    header_patterns: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def on(self, switch: str) -> bool:
        return switch in self.switches


def http_config(project: Project | None) -> HttpConfig:
    """The `http` section, checked: a wrong type stops start-up with the reason."""
    raw = project.section("http") if project is not None else None
    if raw is None:
        return HttpConfig()
    if not isinstance(raw, dict):
        raise ProjectError("http: must be an object")
    for switch in SWITCHES:
        if not isinstance(raw.get(switch, False), bool):
            raise ProjectError(f"http.{switch}: must be true or false")
    app = raw.get("app")
    if app is not None and (not isinstance(app, str) or ":" not in app):
        raise ProjectError('http.app: must be "path/to/file.py:attribute" or "module:attribute"')
    order = raw.get("middleware_order") or "middleware_first"
    if order not in ("middleware_first", "auth_first"):
        raise ProjectError('http.middleware_order: must be "middleware_first" or "auth_first"')
    return HttpConfig(
        app=app,
        cors=_cors(raw.get("cors")),
        mount_prefix=_mount_prefix(raw.get("mount_prefix")),
        middleware_order=order,
        switches=frozenset(s for s in SWITCHES if raw.get(s)),
        header_patterns=_header_patterns(raw.get("configurable_headers")),
    )


def _header_patterns(raw: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        raise ProjectError("http.configurable_headers: must be an object (includes, excludes)")
    found = []
    for plural, singular in (("includes", "include"), ("excludes", "exclude")):
        patterns = raw.get(plural) or raw.get(singular) or []
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ProjectError(f"http.configurable_headers.{plural}: must be a list of strings")
        found.append(tuple(p.lower() for p in patterns))
    return found[0], found[1]


def _cors(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProjectError("http.cors: must be an object")
    for key, value in raw.items():
        expected = CORS_KEYS.get(key)
        if expected is None:
            raise ProjectError(f"http.cors.{key}: unknown; known: {', '.join(CORS_KEYS)}")
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ProjectError(f"http.cors.{key}: must be a {expected.__name__}")  # type: ignore[union-attr]
    return dict(raw)


def _mount_prefix(raw: Any) -> str | None:
    if not raw:
        return None
    if not isinstance(raw, str) or not raw.startswith("/"):
        raise ProjectError(f"http.mount_prefix {raw!r}: must start with '/' (e.g. '/my-api')")
    return raw.rstrip("/") or None


def cors_options(
    config: HttpConfig, default_origins: str, allow_private_network: bool = False
) -> dict[str, Any]:
    """CORSMiddleware's arguments: the project's `http.cors`, else Waybill's default;
    either way a private-network preflight is answered as the setting says."""
    return {
        **(dict(config.cors) if config.cors is not None else default_cors(default_origins)),
        "allow_private_network": allow_private_network,
    }


def default_cors(default_origins: str) -> dict[str, Any]:
    """LangGraph Platform's default: any method and header; credentials allowed
    when the origins are named (a browser refuses them with `*`)."""
    origins = [o.strip() for o in default_origins.split(",") if o.strip()]
    # X-Pagination-*: LangGraph Platform's paging of searches (the SDK reads Next).
    return {
        "allow_origins": origins,
        "allow_credentials": "*" not in origins,
        "allow_methods": ["*"],
        "allow_headers": ["*"],
        "expose_headers": DEFAULT_EXPOSE,
    }


# ---- what a run is given of its request ------------------------------------------


def picked_headers(headers: Any, config: HttpConfig) -> dict[str, str]:
    """The request headers `configurable_headers` lets into a run's
    `config.configurable` (none by default; never credentials)."""
    includes, excludes = config.header_patterns
    if not includes:
        return {}
    return {
        name: value
        for name, value in headers.items()
        if name not in SECRET_HEADERS
        and any(fnmatch.fnmatchcase(name, p) for p in includes)
        and not any(fnmatch.fnmatchcase(name, p) for p in excludes)
    }


def without_webhook(kwargs: dict[str, Any], config: HttpConfig) -> dict[str, Any]:
    """A cron's run kwargs: no webhook with `disable_webhooks`."""
    if not config.on("disable_webhooks"):
        return kwargs
    return {name: value for name, value in kwargs.items() if name != "webhook"}


def shape_run(kwargs: dict[str, Any], headers: Any, config: HttpConfig) -> dict[str, Any]:
    """A run's kwargs as the `http` section wants them: no webhook with
    `disable_webhooks`; the picked headers in `config.configurable` (they win)."""
    if config.on("disable_webhooks"):
        kwargs = {**kwargs, "webhook": None}
    picked = picked_headers(headers, config)
    if picked:
        run_config = dict(kwargs.get("config") or {})
        run_config["configurable"] = {**(run_config.get("configurable") or {}), **picked}
        kwargs = {**kwargs, "config": run_config}
    return kwargs


# ---- the project's import paths ------------------------------------------------


# ---- http.app -------------------------------------------------------------------


class CustomRoutes(BaseRoute):
    """The project's app as one route of ours: it matches what one of the app's
    routes matches, and hands the request to the app (its own `request.app`,
    exception handlers and routing), past `guard` and `middleware` when given."""

    def __init__(
        self,
        app: Starlette,
        guard: Callable[[Scope], Any] | None = None,
        middleware: list[Middleware] | None = None,
    ) -> None:
        self.app = app
        self.guard = guard
        handler: ASGIApp = app
        for cls, args, kwargs in reversed(middleware or []):
            handler = cls(handler, *args, **kwargs)
        self.handler = handler

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        best = Match.NONE
        for route in self.app.router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return Match.FULL, {}
            if match == Match.PARTIAL:
                best = Match.PARTIAL
        return best, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard is not None and scope["type"] == "http":
            try:
                await self.guard(scope)
            except HTTPException as refused:
                response = JSONResponse(
                    {"detail": refused.detail}, refused.status_code, headers=refused.headers
                )
                await response(scope, receive, send)
                return
        await self.handler(scope, receive, send)


def authenticated(authenticate: Callable[[Any], Any]) -> Callable[[Scope], Any]:
    """A guard: the request must carry the API's credentials (the project's own
    `@auth.authenticate` when it has one); the principal is `request.user` /
    `request.auth` in the custom route, as on the Platform."""
    from starlette.requests import Request

    async def guard(scope: Scope) -> None:
        request = Request(scope)
        principal = await authenticate(request)
        if principal.by_project_auth:  # the user its handler returned, its permissions
            scope["user"] = request.state.project_user
            scope["auth"] = AuthCredentials(list(principal.permissions))
            return
        scope["user"] = SimpleUser(principal.user_id)
        scope["auth"] = AuthCredentials(sorted(principal.scopes))

    return guard


def mount_user_app(app: FastAPI, user_app: Starlette, config: HttpConfig) -> None:
    """Put the project's routes after the unshadowable ones, before the rest; its
    middleware around everything (or, `auth_first`, around its own routes only,
    inside the auth check)."""
    middleware = list(user_app.user_middleware)
    user_app.user_middleware = []  # applied once, below
    guard = None
    if config.on("enable_custom_route_auth"):
        from waybill.gateway.auth import authenticate

        guard = authenticated(authenticate)
    if config.middleware_order == "auth_first":
        route = CustomRoutes(user_app, guard, middleware)
    else:
        route = CustomRoutes(user_app, guard)
        app.user_middleware[:0] = middleware  # outermost, as on the Platform
    routes = app.router.routes
    # With `disable_meta`, even `/ok` may be shadowed (the Platform's plain `/ok` then
    # is a shadowable route too).
    routes.insert(0 if config.on("disable_meta") else first_shadowable(routes), route)


@asynccontextmanager
async def user_lifespan(user_app: Starlette | None) -> AsyncIterator[Any]:
    """The project's app's lifespan, entered inside the gateway's; its state (a
    dict it yields) reaches every request as `request.state`. (The runner enters
    it too, for its graphs: common/project_app.py.)"""
    if user_app is None:
        yield None
        return
    async with user_app.router.lifespan_context(user_app) as state:
        yield state


# ---- disable_* -------------------------------------------------------------------


def route_groups(path: str) -> set[str]:
    """Which `disable_*` switches take a route away (the groups of the Platform's
    `assistants_routes`, `runs_routes`, `threads_routes`, `store_routes`)."""
    groups = set()
    if path.startswith("/assistants"):
        groups.add("disable_assistants")
    elif path.startswith(("/store", "/memory")):  # memory lives in the store
        groups.add("disable_store")
    elif path.startswith(("/runs", "/threads/{thread_id}/runs")) or path.endswith("/token-usage"):
        groups.add("disable_runs")
    elif path.startswith("/threads"):
        groups.add("disable_threads")
    if path.endswith(("/webhooks", "/webhooks/{subscription_id}")):
        groups.add("disable_webhooks")
    if path in META:
        groups.add("disable_meta")
    if path == "/mcp":
        groups.add("disable_mcp")
    if path.startswith(("/a2a/", "/.well-known/agent")):
        groups.add("disable_a2a")
    return groups


def api_routes(routes: list[BaseRoute]) -> list[BaseRoute]:
    """Every route with a path, included routers' too (FastAPI keeps an included
    router as one entry that refers to the router it came from)."""
    found: list[BaseRoute] = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found.extend(api_routes(included.routes))
        elif getattr(route, "path", None) is not None:
            found.append(route)
    return found


class Disabled(BaseRoute):
    """Answers 404 for what a switched-off route would have served (put first,
    so that the route itself is never reached; the routers stay untouched)."""

    def __init__(self, routes: list[BaseRoute]) -> None:
        self.routes = routes

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        for route in self.routes:
            if route.matches(scope)[0] != Match.NONE:
                return Match.FULL, {}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)


def disable_routes(app: FastAPI, config: HttpConfig) -> None:
    routes = app.router.routes
    if config.on("disable_meta"):
        routes[:] = [r for r in routes if getattr(r, "path", None) not in META]
    off = [
        route
        for route in api_routes(routes)
        if any(config.on(group) for group in route_groups(getattr(route, "path", "")))
    ]
    if off:
        routes.insert(first_shadowable(routes), Disabled(off))


def first_shadowable(routes: list[BaseRoute]) -> int:
    return next(
        (i for i, r in enumerate(routes) if getattr(r, "path", None) not in UNSHADOWABLE),
        len(routes),
    )


# ---- mount_prefix -----------------------------------------------------------------


class MountPrefix:
    """Serves the app under `prefix`; `/ok` still answers at the root (health checks)."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path in PROBES:
            await self.app(scope, receive, send)
            return
        if path == self.prefix or path.startswith(self.prefix + "/"):
            # Starlette routes on `path` less `root_path`, as its own Mount does.
            scope = {**scope, "root_path": scope.get("root_path", "") + self.prefix}
            await self.app(scope, receive, send)
            return
        await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)


def served(app: ASGIApp, config: HttpConfig) -> ASGIApp:
    return MountPrefix(app, config.mount_prefix) if config.mount_prefix else app


def apply(app: FastAPI, user_app: Starlette | None, config: HttpConfig) -> None:
    """The `http` section on a gateway app whose routes are all registered."""
    disable_routes(app, config)
    if user_app is not None:  # before the disabled ones: a custom route may take a path
        mount_user_app(app, user_app, config)


def open_project_app(project: Project | None, config: HttpConfig) -> Starlette | None:
    if project is None or config.app is None:
        return None
    return load_user_app(project, config.app)
