"""The project's `http.app` (`langgraph.json`): imported, and its lifespan entered.

Two processes import it (issue 39). The gateway serves its routes and enters its
lifespan inside its own (gateway/project_http.py), so the routes see what the
lifespan opened. The runner, where graphs run, imports it too and enters its
lifespan once at start-up, after the graphs are loaded and before it takes a run,
and exits it at shutdown, after its runs stopped: a client or a pool the lifespan
puts in a module that a graph imports is there for every run. That is what
LangGraph Platform does: its API server runs graphs in the same process, and its
dedicated queue workers enter the app's lifespan too (`langgraph_api/
queue_entrypoint.py`). Each process has its own copy: what the lifespan opens in
the gateway is not what a graph sees in the runner.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from waybill.common.project import Project, ProjectError

log = logging.getLogger("waybill.project")


def app_target(project: Project | None) -> str | None:
    """`http.app` as written (`"./webapp.py:app"`, `"module:app"`), checked."""
    raw = project.section("http") if project is not None else None
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProjectError("http: must be an object")
    app = raw.get("app")
    if app is not None and (not isinstance(app, str) or ":" not in app):
        raise ProjectError('http.app: must be "path/to/file.py:attribute" or "module:attribute"')
    return app


def load_user_app(project: Project, target: str) -> Starlette:
    """Import `http.app`; anything else than a Starlette/FastAPI app stops start-up."""
    app = project.import_target("http.app", target)
    if not isinstance(app, Starlette):
        raise ProjectError(
            f"http.app {target!r}: is a {type(app).__name__}, not a Starlette or FastAPI app"
        )
    return app


@asynccontextmanager
async def runner_lifespan(project: Project | None) -> AsyncIterator[None]:
    """The runner's side: the project's app imported and its lifespan entered for as
    long as the block runs (nothing without `http.app`). A lifespan that raises at
    start-up is a ProjectError naming the app (the runner refuses to start with that
    one line); one that raises at shutdown is logged, and the shutdown goes on."""
    target = app_target(project)
    if project is None or target is None:
        yield
        return
    app = load_user_app(project, target)
    context = app.router.lifespan_context(app)
    try:
        await context.__aenter__()
    except Exception as error:  # the project's code may raise anything
        raise ProjectError(
            f"http.app {target!r}: its lifespan failed at start-up "
            f"({type(error).__name__}: {error})"
        ) from error
    log.info("http.app %r: lifespan entered (the runner's graphs see what it opened)", target)
    try:
        yield
    finally:  # a normal shutdown for the app, whatever stopped the runner
        try:
            await context.__aexit__(None, None, None)
        except Exception as error:
            log.warning(
                "http.app %r: its lifespan failed at shutdown (%s: %s)",
                target,
                type(error).__name__,
                error,
            )
