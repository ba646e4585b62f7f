"""The graph registry: the built-in graphs plus a `langgraph.json`'s `graphs`.

A target is `path/to/file.py:attribute` or `package.module:attribute`; the
attribute is a compiled graph, a `StateGraph`, or a factory, as LangGraph Platform
accepts them (`langgraph_api/graph.py`): a function taking nothing, the config
(`RunnableConfig`), the server runtime (`langgraph_sdk.runtime.ServerRuntime`,
recognised by its annotation), or both; sync or async; returning a graph, or an
(async) context manager that yields one.

Every use of a graph opens it with `open()`, which calls the factory and, for a
context manager, enters it and exits it when the use ends: a run's resources
live exactly as long as the run (also when it fails or is cancelled). Reads of
state, schemas and the drawing call the factory too, with a read-only runtime
(`runtime.execution_runtime` is None), as the reference does.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import typing
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, get_args, get_origin

from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from langgraph_sdk.runtime import ServerRuntime, _ExecutionRuntime, _ReadRuntime

from waybill.common.project import GraphSpec, Project, ProjectError, load_attribute
from waybill.services.runner.graphs.context import AuthUser, principal_user

AccessContext = Literal["threads.create_run", "threads.update", "threads.read", "assistants.read"]

# The name LangGraph gives a compiled graph that was not named.
DEFAULT_GRAPH_NAME = "LangGraph"


def prepare_project(project: Project | None) -> None:
    """Before any graph is imported: the project's unsupported keys named, its env
    applied, its local dependencies importable, its packages checked."""
    if project is not None:
        project.warn_unsupported()
        project.prepare_to_import()


class GraphNotFoundError(LookupError):
    pass


# ---- loading ------------------------------------------------------------------------


def _as_compiled(value: Any) -> Pregel:
    if isinstance(value, StateGraph):
        return value.compile()
    if isinstance(value, Pregel):
        return value
    raise TypeError(f"expected a graph, got {type(value).__name__}")


# ---- factories ----------------------------------------------------------------------

# String annotations (`from __future__ import annotations`, or the runtime imported
# under TYPE_CHECKING) are resolved with these names, as the reference resolves them.
_ANNOTATION_NAMES = {"ServerRuntime": ServerRuntime, "RunnableConfig": RunnableConfig}


def _is_runtime_annotation(annotation: Any) -> bool:
    """`ServerRuntime`, `ServerRuntime[Ctx]`, a concrete runtime class, `Annotated[...]`."""
    if annotation is ServerRuntime:
        return True
    if isinstance(annotation, type):
        return issubclass(annotation, _ExecutionRuntime | _ReadRuntime)
    origin = get_origin(annotation)
    if origin is ServerRuntime:
        return True
    args = get_args(annotation)
    return origin is not None and bool(args) and _is_runtime_annotation(args[0])


def _factory_arguments(factory: Callable[..., Any]) -> Callable[[Any, Any], dict[str, Any]]:
    """How to call a factory: which of its parameters gets the config, which the runtime."""
    parameters = list(inspect.signature(factory).parameters.values())
    try:
        hints = typing.get_type_hints(factory, localns=_ANNOTATION_NAMES)
    except Exception:  # an annotation that does not resolve counts as none
        hints = {}
    is_runtime = [_is_runtime_annotation(hints.get(p.name, p.annotation)) for p in parameters]
    names = [p.name for p in parameters]
    if not parameters:
        return lambda config, runtime: {}
    if len(parameters) == 1:
        if is_runtime[0]:
            return lambda config, runtime: {names[0]: runtime}
        return lambda config, runtime: {names[0]: config}
    if len(parameters) == 2 and is_runtime.count(True) == 1:
        runtime_name = names[is_runtime.index(True)]
        config_name = names[is_runtime.index(False)]
        return lambda config, runtime: {runtime_name: runtime, config_name: config}
    raise TypeError(
        f"graph factory {getattr(factory, '__qualname__', factory)} must take nothing, the "
        f"config, a ServerRuntime, or both (one annotated ServerRuntime); it takes {names}"
    )


def _is_factory(value: Any) -> bool:
    return callable(value) and not isinstance(value, Pregel | StateGraph)


def run_user(config: Mapping[str, Any] | None, user_id: str, scopes: list[str]) -> AuthUser:
    """The user a factory sees: LangGraph's `langgraph_auth_user` when the run's config
    carries it (custom auth), else Waybill's principal."""
    given = ((config or {}).get("configurable") or {}).get("langgraph_auth_user")
    if isinstance(given, Mapping) and given.get("identity"):
        return AuthUser(given)
    return principal_user(user_id, scopes)


