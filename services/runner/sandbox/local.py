"""The local sandbox provider: each command a confined subprocess, in bubblewrap.

Each command runs in `bwrap` (bubblewrap), whether the runner is root or not:

- new user, pid, mount, ipc, uts and cgroup namespaces, and net unless the
  config says `network: true`;
- `pivot_root` into a private root: read-only `/usr` (and its `/bin`, `/lib`
  links), a few files of `/etc`, a minimal `/dev`, a private `/proc` (with
  `/proc/cmdline` masked), a private `/tmp`, and `/workspace`;
- uid 1000 inside, every capability dropped, `no_new_privs`, no further user
  namespaces (`--disable-userns`), the seccomp filter of seccomp.py;
- `/workspace` a tmpfs of `disk_mb`, filled from the thread's workspace before
  the command and copied back after it (workspace_copy.py): the host folder is
  never open to the sandbox;
- a cgroup per sandbox (cgroups.py) holding memory and processes as a whole;
  resource limits per process (CPU time, address space, processes, file size).

As root, bwrap itself runs under a throwaway uid (the sandbox's uid 1000 maps to
it, not to root). When the command ends, every process it left is killed
(nothing outlives it in its pid namespace, a `setsid` one neither); a runner
that dies takes its commands with it: the kernel's death signal (`setpriv` and
`--die-with-parent`) and, inside, a watcher on a pipe only the runner writes to
(the signal misses a runner that dies while bwrap sets up; the pipe does not).

`confinement` (the config): `strict` (the default) refuses a sandbox when any of
this cannot be had (no bwrap, no user namespaces, no cgroup); `best_effort`
runs with what holds and lists the rest in the lease record (`not_enforced`);
`unconfined` is a plain subprocess in the workspace with resource limits only
(it reads the host's files and reaches its network), for machines that allow
nothing else, and only when asked for.

The command line is built in bwrap.py; what this machine allows is probed in
confinement.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from waybill.common.workspace_tree import remove_tree
from waybill.services.runner.sandbox import cgroups, seccomp, workspace_copy
from waybill.services.runner.sandbox.bwrap import (
    BASH,
    GROUP,
    GROUP_FD,
    INSIDE,
    LIFELINE_FD,
    OUTSIDE,
    PASSWD,
    PASSWD_FD,
    SECCOMP_FD,
    SYSTEM_PATH,
    THROWAWAY_UIDS,
    UNCONFINED,
    WORKSPACE_OUT_FD,
    bwrap_options,
    dies_with_runner,
    drop_uid,
)
from waybill.services.runner.sandbox.confinement import (
    CONFINED,
    UNCONFINED_GIVES_UP,
    machine,
    no_cgroup,
)
from waybill.services.runner.sandbox.provider import (
    ExecResult,
    LeaseRequest,
    Limits,
    Sandbox,
    SandboxUnavailable,
    limit_hit,
)
from waybill.services.runner.sandbox.spawn import Spawned

log = logging.getLogger("waybill.runner.sandbox")

CGROUP_PREFIX = "waybill-"  # then the runner's pid: a dead runner's cgroups are swept
# the sandbox's own: bwrap, its init, the shell around the command, its watcher, tar
OWN_PROCESSES = 5

_uids_in_use: set[int] = set()


def _throwaway_uid() -> int:
    while True:
        uid = random.randrange(*THROWAWAY_UIDS)
        if uid not in _uids_in_use:
            _uids_in_use.add(uid)
            return uid


@dataclass
class LocalSandbox:
    sandbox_id: str
    workspace: Path
    limits: Limits
    mode: str  # strict | best_effort | unconfined
    not_enforced: list[str]
    cgroup: cgroups.SandboxCgroup | None
    uid: int | None  # root: the throwaway uid bwrap runs as
    _running: set[Spawned] = field(default_factory=set)
    # One command at a time: each copies the workspace in and back whole.
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def confinement(self) -> list[str]:
        if self.mode == "unconfined":
            return ["rlimits"]
        found = [*CONFINED, *([] if self.limits.network else ["net"])]
        found += ["cgroup"] if self.cgroup is not None else []
        return [*found, "workspace-tmpfs", "rlimits"]

    @property
    def lease_details(self) -> dict[str, object]:
        workspace: dict[str, object] = {"kind": "copy"}
        if self.mode != "unconfined":
            size = self.limits.disk_bytes // (1024 * 1024)
            workspace = {"kind": "tmpfs", "size_mb": size}
        return {
            "mode": self.mode,
            "not_enforced": self.not_enforced,
            "cgroup": self.cgroup.record() if self.cgroup is not None else None,
            "workspace": workspace,
        }

    async def execute(self, argv: list[str]) -> ExecResult:
        if self.mode == "unconfined":
            return await self._execute_unconfined(argv)
        async with self._one_at_a_time:
            return await self._execute_confined(argv)

    def _argv(self, command: list[str]) -> list[str]:
        limits = self.limits
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        drop = drop_uid(self.uid) if self.uid is not None else []
        inside = [
            BASH,
            "-c",
            INSIDE,
            "sandbox",
            str(limits.cpu_seconds),
            str(limits.memory_bytes),
            str(limits.processes + OWN_PROCESSES),
            str(limits.file_bytes),
            *command,
        ]
        outside = [BASH, "-c", OUTSIDE, "outside", str(len(procs)), *procs]
        # bwrap dies with the runner (its sandbox with bwrap: --die-with-parent). Set
        # after the uid is dropped: a change of credentials clears it.
        with_runner = dies_with_runner()
        return [*outside, *drop, *with_runner, *bwrap_options(limits), "--", *inside]

    async def _execute_confined(self, argv: list[str]) -> ExecResult:
        oom_before = self.cgroup.oom_kills() if self.cgroup is not None else 0
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        lifeline_read, lifeline = os.pipe()  # ours close-on-exec: no other child holds it
        fds = {
            WORKSPACE_OUT_FD: out_write,
            SECCOMP_FD: seccomp.filter_fd(),
            PASSWD_FD: _memory_file(PASSWD),
            GROUP_FD: _memory_file(GROUP),
            LIFELINE_FD: lifeline_read,
        }
        try:
            process = Spawned(self._argv(argv), {"PATH": SYSTEM_PATH}, in_read, fds)
        except BaseException:
            os.close(lifeline)
            raise
        finally:
            for fd in (in_read, *fds.values()):
                os.close(fd)
        self._running.add(process)
        incoming = self.workspace.with_name(f".{self.workspace.name}.in-{uuid.uuid4().hex[:8]}")
        copy_in = asyncio.create_task(asyncio.to_thread(_copy_in, self.workspace, in_write))
        copy_out = asyncio.create_task(
            asyncio.to_thread(_copy_out, out_read, incoming, self.limits.disk_bytes)
        )
        try:
            done = await process.finish(self.limits.output_bytes, self.limits.timeout_seconds)
        finally:
            os.close(lifeline)
            self._running.discard(process)
            if self.cgroup is not None:
                await asyncio.to_thread(self.cgroup.kill_all)  # what its pid namespace missed
        await copy_in
        refused = await copy_out
        stderr = done.stderr.text()
        if done.timed_out or refused is not None:
            await asyncio.to_thread(remove_tree, incoming)
            if refused is not None and not done.timed_out:
                stderr += f"\nwaybill: the workspace was not copied back: {refused}"
        else:
            try:
                await asyncio.to_thread(workspace_copy.swap_in, incoming, self.workspace)
            except OSError as error:  # the workspace went meanwhile (its thread deleted)
                await asyncio.to_thread(remove_tree, incoming)
                stderr += f"\nwaybill: the workspace was not copied back: {error}"
        oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
        dropped = done.stdout.dropped + done.stderr.dropped
        return ExecResult(
            exit_code=done.exit_code,
            stdout=done.stdout.text(),
            stderr=stderr,
            limit_hit=limit_hit(done.exit_code, stderr, done.timed_out, dropped, oom),
            output_dropped=dropped,
        )

    async def _execute_unconfined(self, argv: list[str]) -> ExecResult:
        limits = self.limits
        command = [BASH, "-c", UNCONFINED, "unconfined", str(self.workspace), "prlimit"]
        command += [f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}"]
        command += [f"--as={limits.memory_bytes}", f"--fsize={limits.file_bytes}", "--", *argv]
        with_runner = dies_with_runner()
        env = {"PATH": SYSTEM_PATH, "HOME": str(self.workspace)}
        process = Spawned([*with_runner, *command], env)
        self._running.add(process)
        try:
            done = await process.finish(limits.output_bytes, limits.timeout_seconds)
        finally:
            self._running.discard(process)
        stderr = done.stderr.text()
        dropped = done.stdout.dropped + done.stderr.dropped
        return ExecResult(
            exit_code=done.exit_code,
            stdout=done.stdout.text(),
            stderr=stderr,
            limit_hit=limit_hit(done.exit_code, stderr, done.timed_out, dropped),
            output_dropped=dropped,
        )

    async def close(self) -> None:
        for process in list(self._running):
            process.kill()  # its `finish` reaps it
        self._running.clear()
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
        if self.uid is not None:
            _uids_in_use.discard(self.uid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _memory_file(text: str) -> int:
    fd = os.memfd_create("waybill-etc", os.MFD_CLOEXEC)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _copy_in(workspace: Path, fd: int) -> None:
    """The workspace into the sandbox's stdin (a sandbox that stops reading ends it)."""
    with os.fdopen(fd, "wb") as pipe, contextlib.suppress(BrokenPipeError):
        workspace_copy.pack(workspace, pipe)


