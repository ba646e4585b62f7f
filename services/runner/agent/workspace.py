"""Each thread's workspace, and the file tools that cannot leave it.

Paths are relative to the workspace root. Absolute paths, `..` that climbs out,
and symlinks that point outside are refused with a tool error that says why.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException, tool

from waybill.common.settings import get_settings

MAX_READ_BYTES = 256 * 1024
SNAPSHOT_WAIT_SECONDS = 60.0


class SnapshotGate:
    """Held shut until a run's before-snapshot of its workspace is taken.

    Only these tools change a run's workspace, so the before-snapshot is taken
    when the first of them asks (if none did, delivery takes it with the run's
    receipt: the workspace is then as the run found it), never on
    the way to the run's first token; the tool waits here until it is stored, so
    the snapshot never sees a change the run made. Tools run in worker threads,
    hence a thread Event; `start` must be thread-safe.
    """

    def __init__(self, start: Callable[[], None]) -> None:
        self.start = start
        self._taken = threading.Event()
        self.failure = ""

    def open(self, failure: str = "") -> None:
        self.failure = failure
        self._taken.set()

    def wait(self) -> None:
        if not self._taken.is_set():
            self.start()
        if not self._taken.wait(SNAPSHOT_WAIT_SECONDS):
            raise ToolException("the workspace is not ready yet (its snapshot is late); retry")
        if self.failure:
            raise ToolException(f"the workspace cannot be changed: {self.failure}")


# run id -> its gate, for the runs whose workspace is verified (see execution.py).
SNAPSHOT_GATES: dict[str, SnapshotGate] = {}


def wait_for_snapshot(config: RunnableConfig) -> None:
    """Before changing a file: this run's workspace snapshot must be taken."""
    gate = SNAPSHOT_GATES.get(str((config.get("configurable") or {}).get("run_id")))
    if gate is not None:
        gate.wait()


def workspace_root(thread_id: str) -> Path:
    root = get_settings().workspaces_path() / thread_id
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def remove_workspace(thread_id: str) -> None:
    """Delete a thread's workspace with everything in it (gone already is fine)."""
    root = get_settings().workspaces_path() / thread_id
    if root.is_symlink():
        root.unlink()  # never follow a link out of the workspaces directory
    elif root.exists():
        shutil.rmtree(root)


def confined(config: RunnableConfig, relative: str) -> Path:
    """The real path of `relative` inside this thread's workspace, or a ToolException."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if not thread_id:
        raise ToolException("workspace tools need a thread")
    if not relative or Path(relative).is_absolute():
        raise ToolException(f"path {relative!r} must be relative to the workspace root")
    root = workspace_root(str(thread_id))
    target = (root / relative).resolve()  # follows symlinks, so an escape shows here
    if not target.is_relative_to(root):
        raise ToolException(f"path {relative!r} leaves the workspace; stay inside it")
    return target


def _shown(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


@tool
def write_file(path: str, content: str, config: RunnableConfig) -> str:
    """Write a text file in the workspace (creates folders; replaces an existing file)."""
    wait_for_snapshot(config)
    target = confined(config, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {len(content)} characters to {path}"


@tool
def read_file(path: str, config: RunnableConfig) -> str:
    """Read a text file from the workspace."""
    target = confined(config, path)
    if not target.is_file():
        raise ToolException(f"no file {path!r} in the workspace")
    data = target.read_bytes()[:MAX_READ_BYTES]
    return data.decode("utf-8", errors="replace")


@tool
def list_files(config: RunnableConfig, path: str = ".") -> list[str]:
    """List the files under a folder of the workspace."""
    folder = confined(config, path) if path not in ("", ".") else None
    root = workspace_root(str((config.get("configurable") or {})["thread_id"]))
    base = folder or root
    if not base.is_dir():
        raise ToolException(f"no folder {path!r} in the workspace")
    return sorted(_shown(root, p) for p in base.rglob("*") if p.is_file())


@tool
def edit_file(path: str, old: str, new: str, config: RunnableConfig) -> str:
    """Replace the one occurrence of `old` with `new` in a workspace file."""
    wait_for_snapshot(config)
    target = confined(config, path)
    if not target.is_file():
        raise ToolException(f"no file {path!r} in the workspace")
    text = target.read_text()
    count = text.count(old)
    if count != 1:
        raise ToolException(f"{path!r} contains the text to replace {count} times; need exactly 1")
    target.write_text(text.replace(old, new))
    return f"edited {path}"


@tool
def present_files(paths: list[str], config: RunnableConfig) -> str:
    """Declare which workspace files are the deliverables of this run."""
    missing = [p for p in paths if not confined(config, p).is_file()]
    if missing:
        raise ToolException(f"cannot present files that do not exist: {', '.join(missing)}")
    return f"presented {len(paths)} file(s): {', '.join(paths)}"


WORKSPACE_TOOLS = [write_file, read_file, list_files, edit_file, present_files]
