"""Walking a workspace's tree, giving it to a uid, and removing it, never
following a link: one directory descriptor is kept open and an explicit stack
replaces recursion (no path lengths, any depth), climbing back with `..` only
after checking it is the folder the walk came from (st_dev, st_ino).

Paths are resolved beneath the root by `common/workspace_paths.py`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from waybill.common.workspace_paths import DIR_FLAGS, WorkspaceChanged, opened_root


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


@dataclass
class _Frame:
    name: str  # in its parent folder
    relative: str  # from the walk's top, "" for the top itself
    identity: tuple[int, int]
    pending: list[str] | None = None  # subfolders still to visit
    files: list[str] = field(default_factory=list)


def _entries(fd: int) -> tuple[list[str], list[str], list[str]]:
    """A folder's regular files, subfolders and the rest (links, FIFOs...), sorted."""
    files, dirs, others = [], [], []
    with os.scandir(fd) as found:
        for entry in found:
            try:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
                else:
                    others.append(entry.name)
            except OSError:
                continue  # gone meanwhile
    return sorted(files), sorted(dirs), sorted(others)


def _climb(fd: int, expected: tuple[int, int]) -> int:
    """The parent of the folder `fd`, if it is still the folder we came down from."""
    parent = os.open("..", DIR_FLAGS, dir_fd=fd)
    if _identity(parent) != expected:
        os.close(parent)
        raise WorkspaceChanged("a folder moved out of the workspace while it was walked")
    return parent


def _descend(fd: int, name: str) -> int | None:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
            # Replaced or removed since it was listed, or not ours to read (a walk
            # skips it, as os.walk would; a removal then fails on its parent).
            return None
        raise


def walk(dir_fd: int) -> Iterator[tuple[str, int, list[str]]]:
    """(folder relative to the top, its descriptor, its regular files' names) for
    every folder below `dir_fd`, depth first in name order. Links are not
    followed; the descriptor is valid until the next step of the walk."""
    current = os.dup(dir_fd)
    stack = [_Frame("", "", _identity(current))]
    try:
        while stack:
            frame = stack[-1]
            if frame.pending is None:
                files, dirs, _ = _entries(current)
                frame.pending = list(reversed(dirs))
                yield frame.relative, current, files
            if frame.pending:
                name = frame.pending.pop()
                child = _descend(current, name)
                if child is None:
                    continue
                relative = f"{frame.relative}/{name}" if frame.relative else name
                stack.append(_Frame(name, relative, _identity(child)))
                os.close(current)
                current = child
                continue
            stack.pop()
            if stack:
                parent = _climb(current, stack[-1].identity)
                os.close(current)
                current = parent
    finally:
        os.close(current)


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the tree under `root` (itself included) to uid:gid, at any depth,
    changing links themselves and never what they point to."""
    with opened_root(root) as root_fd:
        for _, fd, _ in walk(root_fd):
            os.fchown(fd, uid, gid)
            files, _, others = _entries(fd)
            for name in files + others:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)


def walk_files(dir_fd: int) -> Iterator[tuple[str, int, str]]:
    """(relative path, its folder's descriptor, name) of every regular file."""
    for folder, fd, files in walk(dir_fd):
        for name in files:
            yield (f"{folder}/{name}" if folder else name), fd, name


def remove_in(dir_fd: int, name: str) -> None:
    """Remove `name` of the folder `dir_fd` and, if a folder, everything in it;
    without recursion, so any depth goes. Gone already is fine."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except IsADirectoryError:
        pass
    except PermissionError as error:
        if error.errno != errno.EPERM:  # Linux: EISDIR; some kernels: EPERM for a folder
            raise
    top = _descend(dir_fd, name)
    if top is None:
        return
    _remove_below(dir_fd, name, top)


def _clear_files(fd: int) -> list[str]:
    """Unlink everything but folders in `fd`; the subfolders' names."""
    files, dirs, others = _entries(fd)
    for name in files + others:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
    return dirs


def _remove_below(dir_fd: int, name: str, top: int) -> None:
    current = top
    above = _identity(dir_fd)
    stack = [_Frame(name, name, _identity(top))]
    try:
        while stack:
            frame = stack[-1]
            if frame.pending is None:
                frame.pending = _clear_files(current)
            if frame.pending:
                child_name = frame.pending.pop()
                child = _descend(current, child_name)
                if child is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(child_name, dir_fd=current)  # a link now: remove it
                    continue
                stack.append(_Frame(child_name, child_name, _identity(child)))
                os.close(current)
                current = child
                continue
            stack.pop()
            parent = _climb(current, stack[-1].identity if stack else above)
            os.close(current)
            current = parent
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(frame.name, dir_fd=current)
    finally:
        os.close(current)


def remove_tree(path: Path) -> None:
    """Remove the folder `path` (a link is removed, never followed) at any depth."""
    try:
        parent = os.open(path.parent, DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        remove_in(parent, path.name)
    finally:
        os.close(parent)
