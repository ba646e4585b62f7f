"""Start a command without fork, read its output up to a limit, wait for its end.

The runner's event loop (uvloop, hence libuv) starts subprocesses with fork(),
and gRPC's fork handlers can crash a forked child of a process that serves
gRPC. `posix_spawn` starts the command without them (glibc clones with the
parent's memory until exec, running no fork handlers). Its end is awaited on
a pidfd; its stdin is /dev/null (commands come as arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from dataclasses import dataclass

from waybill.services.runner.sandbox.provider import Output


@dataclass
class Finished:
    exit_code: int  # as a shell says it: 128 + n for a signal n
    stdout: Output
    stderr: Output
    timed_out: bool


class Spawned:
    """One command, in a session (and process group) of its own."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: int | None = None,
        passed: dict[int, int] | None = None,
    ) -> None:
        """`stdin`: a descriptor to read (default /dev/null); `passed`: further
        descriptors the command gets, {its number: ours}. Ours stay ours to close."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        # The dup2s run in turn: one onto a number that is another's source would give
        # that one the wrong file, and one onto its own number would keep close-on-exec.
        # So each is first copied above every number given.
        above = max(passed or {0: 0}) + 1
        copies = {
            number: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above)
            for number, fd in (passed or {}).items()
        }
        given = [(os.POSIX_SPAWN_DUP2, copy, number) for number, copy in copies.items()]
        try:
            self.pid = os.posix_spawn(
                argv[0],
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, null if stdin is None else stdin, 0),
                    (os.POSIX_SPAWN_DUP2, out_write, 1),
                    (os.POSIX_SPAWN_DUP2, err_write, 2),
                    *given,
                ],
                setsid=True,
            )
        finally:
            for fd in (null, out_write, err_write, *copies.values()):
                os.close(fd)
        self._pipes = (out_read, err_read)
        self.exit_code: int | None = None

    async def finish(self, output_bytes: int, timeout_seconds: float) -> Finished:
        stdout, stderr = Output(output_bytes), Output(output_bytes)
        timed_out = False
        try:
            talk = asyncio.gather(
                _drain(self._pipes[0], stdout), _drain(self._pipes[1], stderr), self._wait()
            )
            try:
                await asyncio.wait_for(talk, timeout_seconds)
            except TimeoutError:
                timed_out = True
        finally:
            self.kill()
            await asyncio.shield(self._wait())
        assert self.exit_code is not None
        return Finished(self.exit_code, stdout, stderr, timed_out)

    def kill(self) -> None:
        """Kill its process group (with its first process, a pid namespace ends)."""
        if self.exit_code is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def _wait(self) -> None:
        if self.exit_code is not None:
            return
        pidfd = os.pidfd_open(self.pid)
        try:
            loop = asyncio.get_running_loop()
            ended: asyncio.Future[None] = loop.create_future()

            def readable() -> None:  # the pidfd is readable once the process ended
                if not ended.done():
                    ended.set_result(None)

            loop.add_reader(pidfd, readable)
            try:
                await ended
            finally:
                loop.remove_reader(pidfd)
        finally:
            os.close(pidfd)
        if self.exit_code is None:
            _, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222 (it has ended)
            code = os.waitstatus_to_exitcode(status)
            self.exit_code = 128 - code if code < 0 else code


async def _drain(fd: int, into: Output) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    try:
        while chunk := await reader.read(65536):
            into.add(chunk)
    finally:
        transport.close()
