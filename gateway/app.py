"""The FastAPI application: routers, CORS, and the gRPC peers' lifecycle."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from waybill.common.heap import freeze_startup_objects
from waybill.common.settings import Settings, get_settings
from waybill.common.tracing import start_tracing
from waybill.gateway import observability, project_http
from waybill.gateway.auth import KeyRing, authorize, platform_signed
from waybill.gateway.errors import unencodable_value, validation_error
from waybill.gateway.peers import Peers
from waybill.gateway.project_auth import ProjectAuth
from waybill.gateway.request_limits import RequestSizeLimit
from waybill.gateway.routes import (
    a2a,
    assistants,
    channel_bindings,
    channels,
    console,
    crons,
    deliveries,
    mcp,
    memory,
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
    app.add_middleware(RequestSizeLimit, max_bytes=settings.max_request_bytes)
    cors = project_http.cors_options(http, settings.cors_origins, settings.allow_private_network)
    app.add_middleware(CORSMiddleware, **cors)

    @app.get("/ok")
    async def ok() -> JSONResponse:
        """Ready only when a run can be served: every peer answers its health check and a
        runner holds its work stream to admission. Otherwise 503, naming what is not."""
        services = await app.state.peers.health(settings.ready_check_timeout_seconds)
        if all(state == "healthy" for state in services.values()):
            return JSONResponse({"ok": True})  # LangGraph Platform's body
        return JSONResponse({"ok": False, "services": services}, status_code=503)

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
    server offers). The flags are what Waybill does: assistants and crons, no
    LangSmith tracing (so no tracing replicas, no per-run tracing session)."""
    return {
        "version": VERSION,
        "langgraph_py_version": _langgraph_version(),
        "flags": {
            "assistants": True,
            "crons": True,
            "langsmith": False,
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


def _langgraph_version() -> str:
    from importlib.metadata import version

    return version("langgraph")
