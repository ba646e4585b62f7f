"""The FastAPI application: routers, CORS, and the gRPC peers' lifecycle."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from waybill.common.heap import freeze_startup_objects
from waybill.common.settings import Settings, get_settings
from waybill.common.tracing import start_tracing
from waybill.gateway import browser_guard, observability, project_http
from waybill.gateway.auth import KeyRing, authorize, platform_signed
from waybill.gateway.errors import QuotaRefused, quota_refused, unencodable_value, validation_error
from waybill.gateway.nul_characters import RefuseNulCharacters
from waybill.gateway.peers import Peers
from waybill.gateway.project_auth import ProjectAuth
from waybill.gateway.protocols import mcp
from waybill.gateway.protocols.a2a import routes as a2a
from waybill.gateway.request_limits import RequestSizeLimit
from waybill.gateway.request_rate import RequestRate
from waybill.gateway.routes import (
    assistants,
    channel_bindings,
    channels,
    console,
    crons,
    deliveries,
    memory,
    quotas,
    run_events,
    runs,
    stateless_runs,
    store,
    thread_commands,
    threads,
)

VERSION = "0.1.0"

log = logging.getLogger("waybill.gateway")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # The project's `http` section: read (and its app imported) before anything starts.
    http = project_http.http_config(settings.project())
    user_app = project_http.open_project_app(settings.project(), http)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[Any]:
        app.state.settings = settings
        app.state.keyring = KeyRing.from_settings(settings)
        per_second = settings.quotas().gateway.requests_per_second
        app.state.request_rate = RequestRate(per_second) if per_second else None
        app.state.project_auth = ProjectAuth.from_project(settings.project())
        if app.state.project_auth is not None:
            log.info("Auth: the project's @auth.authenticate and @auth.on handlers.")
        elif not app.state.keyring.enabled:
            log.warning(
                "AUTH IS OFF: every request acts as the one local user. Set WAYBILL_API_KEY "
                "(or auth.principals in the YAML config) before exposing this gateway."
            )
        app.state.peers = Peers.connect(settings)
        app.state.background = set()  # clean-ups that outlive their request
        freeze_startup_objects()
        async with project_http.user_lifespan(user_app) as state:
            yield state  # the project's app's lifespan state, if any
        await app.state.peers.close()

    start_tracing("gateway")  # before the peers' channels are made
    app = FastAPI(title="Waybill", version=VERSION, lifespan=lifespan)
    observability.install(app)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(orjson.JSONEncodeError, unencodable_value)
    app.add_exception_handler(QuotaRefused, quota_refused)
    app.add_middleware(RequestSizeLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(RefuseNulCharacters)
    browser_guard.install(app, http, settings)  # CORS; with auth off, Host and Origin

    @app.get("/ok")
    async def ok() -> JSONResponse:
        """Ready only when a run can be served: every peer answers its health check and a
        runner holds its work stream to admission. Otherwise 503, naming what is not."""
        services = await app.state.peers.health(settings.ready_check_timeout_seconds)
        if all(state == "healthy" for state in services.values()):
            return JSONResponse({"ok": True})  # LangGraph Platform's body
        return JSONResponse({"ok": False, "services": services}, status_code=503)

    @app.get("/livez")
    async def livez() -> JSONResponse:
        """Liveness: the process serves HTTP. Asks no peer, so a runner outage (which
        `/ok` reports as 503) never makes Kubernetes restart a healthy gateway."""
        return JSONResponse({"ok": True})

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return server_info()

    # /ok and /info stay open; every API route needs a principal and its scope.
    guarded = [Depends(authorize)]
    routers = (
        threads.router,
        thread_commands.router,
        runs.router,
        stateless_runs.router,
        run_events.router,
        deliveries.router,
        assistants.router,
        store.router,
        memory.router,
        quotas.router,
        crons.router,
        mcp.router,
        a2a.router,
        channel_bindings.router,
    )
    for router in routers:
        app.include_router(router, dependencies=guarded)
    # Only refuses (the protocol's WebSocket transport is not served): nothing to guard.
    app.include_router(thread_commands.websocket_router)
    # Chat platforms authenticate with their own signatures, checked by the service.
    app.include_router(channels.router, dependencies=[Depends(platform_signed)])
    console.install(app)  # static files, open: the page asks for the key itself
    project_http.apply(app, user_app, http)
    app.state.http = http  # the server serves it under `http.mount_prefix`
    return app


def server_info() -> dict[str, Any]:
    """`/info` in LangGraph Platform's shape (Studio reads it to learn what the
    server offers). The flags are what Waybill does: assistants and crons;
    `langsmith` says whether runs are traced to LangSmith (as the reference
    computes it, with the LangSmith API key in place of its control-plane key); no
    tracing replicas, no per-run tracing session."""
    return {
        "version": VERSION,
        "langgraph_py_version": _langgraph_version(),
        "flags": {
            "assistants": True,
            "crons": True,
            "langsmith": langsmith_tracing(),
            "langsmith_tracing_replicas": False,
            "langsmith_tracing_session_on_runs": False,
        },
        # Not a LangSmith deployment: no project, revision or tenant to name.
        "host": {
            "kind": "self-hosted",
            "project_id": None,
            "host_revision_id": None,
            "revision_id": None,
            "tenant_id": None,
        },
    }


# LangSmith's switches, first set wins (langsmith-sdk's and LangGraph Platform's order).
TRACING_SWITCHES = (
    "LANGSMITH_TRACING",
    "LANGSMITH_TRACING_V2",
    "LANGCHAIN_TRACING_V2",
    "LANGCHAIN_TRACING",
)
TRUE_WORDS = {"1", "true", "yes", "on"}


def langsmith_tracing() -> bool:
    """Whether LangChain traces runs to LangSmith: a tracing switch on and an API key."""
    switch = next((os.environ[name] for name in TRACING_SWITCHES if name in os.environ), "")
    api_key = os.environ.get("LANGSMITH_API_KEY") or os.environ.get("LANGCHAIN_API_KEY")
    return switch.strip().lower() in TRUE_WORDS and bool(api_key)


def _langgraph_version() -> str:
    from importlib.metadata import version

    return version("langgraph")