def server_runtime(
    access_context: AccessContext, store: Any, user: AuthUser | None, context: Any = None
) -> Any:
    """The runtime a factory gets: with the run's context only when it executes a run."""
    if access_context == "threads.create_run":
        context = copy.copy(context) if context is not None else None
        return _ExecutionRuntime(
            access_context=access_context, user=user, store=store, context=context
        )
    return _ReadRuntime(access_context=access_context, user=user, store=store)


@asynccontextmanager
async def _entered(made: Any) -> AsyncIterator[Any]:
    """A factory's result as a graph: an (async) context manager is entered, and
    exited when the caller's block ends; a coroutine is awaited."""
    if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
        async with made as graph:
            yield graph
    elif hasattr(made, "__enter__") and hasattr(made, "__exit__"):
        with made as graph:
            yield graph
    elif asyncio.iscoroutine(made):
        yield await made
    else:
        yield made


# ---- the registry -------------------------------------------------------------------


class GraphRegistry:
    def __init__(
        self, specs: Mapping[str, GraphSpec], checkpointer: Any, store: Any = None
    ) -> None:
        self.specs = specs
        self.checkpointer = checkpointer
        self.store = store
        self._loaded: dict[str, Any] = {}
        self._arguments: dict[str, Callable[[Any, Any], dict[str, Any]]] = {}
        self._built: dict[str, Pregel] = {}  # what a factory without inputs returned

    def load_all(self) -> None:
        """Import every graph at start-up so that a broken one fails loudly, once."""
        for graph_id, spec in self.specs.items():
            try:
                self._attribute(graph_id)
            except Exception as error:  # any failure to import is the project's to fix
                reason = f"{type(error).__name__}: {error}"
                raise ProjectError(f"graph '{graph_id}' ({spec.target}): {reason}") from error

    def _attribute(self, graph_id: str) -> Any:
        if graph_id not in self.specs:
            raise GraphNotFoundError(f"graph '{graph_id}' is not registered")
        if graph_id not in self._loaded:
            value = load_attribute(self.specs[graph_id].target)
            if _is_factory(value):
                self._arguments[graph_id] = _factory_arguments(value)
            self._loaded[graph_id] = value
        return self._loaded[graph_id]

    @asynccontextmanager
    async def open(
        self,
        graph_id: str,
        access_context: AccessContext,
        config: RunnableConfig | None = None,
        *,
        checkpointer: Any = None,
        store: Any = None,
        user: AuthUser | None = None,
        context: Any = None,
    ) -> AsyncIterator[Pregel]:
        """The graph for one use, wired to our checkpointer and store (or those given).
        A factory is called for each use (its context manager held for the block)."""
        store = store or self.store
        async with self._made(graph_id, access_context, config, store, user, context) as made:
            graph = _as_compiled(made)
            update = {"checkpointer": checkpointer or self.checkpointer, "store": store}
            if graph.name == DEFAULT_GRAPH_NAME:
                # An unnamed graph goes by its id, as on LangGraph Platform (its state
                # schema is titled `<graph_id>_state`, its root run named so).
                update["name"] = graph_id
            yield graph.copy(update=update)

    @asynccontextmanager
    async def _made(
        self,
        graph_id: str,
        access_context: AccessContext,
        config: RunnableConfig | None,
        store: Any,
        user: AuthUser | None,
        context: Any,
    ) -> AsyncIterator[Any]:
        value = self._attribute(graph_id)
        if graph_id in self._built or not _is_factory(value):
            yield self._built.get(graph_id, value)
            return
        config = config or {"configurable": {}}
        runtime = server_runtime(access_context, store, user, context)
        arguments = self._arguments[graph_id](config, runtime)
        made = value(**arguments)
        if not arguments and isinstance(made, Pregel | StateGraph):
            # A factory without inputs that returns a graph (the built-in lead_agent)
            # would build the same graph every time: it is built once.
            self._built[graph_id] = _as_compiled(made)
        async with _entered(made) as graph:
            yield graph
