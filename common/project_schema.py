"""LangGraph's schema of `langgraph.json` as Waybill reads it: which keys it uses
and who reads each (`PROJECT_KEYS`), the types LangGraph expects (langgraph-cli's
`schemas.Config`), and the one line that says where a wrong value is. `Project`
(project.py) applies them."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

# Every key of LangGraph's schema that Waybill reads, and who reads it; `None`: a key
# of the schema Waybill does not support (a start-up warning names it). Nested keys
# are listed under the sections in `CHECKED_SECTIONS`. A key missing here is unknown
# (a typo, most likely) and warned about too.
RUNNER = "runner"
ADMISSION_AND_RUNNER = "admission (system assistants) and runner"
GATEWAY_AUTH = "gateway: custom auth"
GATEWAY_HTTP = "gateway: http"
HTTP_APP = "gateway: http; runner: its lifespan (common/project_app.py)"
STORE = "runner: long-term store"
CHECKPOINTER = "runner: checkpointer"
BUILD = "waybill dockerfile (build only)"

PROJECT_KEYS: dict[str, str | None] = {
    "graphs": ADMISSION_AND_RUNNER,
    "dependencies": RUNNER,  # local paths importable; packages checked at start-up
    "env": RUNNER,
    "auth": GATEWAY_AUTH,
    "auth.path": GATEWAY_AUTH,
    "auth.disable_studio_auth": GATEWAY_AUTH,  # no Studio keys here: always custom auth
    "auth.openapi": None,
    "auth.cache": None,
    "http": GATEWAY_HTTP,
    "http.app": HTTP_APP,
    "http.cors": GATEWAY_HTTP,
    "http.disable_assistants": GATEWAY_HTTP,
    "http.disable_threads": GATEWAY_HTTP,
    "http.disable_runs": GATEWAY_HTTP,
    "http.disable_store": GATEWAY_HTTP,
    "http.disable_meta": GATEWAY_HTTP,
    "http.disable_mcp": GATEWAY_HTTP,
    "http.disable_ui": GATEWAY_HTTP,
    "http.disable_webhooks": GATEWAY_HTTP,
    "http.disable_a2a": GATEWAY_HTTP,  # accepted: Waybill serves no A2A routes yet
    "http.mount_prefix": GATEWAY_HTTP,
    "http.enable_custom_route_auth": GATEWAY_HTTP,
    "http.configurable_headers": GATEWAY_HTTP,
    "http.logging_headers": GATEWAY_HTTP,
    "http.middleware_order": GATEWAY_HTTP,
    "store": STORE,
    "store.index": STORE,
    "store.ttl": STORE,
    "checkpointer": CHECKPOINTER,
    "checkpointer.ttl": CHECKPOINTER,
    "checkpointer.path": None,
    "checkpointer.serde": None,
    # Image building only: `waybill dockerfile` reads them, a running server does not.
    "python_version": BUILD,
    "pip_config_file": BUILD,
    "pip_installer": BUILD,
    "dockerfile_lines": BUILD,
    "base_image": BUILD,
    "image_distro": BUILD,
    "node_version": BUILD,
    "keep_pkg_tools": BUILD,
    # In LangGraph's schema, not supported by Waybill.
    "api_version": None,
    "source": None,
    "encryption": None,
    "priority": None,
    "webhooks": None,
    "ui": None,
    "ui_config": None,
}
# The sections whose own keys are checked one by one (the others' values are opaque).
CHECKED_SECTIONS = ("auth", "http", "store", "checkpointer")


# ---- LangGraph's schema (langgraph_cli/schemas.py), for types only ------------------
# Unknown keys are allowed here: they are warned about, as langgraph-cli does.


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _GraphDef(_Section):
    path: StrictStr
    description: StrictStr | None = None


class _IndexConfig(_Section):
    dims: StrictInt
    embed: StrictStr
    fields: list[StrictStr] | None = None


class _StoreTTL(_Section):
    refresh_on_read: StrictBool | None = None
    default_ttl: float | None = None
    # LangGraph's schema says whole minutes; fractions are accepted (tests sweep often).
    sweep_interval_minutes: float | None = None


class _StoreConfig(_Section):
    index: _IndexConfig | None = None
    ttl: _StoreTTL | None = None


class _ThreadTTL(_Section):
    strategy: Literal["delete", "keep_latest"] | None = None
    default_ttl: float | None = None
    sweep_interval_minutes: float | None = None
    sweep_limit: StrictInt | None = None


class _CheckpointerConfig(_Section):
    path: StrictStr | None = None
    ttl: _ThreadTTL | None = None
    serde: dict[str, Any] | None = None


class _AuthConfig(_Section):
    path: StrictStr | None = None
    disable_studio_auth: StrictBool | None = None
    openapi: dict[str, Any] | None = None
    cache: dict[str, Any] | None = None


class _HttpConfig(_Section):
    app: StrictStr | None = None
    disable_assistants: StrictBool | None = None
    disable_threads: StrictBool | None = None
    disable_runs: StrictBool | None = None
    disable_store: StrictBool | None = None
    disable_mcp: StrictBool | None = None
    disable_a2a: StrictBool | None = None
    disable_meta: StrictBool | None = None
    disable_ui: StrictBool | None = None
    disable_webhooks: StrictBool | None = None
    cors: dict[str, Any] | None = None
    configurable_headers: dict[str, Any] | None = None
    logging_headers: dict[str, Any] | None = None
    middleware_order: Literal["auth_first", "middleware_first"] | None = None
    enable_custom_route_auth: StrictBool | None = None
    mount_prefix: StrictStr | None = None


class ProjectFile(_Section):
    graphs: dict[str, StrictStr | _GraphDef]
    dependencies: list[StrictStr] = []
    env: dict[str, StrictStr] | StrictStr = {}
    store: _StoreConfig | None = None
    checkpointer: _CheckpointerConfig | None = None
    auth: _AuthConfig | None = None
    http: _HttpConfig | None = None
    python_version: StrictStr | None = None
    node_version: StrictStr | None = None
    api_version: StrictStr | None = None
    base_image: StrictStr | None = None
    image_distro: Literal["debian", "wolfi", "bookworm"] | None = None
    pip_config_file: StrictStr | None = None
    pip_installer: Literal["auto", "pip", "uv"] | None = None
    dockerfile_lines: list[StrictStr] | None = None
    keep_pkg_tools: StrictBool | list[Literal["pip", "setuptools", "wheel"]] | None = None
    source: dict[str, Any] | None = None
    encryption: dict[str, Any] | None = None
    priority: dict[str, Any] | None = None
    webhooks: dict[str, Any] | None = None
    ui: dict[str, StrictStr] | None = None
    ui_config: dict[str, Any] | None = None


_MODEL_NAME = re.compile(r" or instance of _\w+")  # our model classes mean nothing to a user


def first_problem(error: ValidationError, raw: Any) -> str:
    """One line: where the wrong value is in the file, and what was expected there.
    Pydantic names a union's branches in its locations; they are not in the file, so
    they are dropped, and the branches' messages joined ("a dictionary or a string")."""
    problems = [
        (_place_in_file(raw, e["loc"], e["type"] == "missing"), _MODEL_NAME.sub("", e["msg"]))
        for e in error.errors()
    ]
    deepest = max(len(place) for place, _ in problems)
    where = next(place for place, _ in problems if len(place) == deepest)
    messages = list(dict.fromkeys(msg for place, msg in problems if place == where))
    expected = messages[0] + "".join(
        " or " + msg.removeprefix("Input should be ") for msg in messages[1:]
    )
    return f"{'.'.join(where)}: {expected}" if where else expected


def _place_in_file(raw: Any, location: tuple[Any, ...], missing: bool) -> list[str]:
    """The keys of `location` that are in the file (a missing key is kept last)."""
    place, node = [], raw
    for index, part in enumerate(location):
        if _has(node, part):
            node = node[part]
        elif not (missing and index == len(location) - 1):
            continue  # a union branch's name
        place.append(str(part))
    return place


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and part < len(node)
