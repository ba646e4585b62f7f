"""A thread's workspace as delivery sees it: the same directory the runner's file
tools write (`WAYBILL_WORKSPACES_DIR/<thread_id>`, a shared volume when the two
run on different machines). Snapshots, the changes between two of them, and the
confinement of paths that come from outside."""

from __future__ import annotations

import contextlib
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


# The longest file name most file systems take (bytes, not characters).
MAX_NAME_BYTES = 255


def check_upload_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise invalid(f"upload name {name!r} must be a plain file name (no folders)")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise invalid(f"upload name is {len(name.encode())} bytes; at most {MAX_NAME_BYTES}")


def open_uploads_folder(root: Path) -> int:
    """A descriptor of `root/uploads`, refusing it if it is a link (an agent may
    have made one pointing out of the workspace)."""
    folder = root / UPLOADS
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise invalid(f"the workspace's {UPLOADS!r} is not a folder; remove the link") from error


def write_upload(root: Path, name: str, data: bytes) -> FileEntry:
    """Write `uploads/<name>` whole. Every step is relative to the folder's
    descriptor and never follows a link: the partial file is created new
    (O_EXCL), then renamed over the name, which replaces a link rather than
    writing through it."""
    check_upload_name(name)
    folder = open_uploads_folder(root)
    partial = f".upload-{os.urandom(8).hex()}.partial"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        with os.fdopen(os.open(partial, flags, 0o644, dir_fd=folder), "wb") as file:
            file.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)  # never half a file
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=folder)
        raise
    finally:
        os.close(folder)
    return FileEntry(f"{UPLOADS}/{name}", len(data), hashlib.sha256(data).hexdigest())
