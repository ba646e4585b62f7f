"""What LangGraph Studio draws and fills in forms with: a graph's drawing and its
JSON schemas, derived as LangGraph Platform (langgraph-api) derives them."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from langchain_core.runnables.utils import create_model
from pydantic import TypeAdapter

from waybill.common.errors import invalid

log = logging.getLogger("waybill.runner")

# Keys the server sets itself: never offered in the config form.
SERVER_CONFIG_KEYS = (
    "__pregel_checkpointer",
    "__pregel_store",
    "checkpoint_id",
    "checkpoint_ns",
    "thread_id",
)


def xray_of(every_level: bool, depth: int) -> bool | int:
    """LangGraph's `xray` argument from the request's two fields."""
    return True if every_level else depth


async def drawing_of(graph: Any, xray: bool | int) -> dict[str, Any]:
    """The drawable graph as JSON, subgraphs expanded `xray` levels deep; a node's
    `data.id` (its Python class path) is left out, as the Platform leaves it out."""
    try:
        drawable = (await graph.aget_graph(xray=xray)).to_json()
    except NotImplementedError as error:
        raise invalid("The graph does not support visualization") from error
    for node in drawable.get("nodes", []):
        if isinstance(node.get("data"), dict):
            node["data"].pop("id", None)
    return drawable


async def subgraph_schemas(graph: Any, namespace: str | None, recurse: bool) -> dict[str, Any]:
    """The schemas of each subgraph by its namespace (`parent|child` when recursing)."""
    try:
        return {
            found: schemas_of(subgraph)
            async for found, subgraph in graph.aget_subgraphs(namespace=namespace, recurse=recurse)
        }
    except NotImplementedError as error:
        raise invalid("The graph does not support visualization") from error


def schemas_of(graph: Any) -> dict[str, Any]:
    """Input, output, state, config and context schemas; one that cannot be built is null."""
    makers: dict[str, Callable[[], Any]] = {
        "input_schema": graph.get_input_jsonschema,
        "output_schema": graph.get_output_jsonschema,
        "state_schema": lambda: state_jsonschema(graph),
        "config_schema": lambda: configurable_jsonschema(graph),
        "context_schema": graph.get_context_jsonschema,
    }
    name = str(getattr(graph, "name", None) or "graph")
    return {kind: _schema_or_none(make, f"{name}'s {kind}") for kind, make in makers.items()}


def state_jsonschema(graph: Any) -> dict[str, Any]:
    """Every channel the graph streams, each as the type of its updates (any type a
    schema cannot express as Any), none required: what a state edit may hold."""
    fields: dict[str, Any] = {}
    for key in graph.stream_channels_list:
        update_type = graph.channels[key].UpdateType
        fields[key] = (update_type if _expressible(key, update_type) else Any, None)
    schema: dict[str, Any] = create_model(graph.get_name("State"), **fields).model_json_schema()
    return schema


def configurable_jsonschema(graph: Any) -> dict[str, Any]:
    """The schema of `config.configurable` only (not the rest of a RunnableConfig),
    without the keys the server sets; {} when the graph declares none."""
    config_model = graph.config_schema()
    fields: dict[str, Any] = getattr(config_model, "model_fields", None) or {}
    if "configurable" not in fields:
        return {}
    configurable_type: Any = fields["configurable"].annotation
    schema: dict[str, Any] = TypeAdapter(configurable_type).json_schema()
    if schema:
        for key in SERVER_CONFIG_KEYS:
            schema["properties"].pop(key, None)
    # The configurable type's own name is lost on the way; it is the schema's title.
    config_type = getattr(graph, "config_type", None)
    if config_type is not None and hasattr(config_type, "__name__"):
        schema["title"] = config_type.__name__
    return schema


def _expressible(key: str, update_type: Any) -> bool:
    try:
        create_model(key, __root__=(update_type, None)).model_json_schema()
    except Exception:
        return False
    return True


# The schema failures already said: schemas are built for every assistant read, and
# the same harmless cause (a `typing.TypedDict` state on Python < 3.12) would
# otherwise fill the log with one traceback per request.
_SAID: set[str] = set()


def _schema_or_none(make_schema: Callable[[], Any], what: str = "a schema") -> Any:
    """A schema pydantic cannot express is reported as null, as LangGraph Platform does;
    why, in one warning line once per schema and cause (the traceback at debug level)."""
    try:
        with warnings.catch_warnings():
            # LangGraph deprecates the config schema, but Platform clients still read it.
            warnings.simplefilter("ignore", DeprecationWarning)
            return make_schema()
    except Exception as error:
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        said = f"cannot build {what} as JSON schema (it is null): {cause}"
        if said not in _SAID:
            _SAID.add(said)
            log.warning("%s", said)
        log.debug("%s", said, exc_info=True)
        return None
