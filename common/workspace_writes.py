"""Writing into a workspace, never through a link: a whole file (a partial
created `O_EXCL` in the opened parent folder, renamed over the name, which
replaces a link rather than writing through it), the folders above it made one
component at a time, and two names swapped in one step (`exchange`).

Paths are resolved beneath the root by `common/workspace_paths.py`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from pathlib import Path
from typing import Any

from waybill.common.workspace_paths import DIR_FLAGS, BadPath, open_beneath, parts_of, refusal

AT_FDCWD = -100  # a path relative to the working directory, as the libc calls take it
RENAME_EXCHANGE = 2  # renameat2(2): both names stay, each now the other's


def _libc_renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _libc_renameat2()


def exchange(first: Path, second: Path) -> bool:
    """Swap what two names hold in one step, so neither is ever missing (a reader or
    writer meanwhile finds one or the other); False where the system cannot."""
    if _RENAMEAT2 is None:
        return False
    done = _RENAMEAT2(
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(os.fsencode(first)),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(os.fsencode(second)),
        ctypes.c_uint(RENAME_EXCHANGE),
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(first))


def _make_dirs(dir_fd: int, parts: list[str]) -> int:
    """A descriptor of the folder `parts` below `dir_fd`, made where missing; one
    component at a time, each opened O_NOFOLLOW from the one before."""
    current = os.dup(dir_fd)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=current)
            step = os.open(part, DIR_FLAGS, dir_fd=current)
            os.close(current)
            current = step
    except OSError:
        os.close(current)
        raise
    return current


def write_bytes(dir_fd: int, relative: str, data: bytes, make_parents: bool = True) -> None:
    """Write `relative` whole: a new file in its (opened) folder, renamed over the
    name. Never half a file, never through a link."""
    parts = parts_of(relative)
    if not parts:
        raise BadPath(f"path {relative!r} must name a file")
    try:
        if make_parents:
            folder = _make_dirs(dir_fd, parts[:-1])
        else:
            folder = open_beneath(dir_fd, "/".join(parts[:-1]) or ".", DIR_FLAGS)
    except OSError as error:
        raise refusal(error, dir_fd, parts, relative) from error
    try:
        write_in(folder, parts[-1], data)
    except OSError as error:
        raise refusal(error, dir_fd, parts, relative) from error
    finally:
        os.close(folder)


def write_in(folder_fd: int, name: str, data: bytes) -> None:
    """Write the file `name` of an opened folder whole (O_EXCL partial + rename)."""
    partial = f".waybill-{os.urandom(8).hex()}.partial"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(partial, flags, 0o644, dir_fd=folder_fd)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.rename(partial, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=folder_fd)
        raise
