"""A LangGraph project's `langgraph.json` (`WAYBILL_GRAPHS`), read in one place.

Every process that needs a part of the project reads it through `Project`: the
runner its graphs, dependencies, env, store and checkpointer settings; admission
the graphs (their system assistants); the gateway `auth` and `http`. The file's
keys follow LangGraph's own schema (langgraph-cli's config); `section(key)` gives
one key's raw value, and the typed accessors below interpret the keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ProjectError(ValueError):
    """The project file cannot be served: start-up stops with this reason."""


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
        return cls(manifest, raw)

    @property
    def root(self) -> Path:
        """The project's folder: relative paths in the file resolve against it."""
        return self.manifest.parent

    def section(self, key: str) -> Any:
        return self.raw.get(key)

    def resolve(self, location: str) -> str:
        """A `./file.py:attribute`-style target with its file made absolute."""
        path, sep, attribute = location.partition(":")
        if path.endswith(".py") or path.startswith("."):
            path = str((self.root / path).resolve())
        return f"{path}{sep}{attribute}"
