"""A thread's workspace as delivery sees it: the same directory the runner's file
tools write (`WAYBILL_WORKSPACES_DIR/<thread_id>`, a shared volume when the two
run on different machines). Snapshots, the changes between two of them, and the
confinement of paths that come from outside."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from waybill.common.errors import invalid, not_found
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


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            sha.update(block)
    return sha.hexdigest()


def snapshot(root: Path) -> list[FileEntry]:
    """Every regular file under `root` (symlinks are not followed: a link out of
    the workspace is not the run's file). A missing workspace is empty."""
    if not root.is_dir() or root.is_symlink():
        return []
    entries = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            relative = path.relative_to(root).as_posix()
            entries.append(FileEntry(relative, path.stat().st_size, _digest(path)))
    return entries


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


def confined(root: Path, relative: str) -> Path:
    """The real path of `relative` inside `root`, refusing any way out."""
    clean = normalized(relative)
    if not clean or PurePosixPath(relative).is_absolute() or ".." in clean.split("/"):
        raise invalid(f"path {relative!r} must be relative to the workspace and stay inside it")
    target = (root / clean).resolve()
    if not target.is_relative_to(root.resolve()):
        raise not_found(f"no file {relative!r} in the workspace")
    return target


def upload_path(root: Path, name: str) -> Path:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise invalid(f"upload name {name!r} must be a plain file name (no folders)")
    folder = root / UPLOADS
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if target.is_symlink():
        raise invalid(f"upload name {name!r} names a link; choose another name")
    return target


def write_upload(root: Path, name: str, data: bytes) -> FileEntry:
    target = upload_path(root, name)
    partial = target.with_name(f".{name}.partial")
    partial.write_bytes(data)
    partial.replace(target)  # readers never see half a file
    return FileEntry(f"{UPLOADS}/{name}", len(data), hashlib.sha256(data).hexdigest())
