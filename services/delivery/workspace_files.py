"""A thread's workspace as delivery sees it: the same directory the runner's file
tools write (`WAYBILL_WORKSPACES_DIR/<thread_id>`, a shared volume when the two
run on different machines). Snapshots, the changes between two of them, and the
confinement of paths that come from outside. A sandbox's uid may change the tree
at any moment, so every access goes through common/workspace_paths.py and its
siblings (workspace_writes.py, workspace_tree.py)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import grpc

from waybill.common import workspace_paths, workspace_tree, workspace_writes
from waybill.common.errors import ServiceError, invalid, not_found, refused
from waybill.common.settings import Settings

CHUNK = 64 * 1024
UPLOADS = "uploads"


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, "/"-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Change:
    path: str
    change: str  # created | modified | deleted
    size: int
    sha256: str


def thread_root(settings: Settings, thread_id: str) -> Path:
    return settings.workspaces_path() / thread_id


def _digest(fd: int) -> str:
    sha = hashlib.sha256()
    while block := os.read(fd, CHUNK):
        sha.update(block)
    return sha.hexdigest()


def _entry(folder_fd: int, name: str, relative: str) -> FileEntry | None:
    """The file as it is now, or None if it changed into something else since
    it was listed (a link, a FIFO, gone): opened from its folder, never by path."""
    try:
        fd = workspace_paths.open_regular(folder_fd, name)
    except workspace_paths.WorkspacePathError:
        return None
    try:
        return FileEntry(relative, os.fstat(fd).st_size, _digest(fd))
    finally:
        os.close(fd)


def snapshot(root: Path) -> list[FileEntry]:
    """Every regular file under `root` (links are not followed: a link out of the
    workspace is not the run's file). A missing workspace is empty."""
    try:
        root_fd = workspace_paths.open_root(root)
    except workspace_paths.WorkspacePathError:
        return []
    try:
        found = (_entry(fd, name, path) for path, fd, name in workspace_tree.walk_files(root_fd))
        return [entry for entry in found if entry is not None]
    finally:
        os.close(root_fd)


async def snapshot_of(settings: Settings, thread_id: str) -> list[FileEntry]:
    """The thread's workspace snapshot, off the event loop, within
    WAYBILL_WORKSPACE_IO_SECONDS (504 beyond it)."""
    root = thread_root(settings, thread_id)
    try:
        return await workspace_paths.off_loop(settings.workspace_io_seconds, snapshot, root)
    except workspace_paths.WorkspacePathError as error:
        raise served(error) from error


def changes(before: list[FileEntry], after: list[FileEntry]) -> list[Change]:
    old = {entry.path: entry for entry in before}
    new = {entry.path: entry for entry in after}
    found = []
    for path in sorted(old.keys() | new.keys()):
        was, now = old.get(path), new.get(path)
        if was is None and now is not None:
            found.append(Change(path, "created", now.size, now.sha256))
        elif now is None and was is not None:
            found.append(Change(path, "deleted", 0, ""))
        elif was is not None and now is not None and was.sha256 != now.sha256:
            found.append(Change(path, "modified", now.size, now.sha256))
    return found


def normalized(path: str) -> str:
    """A presented or requested path as snapshots spell it ("./a//b" -> "a/b")."""
    parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in ("", ".")]
    return "/".join(parts)


def served(error: workspace_paths.WorkspacePathError) -> ServiceError:
    """The status a refused workspace access answers with."""
    if isinstance(error, workspace_paths.WorkspaceTooSlow):
        return ServiceError(grpc.StatusCode.DEADLINE_EXCEEDED, str(error))
    if isinstance(error, workspace_paths.WorkspaceMissing):
        return not_found(str(error))
    if isinstance(error, workspace_paths.BadPath):
        return invalid(str(error))
    return refused(str(error))  # not a regular file, a link: 400


def open_output(root: Path, relative: str) -> int:
    """A read descriptor of the regular file `relative` in the workspace `root`."""
    clean = normalized(relative)
    if not clean or PurePosixPath(relative).is_absolute() or ".." in clean.split("/"):
        raise invalid(f"path {relative!r} must be relative to the workspace and stay inside it")
    with workspace_paths.opened_root(root) as root_fd:
        return workspace_paths.open_regular(root_fd, clean)


# The longest file name most file systems take (bytes, not characters).
MAX_NAME_BYTES = 255


def check_upload_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise invalid(f"upload name {name!r} must be a plain file name (no folders)")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise invalid(f"upload name is {len(name.encode())} bytes; at most {MAX_NAME_BYTES}")


def write_upload(root: Path, name: str, data: bytes) -> FileEntry:
    """Write `uploads/<name>` whole, from the workspace root's descriptor: a new
    file (O_EXCL) in the opened folder renamed over the name, which replaces a
    link rather than writing through it (common/workspace_writes.py)."""
    check_upload_name(name)
    try:
        with workspace_paths.opened_root(root, create=True) as root_fd:
            workspace_writes.write_bytes(root_fd, f"{UPLOADS}/{name}", data)
    except workspace_paths.LinkRefused as error:
        raise invalid(f"the workspace's {UPLOADS!r} is not a folder; remove the link") from error
    except IsADirectoryError as error:
        raise refused(f"{UPLOADS}/{name} is a folder in the workspace") from error
    return FileEntry(f"{UPLOADS}/{name}", len(data), hashlib.sha256(data).hexdigest())
