"""The workspace into a sandbox and back, as a tar stream over a pipe.

A local sandbox never sees the thread's workspace folder: its `/workspace` is a
tmpfs of `disk_mb` (the disk limit, for the whole sandbox), filled from a tar
stream the runner writes before the command and read back from the one the
sandbox writes after it. The host folder is thus never open to the sandbox's
uid, and what comes back is written by the runner with care:

- walked from directory descriptors, every component opened with O_NOFOLLOW,
  nothing resolved by name, no recursion (a tree thousands of folders deep is
  only a long loop);
- only folders, regular files and symlinks (kept as links, never followed);
  names with `..`, absolute names, devices, FIFOs and hard links are dropped;
- at most `limit_bytes` of file data and `MAX_ENTRIES` entries, else the copy
  fails and the workspace stays as it was;
- into a fresh folder beside the workspace, swapped in by rename once whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from waybill.common.workspace_tree import remove_tree
from waybill.common.workspace_writes import exchange

MAX_ENTRIES = 200_000  # files, folders and links one workspace may hold
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MODE_BITS = 0o777  # no setuid, setgid or sticky bit comes back from a sandbox
# An entry listed, then gone or replaced before it is opened: the host writes into
# a workspace meanwhile (a file written new and renamed over its name).
VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EINVAL)


class CopyRefused(RuntimeError):
    """What the sandbox handed back cannot be taken (too big, or not a workspace)."""


# ---- host -> sandbox ----------------------------------------------------------------


def pack(workspace: Path, into: IO[bytes]) -> None:
    """Write the workspace as a tar stream (folders, regular files, symlinks)."""
    with tarfile.open(fileobj=into, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, entry_stat, link, fd in _walk(workspace):
            info = tarfile.TarInfo(name)
            info.mode = entry_stat.st_mode & MODE_BITS
            info.mtime = int(entry_stat.st_mtime)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif fd is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                with os.fdopen(fd, "rb") as file:
                    info.size = os.fstat(file.fileno()).st_size
                    tar.addfile(info, file)


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result, str | None, int | None]]:
    """(name, stat, link target or None, open file or None) of every entry under
    root, parents first; folders are walked with a stack of descriptors."""
    top = os.open(root, DIR_FLAGS)
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = [(top, "", _entries(top))]
    try:
        while stack:
            fd, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(fd)
                stack.pop()
                continue
            name = prefix + entry.name
            try:
                found = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                link = os.readlink(entry.name, dir_fd=fd) if stat.S_ISLNK(found.st_mode) else None
                child = (
                    os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                    if stat.S_ISDIR(found.st_mode)
                    else None
                )
            except OSError as gone:
                if gone.errno not in VANISHED:
                    raise
                continue  # changed since it was listed (a host write renamed it): skipped
            if link is not None:
                yield name, found, link, None
            elif child is not None:
                yield name, found, None, None
                stack.append((child, name + "/", _entries(child)))
            elif stat.S_ISREG(found.st_mode):
                file = _open_regular(entry.name, fd)
                if file is not None:
                    yield name, found, None, file
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _entries(fd: int) -> Iterator[os.DirEntry[str]]:
    with os.scandir(os.dup(fd)) as listing:  # scandir closes what it was given
        yield from sorted(listing, key=lambda e: e.name)


def _open_regular(name: str, dir_fd: int) -> int | None:
    """Open a regular file without following a link or blocking on a FIFO."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


# ---- sandbox -> host ----------------------------------------------------------------


def unpack(source: IO[bytes], into: Path, limit_bytes: int) -> None:
    """Write a sandbox's tar stream into `into` (a new folder, made here)."""
    into.mkdir(mode=0o700)
    top = os.open(into, DIR_FLAGS)
    folders = _Folders(top)
    written, entries = 0, 0
    try:
        with tarfile.open(fileobj=source, mode="r|") as tar:
            for member in tar:
                parts = _parts(member.name)
                if not parts:
                    continue
                entries += 1
                if entries > MAX_ENTRIES:
                    raise CopyRefused(f"more than {MAX_ENTRIES} files in the workspace")
                parent = folders.at(parts[:-1])
                if parent is None:
                    continue  # under something that is not a folder: dropped
                name = parts[-1]
                if member.isdir():
                    _mkdir(name, parent, member.mode)
                elif member.issym():
                    with contextlib.suppress(FileExistsError):
                        os.symlink(member.linkname, name, dir_fd=parent)
                elif member.isreg():
                    written += member.size
                    if written > limit_bytes:
                        raise CopyRefused(f"the workspace holds more than {limit_bytes} bytes")
                    _write_file(name, parent, member.mode, tar.extractfile(member))
    except tarfile.TarError as error:
        raise CopyRefused(f"the sandbox's workspace copy is broken ({error})") from error
    finally:
        folders.close()
        os.close(top)


def _parts(name: str) -> list[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        return []
    return parts


class _Folders:
    """Descriptors of the folder being written into and its parents (a tar stream
    lists a folder's entries together: the chain is reused, not walked again)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.chain: list[tuple[str, int]] = []

    def at(self, parts: list[str]) -> int | None:
        keep = 0
        while keep < min(len(parts), len(self.chain)) and self.chain[keep][0] == parts[keep]:
            keep += 1
        for _, fd in self.chain[keep:]:
            os.close(fd)
        del self.chain[keep:]
        for part in parts[keep:]:
            parent = self.chain[-1][1] if self.chain else self.top
            try:
                fd = os.open(part, DIR_FLAGS, dir_fd=parent)
            except OSError:
                return None
            self.chain.append((part, fd))
        return self.chain[-1][1] if self.chain else self.top

    def close(self) -> None:
        for _, fd in self.chain:
            os.close(fd)
        self.chain.clear()


def _mkdir(name: str, parent: int, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, (mode & MODE_BITS) | 0o700, dir_fd=parent)


def _write_file(name: str, parent: int, mode: int, data: IO[bytes] | None) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, (mode & MODE_BITS) | 0o600, dir_fd=parent)
    except FileExistsError:
        return  # the stream named it twice: the first one stays
    with os.fdopen(fd, "wb") as file:
        while data is not None and (chunk := data.read(1 << 20)):
            file.write(chunk)


# ---- the swap -------------------------------------------------------------------------


def swap_in(incoming: Path, workspace: Path) -> None:
    """Make `incoming` the workspace; the old one is removed. One exchange, so the
    workspace never goes missing: a host write in between would make a new, empty
    one there, and the copy's rename over it would fail, losing the workspace."""
    if exchange(incoming, workspace):
        remove_tree(incoming)  # now the old one (common/workspace_tree.py: any depth)
        return
    old = workspace.with_name(f".{workspace.name}.old-{os.getpid()}-{id(incoming)}")
    os.rename(workspace, old)
    os.rename(incoming, workspace)
    remove_tree(old)
