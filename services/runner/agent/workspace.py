"""Each thread's workspace, and the file tools that cannot leave it.

Paths are relative to the workspace root. Absolute paths, `..` and symbolic
links (anywhere on the path, whatever they point to) are refused with a tool
error that says why: the tools run with the runner's rights while a sandbox's
uid may change the tree under them, so every access goes from the root's
descriptor through common/workspace_paths.py (and its siblings
workspace_writes.py, workspace_tree.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException, tool

from waybill.common import workspace_paths, workspace_tree, workspace_writes
from waybill.common.errors import ServiceError
from waybill.services.runner.run.scope import RunScope

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


def wait_for_snapshot(config: RunnableConfig) -> None:
    """Before changing a file: this run's workspace snapshot must be taken. The gate
    is the attempt's own (its scope's): a run taken over on the runner that still
    winds its older epoch down has two executions at once, each with its gate."""
    gate = RunScope.of(config).snapshot_gate
    if gate is not None:
        gate.wait()


def workspace_root(workspaces: Path, thread_id: str) -> Path:
    root = workspaces / thread_id
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def remove_workspace(workspaces: Path, thread_id: str) -> None:
    """Delete a thread's workspace with everything in it, at any depth (gone
    already is fine; a link in its place is removed, never followed)."""
    workspace_tree.remove_tree(workspaces / thread_id)


async def remove_workspace_off_loop(workspaces: Path, io_seconds: float, thread_id: str) -> None:
    """`remove_workspace` within `io_seconds` (WAYBILL_WORKSPACE_IO_SECONDS); a
    workspace that cannot be removed is UNAVAILABLE (its thread is kept:
    thread_removal.py)."""
    try:
        await workspace_paths.off_loop(io_seconds, remove_workspace, workspaces, thread_id)
    except (OSError, workspace_paths.WorkspacePathError) as error:
        raise ServiceError(
            grpc.StatusCode.UNAVAILABLE, f"the thread's workspace cannot be removed: {error}"
        ) from error


@contextlib.contextmanager
def opened_workspace(config: RunnableConfig) -> Iterator[int]:
    """This thread's workspace root as a directory descriptor: every file tool
    resolves its path from it (common/workspace_paths.py), never by name."""
    scope = RunScope.of(config)
    if not scope.thread_id:
        raise ToolException("workspace tools need a thread")
    try:
        with workspace_paths.opened_root(
            workspace_root(scope.limits.workspaces, scope.thread_id)
        ) as root:
            yield root
    except workspace_paths.WorkspacePathError as error:
        raise ToolException(str(error)) from error


def _checked(relative: str) -> str:
    if not relative:
        raise ToolException("a path relative to the workspace root is needed")
    if relative.startswith(("/", "\\")):
        raise ToolException(f"path {relative!r} must be relative to the workspace root")
    try:
        return "/".join(workspace_paths.parts_of(relative))
    except workspace_paths.BadPath as error:
        raise ToolException(f"path {relative!r} leaves the workspace; stay inside it") from error


def _refused(path: str, error: workspace_paths.WorkspacePathError) -> ToolException:
    if isinstance(error, workspace_paths.LinkRefused):
        return ToolException(
            f"path {path!r} goes through a link, which leaves the workspace or may; "
            "links are not followed"
        )
    return ToolException(str(error))


def _read_text(root: int, path: str, limit: int | None = None) -> str:
    try:
        data = workspace_paths.read_bytes(root, _checked(path), limit)
    except workspace_paths.WorkspaceMissing as error:
        raise ToolException(f"no file {path!r} in the workspace") from error
    except workspace_paths.WorkspacePathError as error:
        raise _refused(path, error) from error
    return data.decode("utf-8", errors="replace")


def _write_text(root: int, path: str, content: str) -> None:
    try:
        workspace_writes.write_bytes(root, _checked(path), content.encode())
    except workspace_paths.WorkspacePathError as error:
        raise _refused(path, error) from error
    except OSError as error:
        raise ToolException(f"cannot write {path!r}: {error.strerror}") from error


@tool
def write_file(path: str, content: str, config: RunnableConfig) -> str:
    """Write a text file in the workspace (creates folders; replaces an existing file)."""
    wait_for_snapshot(config)
    with opened_workspace(config) as root:
        _write_text(root, path, content)
    return f"wrote {len(content)} characters to {path}"


@tool
def read_file(path: str, config: RunnableConfig) -> str:
    """Read a text file from the workspace."""
    with opened_workspace(config) as root:
        return _read_text(root, path, MAX_READ_BYTES)


@tool
def list_files(config: RunnableConfig, path: str = ".") -> list[str]:
    """List the files under a folder of the workspace."""
    folder = "" if path in ("", ".") else _checked(path)
    with opened_workspace(config) as root:
        try:
            base = workspace_paths.open_dir(root, folder or ".")
        except workspace_paths.LinkRefused as error:
            raise _refused(path, error) from error
        except workspace_paths.WorkspacePathError as error:
            raise ToolException(f"no folder {path!r} in the workspace") from error
        try:
            found = [p for p, _, _ in workspace_tree.walk_files(base)]
        except workspace_paths.WorkspacePathError as error:
            raise ToolException(str(error)) from error
        finally:
            os.close(base)
    return sorted(f"{folder}/{p}" if folder else p for p in found)


@tool
def edit_file(path: str, old: str, new: str, config: RunnableConfig) -> str:
    """Replace the one occurrence of `old` with `new` in a workspace file."""
    wait_for_snapshot(config)
    with opened_workspace(config) as root:
        text = _read_text(root, path)
        count = text.count(old)
        if count != 1:
            raise ToolException(
                f"{path!r} contains the text to replace {count} times; need exactly 1"
            )
        _write_text(root, path, text.replace(old, new))
    return f"edited {path}"


@tool
def present_files(paths: list[str], config: RunnableConfig) -> str:
    """Declare which workspace files are the deliverables of this run."""
    with opened_workspace(config) as root:
        missing = [p for p in paths if not workspace_paths.is_regular_file(root, _checked(p))]
    if missing:
        raise ToolException(f"cannot present files that do not exist: {', '.join(missing)}")
    return f"presented {len(paths)} file(s): {', '.join(paths)}"


WORKSPACE_TOOLS = [write_file, read_file, list_files, edit_file, present_files]
