"""The FastAPI application: routers, CORS, and the gRPC peers' lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware

from common.settings import Settings, get_settings
from gateway.errors import validation_error
from gateway.peers import Peers
from gateway.routes import assistants, runs, store, threads

VERSION = "0.1.0"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.peers = Peers.connect(settings)
        app.state.background = set()  # clean-ups that outlive their request
        yield
        await app.state.peers.close()

    app = FastAPI(title="Waybill", version=VERSION, lifespan=lifespan)
    app.add_exception_handler(RequestValidationError, validation_error)
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["Content-Location", "Location"],
    )

    @app.get("/ok")
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {
            "version": VERSION,
            "langgraph_py_version": _langgraph_version(),
            "flags": {"assistants": True, "crons": False, "langsmith": False},
        }

    app.include_router(threads.router)
    app.include_router(runs.router)
    app.include_router(assistants.router)
    app.include_router(store.router)
    return app


def _langgraph_version() -> str:
    from importlib.metadata import version

    return version("langgraph")
