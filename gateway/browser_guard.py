"""What a web page may make a gateway with auth off do: nothing it was not meant to.

With auth off (the embedded default) every request acts as the one local user, so a
page in a browser on this machine could otherwise drive the gateway on 127.0.0.1 —
start runs, call `bash` — directly, or by DNS rebinding (a name of the page's that
resolves to 127.0.0.1 afterwards). So, with auth off:

- CORS answers the console's own origins and LangGraph Studio's alone (not `*`);
  a cross-origin request from any other origin is refused (403) before a route runs,
  simple requests included (CORS alone only hides their answers);
- the Host header must be a loopback name (localhost, *.localhost, 127.0.0.1, ::1) or
  one `WAYBILL_ALLOWED_HOSTS` lists (".example.com" adds subdomains), else 400: a
  rebound name is not one (`/ok` excepted, for probes);
- the sandbox's tools are off unless the config says `sandbox: {allow_without_auth:
  true}` (common/auth_mode.py).

CORS set explicitly (`WAYBILL_CORS_ORIGINS`, or the project's `http.cors`) is used as
given; with auth on, CORS is as configured (default `*`) and no Host is checked.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from waybill.common.auth_mode import auth_configured
from waybill.common.settings import Settings
from waybill.gateway import project_http
from waybill.gateway.project_http import HttpConfig

STUDIO_ORIGIN = "https://smith.langchain.com"
# Answered whatever the Host: probes (kubelet's names the pod's IP, HAProxy's none).
PROBE_PATHS = ("/ok", "/livez")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def install(app: FastAPI, http: HttpConfig, settings: Settings) -> None:
    """CORS, and with auth off and CORS not set explicitly, the guard of this module."""
    guarded = not auth_configured(settings)
    explicit = http.cors is not None or "cors_origins" in settings.model_fields_set
    if not guarded or explicit:
        cors = project_http.cors_options(
            http, settings.cors_origins, settings.allow_private_network
        )
        app.add_middleware(CORSMiddleware, **cors)
    else:
        origins = own_origins(settings)
        app.add_middleware(CORSMiddleware, **guarded_cors(origins, settings))
        app.add_middleware(OriginGuard, allowed=frozenset(origins))
    if guarded:  # added last: the outermost, before CORS answers anything
        app.add_middleware(HostGuard, allowed=allowed_hosts(settings))


def own_origins(settings: Settings) -> list[str]:
    """The console's origins (the gateway's own, under each loopback name) and Studio's."""
    port = settings.http_port
    names = [*LOOPBACK_NAMES[:2], "[::1]", *_named_hosts(settings)]
    return [*(f"http://{name}:{port}" for name in names), STUDIO_ORIGIN]


def guarded_cors(origins: list[str], settings: Settings) -> dict[str, Any]:
    return {
        **project_http.default_cors(",".join(origins)),
        "allow_credentials": False,  # nothing here is a cookie; no page needs them
        "allow_private_network": settings.allow_private_network,
    }


def allowed_hosts(settings: Settings) -> tuple[str, ...]:
    return (*LOOPBACK_NAMES, ".localhost", *_configured_hosts(settings))


def _configured_hosts(settings: Settings) -> list[str]:
    return [h.strip().lower() for h in settings.allowed_hosts.split(",") if h.strip()]


def _named_hosts(settings: Settings) -> list[str]:
    return [h for h in _configured_hosts(settings) if not h.startswith(".")]


def host_name(host_header: str) -> str:
    """The name of a Host header without its port; an IPv6 literal without brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def host_allowed(name: str, allowed: tuple[str, ...]) -> bool:
    for entry in allowed:
        if entry.startswith("."):
            if name.endswith(entry) or name == entry[1:]:
                return True
        elif name == entry:
            return True
    return False


class HostGuard:
    """400 for a request whose Host is not a loopback name nor a configured one.
    (Starlette's TrustedHostMiddleware reads an IPv6 Host as "[", so not that one.)"""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"] not in PROBE_PATHS:
            name = host_name(Headers(scope=scope).get("host", ""))
            if not host_allowed(name, self.allowed):
                detail = "Host not allowed: a loopback name, or one WAYBILL_ALLOWED_HOSTS lists."
                await JSONResponse({"detail": detail}, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class OriginGuard:
    """403 for a cross-origin request from an origin CORS does not allow: the page
    would not read the answer, but a simple request would still have been served."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self._allowed(origin, headers.get("host", "")):
                detail = "Cross-origin request refused: this gateway runs with auth off."
                await JSONResponse({"detail": detail}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, host: str) -> bool:
        same_origin = origin.lower() in (f"http://{host}".lower(), f"https://{host}".lower())
        return same_origin or origin in self.allowed