def _copy_out(fd: int, incoming: Path, limit_bytes: int) -> str | None:
    """The sandbox's workspace, from its fd 3, into `incoming`; why not, if refused."""
    with os.fdopen(fd, "rb") as pipe:
        try:
            workspace_copy.unpack(pipe, incoming, limit_bytes)
        except (workspace_copy.CopyRefused, OSError) as error:
            pipe.read()  # drain: the sandbox must not block on a full pipe
            return str(error)
    return None


class LocalProvider:
    name = "local"

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    async def lease(self, request: LeaseRequest) -> Sandbox:
        limits = self.limits
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        if limits.confinement == "unconfined":
            log.warning("sandbox %s: unconfined (the config asks for it)", sandbox_id)
            return LocalSandbox(
                sandbox_id, request.workspace, limits, "unconfined", UNCONFINED_GIVES_UP, None, None
            )
        found = await asyncio.to_thread(machine)
        if found.bwrap is not None:
            raise SandboxUnavailable(found.refusal())
        request.workspace.mkdir(parents=True, exist_ok=True)
        group, not_enforced = await asyncio.to_thread(self._cgroup, sandbox_id)
        uid = _throwaway_uid() if found.as_root else None
        return LocalSandbox(
            sandbox_id, request.workspace, limits, limits.confinement, not_enforced, group, uid
        )

    def _cgroup(self, sandbox_id: str) -> tuple[cgroups.SandboxCgroup | None, list[str]]:
        limits = self.limits
        # A runner killed mid-command left its sandbox's cgroup: emptied here.
        for name in cgroups.sweep(CGROUP_PREFIX, _alive, limits.cgroup_parent):
            log.warning("sandbox cgroup %s of a runner that died: its processes killed", name)
        try:
            group = cgroups.create(
                f"{CGROUP_PREFIX}{os.getpid()}-{sandbox_id}",
                # the workspace's tmpfs is memory too: its pages count against the cgroup
                limits.memory_bytes + limits.disk_bytes,
                limits.processes + OWN_PROCESSES,
                limits.cgroup_parent,
            )
        except cgroups.CgroupUnavailable as error:
            if limits.confinement == "strict":
                raise SandboxUnavailable(no_cgroup(error)) from None
            log.warning(
                "sandbox %s: best effort, memory not limited as a whole (%s)", sandbox_id, error
            )
            return None, ["memory"]
        return group, []


__all__ = ["LocalProvider", "LocalSandbox"]
