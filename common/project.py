"""A LangGraph project's `langgraph.json` (`WAYBILL_GRAPHS`), read in one place.

Every process that needs a part of the project reads it through `Project`: the
runner its graphs, dependencies, env, store and checkpointer settings; admission
the graphs (their system assistants); the gateway `auth` and `http`. The file's
keys follow LangGraph's own schema (langgraph-cli's `schemas.Config`); `section(key)`
gives one key's raw value, and the typed accessors below interpret the keys.

`Project.load` refuses a file LangGraph would refuse (not JSON, a wrong type, no
graphs, a graph file or local dependency that does not exist) with `ProjectError`,
whose message is the one line a process prints before it stops. `PROJECT_KEYS`
(project_schema.py) says which keys Waybill uses and where; `unsupported_keys()`
names the others, so that the runner warns about each once at start-up instead of
ignoring it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import ValidationError

from waybill.common.project_schema import CHECKED_SECTIONS, PROJECT_KEYS, ProjectFile, first_problem

log = logging.getLogger("waybill.project")

# The exit status of a process that refused to start on a project it cannot serve.
PROJECT_EXIT_CODE = 4


class ProjectError(ValueError):
    """The project file cannot be served: start-up stops with this reason."""


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
            ProjectFile.model_validate(self.raw)
        except ValidationError as error:
            raise ProjectError(f"{path}: {first_problem(error, self.raw)}") from error
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
