"""The graph registry: the built-in graphs plus a `langgraph.json`'s `graphs`.

A target is `path/to/file.py:attribute` or `package.module:attribute`; the
attribute is a compiled graph, a `StateGraph`, or a factory taking no argument
or the run's config, as `langgraph dev` accepts.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel


class GraphNotFoundError(LookupError):
    pass


def _load_attribute(target: str) -> Any:
    location, _, attribute = target.rpartition(":")
    if location.endswith(".py"):
        path = Path(location)
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))  # let the file import its neighbours
        module_name = f"waybill_user_graph_{abs(hash(location))}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load graph file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    return getattr(module, attribute)


def _as_compiled(value: Any) -> Pregel:
    if isinstance(value, StateGraph):
        return value.compile()
    if isinstance(value, Pregel):
        return value
    raise TypeError(f"expected a graph, got {type(value).__name__}")


class GraphRegistry:
    def __init__(self, specs: dict[str, str], checkpointer: Any, store: Any = None) -> None:
        self.specs = specs
        self.checkpointer = checkpointer
        self.store = store
        self._loaded: dict[str, Any] = {}

    def load_all(self) -> None:
        """Import every graph at start-up so that a broken one fails loudly, once."""
        for graph_id in self.specs:
            self._attribute(graph_id)

    def _attribute(self, graph_id: str) -> Any:
        if graph_id not in self.specs:
            raise GraphNotFoundError(f"graph '{graph_id}' is not registered")
        if graph_id not in self._loaded:
            self._loaded[graph_id] = _load_attribute(self.specs[graph_id])
        return self._loaded[graph_id]

    def build(
        self,
        graph_id: str,
        config: RunnableConfig | None = None,
        checkpointer: Any = None,
        store: Any = None,
    ) -> Pregel:
        """The graph for one run, wired to our checkpointer and store (or those given)."""
        value = self._attribute(graph_id)
        if callable(value) and not isinstance(value, Pregel | StateGraph):
            takes_config = bool(inspect.signature(value).parameters)
            value = value(config or {}) if takes_config else value()
            if not takes_config:
                self._loaded[graph_id] = value  # a factory without inputs builds once
        graph = _as_compiled(value)
        return graph.copy(
            update={
                "checkpointer": checkpointer or self.checkpointer,
                "store": store or self.store,
            }
        )
