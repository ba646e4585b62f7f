"""A LangGraph project's `langgraph.json` (`WAYBILL_GRAPHS`), read in one place.

Every process that needs a part of the project reads it through `Project`: the
runner its graphs, dependencies, env, store and checkpointer settings; admission
the graphs (their system assistants); the gateway `auth` and `http`. The file's
keys follow LangGraph's own schema (langgraph-cli's `schemas.Config`); `section(key)`
gives one key's raw value, and the typed accessors below interpret the keys.

`Project.load` refuses a file LangGraph would refuse (not JSON, a wrong type, no
graphs, a graph file or local dependency that does not exist) with `ProjectError`,
whose message is the one line a process prints before it stops. `PROJECT_KEYS` says
which keys Waybill uses and where; `unsupported_keys()` names the others, so that
the runner warns about each once at start-up instead of ignoring it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dotenv import dotenv_values
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

log = logging.getLogger("waybill.project")

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


# The exit status of a process that refused to start on a project it cannot serve.
PROJECT_EXIT_CODE = 4


class ProjectError(ValueError):
    """The project file cannot be served: start-up stops with this reason."""


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


class _ProjectFile(_Section):
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


def _first_problem(error: ValidationError, raw: Any) -> str:
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


# ---- the project --------------------------------------------------------------------


@dataclass(frozen=True)
class GraphSpec:
    """One graph to serve: where it is (`file.py:attribute` or `module:attribute`)."""

    target: str
    description: str | None = None


def is_local_dependency(dependency: str) -> bool:
    """A path (".", "./src", "../lib", "/abs"), not a package to install."""
    return dependency.startswith((".", "/"))


@dataclass(frozen=True)
class Project:
    manifest: Path  # the langgraph.json, absolute
    raw: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Project:
        manifest = path.resolve()
        try:
            raw = json.loads(manifest.read_text())
        except OSError as error:
            raise ProjectError(f"{path}: cannot be read ({error.strerror})") from error
        except json.JSONDecodeError as error:
            raise ProjectError(f"{path}: not valid JSON ({error})") from error
        if not isinstance(raw, dict):
            raise ProjectError(f"{path}: the top level must be a JSON object")
        project = cls(manifest, raw)
        project._check(path)
        return project

    def _check(self, path: Path) -> None:
        """Types per LangGraph's schema, then the files the keys point at."""
        if not self.raw.get("graphs"):
            raise ProjectError(
                f'{path}: no graphs; add at least one, e.g. "graphs": '
                '{"agent": "./my_agent/graph.py:graph"}'
            )
        try:
            _ProjectFile.model_validate(self.raw)
        except ValidationError as error:
            raise ProjectError(f"{path}: {_first_problem(error, self.raw)}") from error
        for graph_id, spec in self.graphs().items():
            location, colon, attribute = spec.target.rpartition(":")
            if not colon or not location or not attribute:
                raise ProjectError(
                    f"{path}: graph '{graph_id}': '{spec.target}' must be "
                    "'./path/to/file.py:attribute' or 'package.module:attribute'"
                )
            if location.endswith(".py") and not Path(location).is_file():
                raise ProjectError(f"{path}: graph '{graph_id}': no such file {location}")
        for folder in self.local_dependencies():
            if not folder.is_dir():
                raise ProjectError(f"{path}: dependency {folder}: no such folder")
        env_file = self.env_file()
        if env_file is not None and not env_file.is_file():
            raise ProjectError(f"{path}: env: no such file {env_file}")

    @property
    def root(self) -> Path:
        """The project's folder: relative paths in the file resolve against it."""
        return self.manifest.parent

    def section(self, key: str) -> Any:
        return self.raw.get(key)

    def resolve(self, location: str) -> str:
        """A `./file.py:attribute`-style target with its file made absolute."""
        path, sep, attribute = location.rpartition(":")
        if not sep:
            path, attribute = location, ""
        if path.endswith(".py") or path.startswith(".") or "/" in path:
            path = str((self.root / path).resolve())
        return f"{path}{sep}{attribute}"

    def import_target(self, key: str, target: str) -> Any:
        """What `target` (the value of `key`, e.g. `http.app`) names, imported the
        way the project's own code expects: env applied, local dependencies and the
        project's folder importable. Any failure is a ProjectError naming the key."""
        self.prepare_to_import()
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        try:
            return load_attribute(self.resolve(target))
        except ProjectError:
            raise
        except Exception as error:  # the project's code may raise anything as it imports
            reason = f"{type(error).__name__}: {error}"
            raise ProjectError(f"{key} {target!r}: cannot be loaded ({reason})") from error

    # ---- graphs ----------------------------------------------------------------------

    def graphs(self) -> dict[str, GraphSpec]:
        """graph id -> where it is and its description; both of LangGraph's forms:
        `"id": "./file.py:graph"` and `"id": {"path": ..., "description": ...}`."""
        found = {}
        for graph_id, entry in (self.section("graphs") or {}).items():
            if isinstance(entry, dict):
                found[graph_id] = GraphSpec(self.resolve(entry["path"]), entry.get("description"))
            else:
                found[graph_id] = GraphSpec(self.resolve(entry))
        return found

    # ---- keys Waybill does not use ---------------------------------------------------

    def unsupported_keys(self) -> list[str]:
        """One line per key of the file no part of Waybill uses (a typo gets a guess)."""
        found = []
        for key in sorted(self._keys()):
            if key in PROJECT_KEYS and PROJECT_KEYS[key] is not None:
                continue
            if key in PROJECT_KEYS:
                found.append(f"'{key}' is not supported by Waybill and has no effect")
                continue
            guess = difflib.get_close_matches(key, list(PROJECT_KEYS), n=1)
            hint = f" (did you mean '{guess[0]}'?)" if guess else ""
            found.append(f"'{key}' is not a langgraph.json key{hint} and has no effect")
        return found

    def _keys(self) -> list[str]:
        keys = list(self.raw)
        for section in CHECKED_SECTIONS:
            value = self.raw.get(section)
            if isinstance(value, dict):
                keys += [f"{section}.{key}" for key in value]
        return keys

    def warn_unsupported(self) -> None:
        for line in self.unsupported_keys():
            log.warning("%s: %s", self.manifest, line)

    # ---- env ---------------------------------------------------------------------------

    def env_file(self) -> Path | None:
        env = self.section("env")
        return (self.root / env).resolve() if isinstance(env, str) else None

    def env_vars(self) -> dict[str, str]:
        """The `env` key: a mapping, or a `.env` file (parsed by python-dotenv)."""
        env_file = self.env_file()
        if env_file is None:
            return dict(self.section("env") or {})
        return {key: value or "" for key, value in dotenv_values(env_file).items()}

    def apply_env(self) -> None:
        """Set the project's env in this process, before its graphs are imported. As
        `langgraph dev` does, the file's values win over the process's own, except
        Waybill's settings (`WAYBILL_*`), which are already read."""
        for key, value in self.env_vars().items():
            if key.startswith("WAYBILL_"):
                log.warning(
                    "%s: env %s is ignored: set Waybill's settings outside it", self.manifest, key
                )
                continue
            os.environ[key] = value

    # ---- dependencies ------------------------------------------------------------------

    def local_dependencies(self) -> list[Path]:
        return [
            (self.root / dependency).resolve()
            for dependency in self.section("dependencies") or []
            if is_local_dependency(dependency)
        ]

    def import_paths(self) -> list[Path]:
        """The folders the local dependencies make importable: each folder, and its
        `src/` too when it is a package with a src layout."""
        paths = []
        for folder in self.local_dependencies():
            paths.append(folder)
            packaged = (folder / "pyproject.toml").is_file() or (folder / "setup.py").is_file()
            if packaged and (folder / "src").is_dir():
                paths.append(folder / "src")
        return paths

    def add_import_paths(self) -> None:
        """Put the local dependencies on `sys.path` ahead of everything else."""
        for path in reversed(self.import_paths()):
            if str(path) in sys.path:
                sys.path.remove(str(path))
            sys.path.insert(0, str(path))

    def missing_packages(self) -> list[str]:
        """The package dependencies not installed here (or at a version the spec
        refuses). Specs that are not package names (git URLs) cannot be checked."""
        missing = []
        for dependency in self.section("dependencies") or []:
            if is_local_dependency(dependency):
                continue
            try:
                requirement = Requirement(dependency)
            except InvalidRequirement:
                log.warning(
                    "%s: dependency %r is not checked: install it yourself",
                    self.manifest,
                    dependency,
                )
                continue
            if not _installed(requirement):
                missing.append(dependency)
        return missing

    def check_packages(self) -> None:
        missing = self.missing_packages()
        if missing:
            command = "pip install " + " ".join(shlex.quote(spec) for spec in missing)
            raise ProjectError(
                f"{self.manifest}: dependencies not installed: {', '.join(missing)}; "
                f"install them with: {command}"
            )

    def prepare_to_import(self) -> None:
        """What a process that imports the project's code does first: env applied,
        local dependencies importable, package dependencies checked."""
        self.apply_env()
        self.add_import_paths()
        self.check_packages()


def _installed(requirement: Requirement) -> bool:
    try:
        version = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return requirement.specifier.contains(version, prereleases=True)


def load_attribute(location: str) -> Any:
    """The object `path/to/file.py:name` or `package.module:name` names: a project's
    graph, auth object, HTTP app or embedding function. A file may import the files
    beside it; each file is imported once per process."""
    module_path, _, attribute = location.rpartition(":")
    if not module_path or not attribute:
        raise ImportError(f"{location!r}: expected './file.py:name' or 'package.module:name'")
    if module_path.endswith(".py"):
        module = _module_from_file(Path(module_path))
    else:
        module = importlib.import_module(module_path)
    if not hasattr(module, attribute):
        raise AttributeError(f"{module_path} has no attribute '{attribute}'")
    return getattr(module, attribute)


def _module_from_file(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # let the file import its neighbours
    name = f"waybill_project_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a broken file is imported afresh once it is fixed
        raise
    return module
