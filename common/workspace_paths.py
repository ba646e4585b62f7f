"""Resolving a path beneath a workspace's root, never through a link: the
refusals a workspace access ends in, `openat2` or a walk by components, opening
and reading; and `off_loop`, the deadline every file operation runs within.

Every host-side access to a thread's workspace goes through this module and its
two siblings: `common/workspace_writes.py` (writing) and `common/workspace_tree.py`
(walking, chowning, removing).

A workspace belongs to a sandbox's throwaway uid while a command runs, so
anything in it can change between two system calls: a folder can become a link
to a host file, a file a FIFO. Privileged host code (delivery, the runner's file
tools) therefore never opens a workspace path by name. It opens the workspace
root as a directory descriptor and resolves every relative path from there:

- with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
  RESOLVE_NO_XDEV)` where the kernel has it (Linux 5.6+), so the kernel refuses
  a link or a way out at any component, atomically;
- otherwise one component at a time with `openat(..., O_NOFOLLOW | O_DIRECTORY)`
  from the previous component's descriptor (`..` is refused before either).

Files are opened `O_NONBLOCK` (a FIFO never blocks the opener) and checked with
`fstat` to be regular files.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import platform
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, ParamSpec, TypeVar

CHUNK = 64 * 1024

# openat2(2): the same number on every architecture that has it (the unified table).
SYS_OPENAT2 = 437
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_CONFINED = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
OPENAT2_ARCHES = ("x86_64", "aarch64", "arm64")
# openat2 answers EAGAIN when a rename raced its resolution; it is then safe to retry.
OPENAT2_RETRIES = 16

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class WorkspacePathError(Exception):
    """A workspace access refused; `str()` says why, for a 4xx or a tool error."""


class BadPath(WorkspacePathError):
    """Absolute, empty, with `..` or a NUL: not a path inside a workspace."""


class NotRegularFile(WorkspacePathError):
    """The name is a folder, a FIFO, a device or a socket."""


class LinkRefused(WorkspacePathError):
    """A component is a symbolic link (or leads off the workspace's file system)."""


class WorkspaceMissing(WorkspacePathError):
    """No such file or folder in the workspace."""


class WorkspaceChanged(WorkspacePathError):
    """A folder moved while it was walked: the walk stops rather than follow it."""


class WorkspaceTooSlow(WorkspacePathError):
    """A file operation did not finish within its deadline (a 504)."""


P = ParamSpec("P")
T = TypeVar("T")


async def off_loop(seconds: float, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a workspace file operation in a worker thread, within `seconds`
    (WAYBILL_WORKSPACE_IO_SECONDS): the event loop never waits on a file."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(work, *args, **kwargs), seconds)
    except TimeoutError as error:
        raise WorkspaceTooSlow(
            f"the workspace did not answer within {seconds:g} s (WAYBILL_WORKSPACE_IO_SECONDS)"
        ) from error


# ---- resolving a path ------------------------------------------------------------


def parts_of(relative: str) -> list[str]:
    """The components of a workspace path ("./a//b" -> ["a", "b"]); refuses a way out."""
    if not relative or "\x00" in relative:
        raise BadPath(f"path {relative!r} must name something inside the workspace")
    posix = PurePosixPath(relative.replace("\\", "/"))
    parts = [p for p in posix.parts if p not in ("", ".")]
    if posix.is_absolute() or ".." in parts:
        raise BadPath(f"path {relative!r} must be relative to the workspace and stay inside it")
    return parts


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc_syscall() -> Any:
    if platform.system() != "Linux" or platform.machine() not in OPENAT2_ARCHES:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


_SYSCALL = _libc_syscall()
# "openat2" or "walk": which way paths are resolved (tests switch it with use_method).
METHOD = "openat2" if _SYSCALL is not None else "walk"


def use_method(method: str) -> None:
    """Resolve with `openat2` or by walking components (both are tested)."""
    global METHOD
    if method not in ("openat2", "walk"):
        raise ValueError(f"unknown method {method!r}")
    if method == "openat2" and _SYSCALL is None:
        raise OSError(errno.ENOSYS, "openat2 is not available here")
    METHOD = method


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    assert _SYSCALL is not None
    mode = mode if flags & os.O_CREAT else 0  # openat2 refuses a mode it would not use
    how = _OpenHow(flags=flags, mode=mode, resolve=RESOLVE_CONFINED)
    for _ in range(OPENAT2_RETRIES):
        fd = _SYSCALL(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, "the workspace kept changing while it was opened", path)


def _walk_open(dir_fd: int, parts: list[str], flags: int, mode: int) -> int:
    current = dir_fd
    try:
        for part in parts[:-1]:
            step = os.open(part, DIR_FLAGS, dir_fd=current)
            if current != dir_fd:
                os.close(current)
            current = step
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=current)
    finally:
        if current != dir_fd:
            os.close(current)


def _explained(error: OSError, relative: str) -> WorkspacePathError:
    if error.errno in (errno.ELOOP, errno.EXDEV):
        return LinkRefused(f"{relative!r} goes through a link; links are not followed")
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return WorkspaceMissing(f"no {relative!r} in the workspace")
    if error.errno in (errno.EISDIR, errno.ENXIO):
        return NotRegularFile(f"{relative!r} is not a regular file")
    return WorkspacePathError(f"{relative!r} cannot be opened: {error.strerror}")


def _has_link(dir_fd: int, parts: list[str]) -> bool:
    """Whether a component of `parts` is a link (only to word a refusal: the
    refusal itself never depends on this look)."""
    current = os.dup(dir_fd)
    try:
        for part in parts:
            info = os.stat(part, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                return True
            step = os.open(part, DIR_FLAGS, dir_fd=current)
            os.close(current)
            current = step
    except OSError:
        return False
    finally:
        os.close(current)
    return False


def open_beneath(dir_fd: int, relative: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of `relative` below `dir_fd`, never through a link or `..`."""
    parts = parts_of(relative)
    if not parts:
        return os.open(".", flags, dir_fd=dir_fd)
    try:
        if METHOD == "openat2":
            try:
                return _openat2(dir_fd, "/".join(parts), flags | os.O_NOFOLLOW, mode)
            except OSError as error:
                if error.errno != errno.ENOSYS:
                    raise
                use_method("walk")  # a kernel before 5.6 (or a seccomp filter): walk from now on
        return _walk_open(dir_fd, parts, flags, mode)
    except OSError as error:
        raise refusal(error, dir_fd, parts, relative) from error


def refusal(error: OSError, dir_fd: int, parts: list[str], relative: str) -> WorkspacePathError:
    if error.errno == errno.ENOTDIR and _has_link(dir_fd, parts):
        error.errno = errno.ELOOP  # O_DIRECTORY met a link: say so
    return _explained(error, relative)


def open_root(root: Path, create: bool = False) -> int:
    """A descriptor of a workspace's root folder (itself never a link)."""
    if create:
        root.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(root, DIR_FLAGS)
    except OSError as error:
        if root.is_symlink():
            error.errno = errno.ELOOP
        raise _explained(error, root.name) from error


@contextlib.contextmanager
def opened_root(root: Path, create: bool = False) -> Iterator[int]:
    fd = open_root(root, create)
    try:
        yield fd
    finally:
        os.close(fd)


def open_dir(dir_fd: int, relative: str) -> int:
    """A descriptor of the folder `relative` below `dir_fd` ("" or "." : itself)."""
    if relative in ("", "."):
        return os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    return open_beneath(dir_fd, relative, DIR_FLAGS)


def open_regular(dir_fd: int, relative: str) -> int:
    """A read descriptor of a regular file below `dir_fd` (NotRegularFile for
    anything else: opening is non-blocking, so a FIFO is refused, not waited on)."""
    fd = open_beneath(dir_fd, relative, READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{relative!r} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int | None = None) -> bytes:
    blocks = []
    left = limit if limit is not None else -1
    while left != 0:
        block = os.read(fd, CHUNK if left < 0 else min(CHUNK, left))
        if not block:
            break
        blocks.append(block)
        if left > 0:
            left -= len(block)
    return b"".join(blocks)


def read_bytes(dir_fd: int, relative: str, limit: int | None = None) -> bytes:
    fd = open_regular(dir_fd, relative)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def is_regular_file(dir_fd: int, relative: str) -> bool:
    try:
        os.close(open_regular(dir_fd, relative))
    except WorkspacePathError:
        return False
    return True
