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
that dies takes its commands with it (`--die-with-parent`).

`confinement` (the config): `strict` (the default) refuses a sandbox when any of
this cannot be had (no bwrap, no user namespaces, no cgroup); `best_effort`
runs with what holds and lists the rest in the lease record (`not_enforced`);
`unconfined` is a plain subprocess in the workspace with resource limits only
(it reads the host's files and reaches its network), for machines that allow
nothing else, and only when asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from waybill.common.workspace_fs import remove_tree
from waybill.services.runner.sandbox import cgroups, seccomp, workspace_copy
from waybill.services.runner.sandbox.provider import (
    WORKSPACE_MOUNT,
    ExecResult,
    LeaseRequest,
    Limits,
    Sandbox,
    SandboxUnavailable,
    limit_hit,
)
from waybill.services.runner.sandbox.spawn import Spawned

log = logging.getLogger("waybill.runner.sandbox")

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
BASH = shutil.which("bash") or "/bin/bash"
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_UID = 1000
THROWAWAY_UIDS = (1_000_000, 2_000_000_000)
TMP_BYTES = 64 * 1024 * 1024
CGROUP_PREFIX = "waybill-"  # then the runner's pid: a dead runner's cgroups are swept
OWN_PROCESSES = 4  # the sandbox's own (bwrap, its init, the shell around the command, tar)

# The descriptors a command is given: the workspace's way back, the seccomp
# program, /etc/passwd and /etc/group.
WORKSPACE_OUT_FD, SECCOMP_FD, PASSWD_FD, GROUP_FD = 3, 10, 11, 12
PASSWD = f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/workspace:/bin/bash\n"
GROUP = f"sandbox:x:{SANDBOX_UID}:\n"

# Outside the sandbox, before bwrap: close whatever the runner left open (but the
# descriptors given), join the sandbox's cgroup, then run what follows.
#   $1: how many cgroup.procs files follow; then them; then the command.
OUTSIDE = r"""
for fd in /proc/self/fd/*; do
  fd=${fd##*/}
  case $fd in 0|1|2|3|10|11|12) ;; *) { exec {fd}>&-; } 2>/dev/null || true ;; esac
done
n=$1; shift
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "waybill: cannot join the sandbox's cgroup ($1)" >&2; exit 125; }
  shift; n=$((n - 1))
done
cd / && exec /usr/bin/env -i "$@"
"""

# Inside, as uid 1000: the workspace in from stdin, the command under its limits
# (without the way back), every process it left killed, the workspace out on fd 3.
#   $1-$4: cpu seconds, address space, processes, file size; then the command.
INSIDE = r"""
cpu=$1 memory=$2 nproc=$3 fsize=$4
shift 4
if ! tar -x -f - -C /workspace --no-same-owner 2>/tmp/.waybill-copy-in; then
  # Nothing runs on part of a workspace, and nothing comes back (it stays whole).
  echo "waybill: the workspace does not fit in the sandbox's disk limit" >&2
  cat /tmp/.waybill-copy-in >&2
  exit 125
fi
rm -f /tmp/.waybill-copy-in
exec 0</dev/null
cd /workspace
/usr/bin/prlimit --cpu=$cpu:$((cpu + 1)) --as=$memory --nproc=$nproc --fsize=$fsize -- \
  "$@" 3>&-
status=$?
while kill -KILL -1 2>/dev/null; do :; done
tar -c -f - -C /workspace . >&3 2>/dev/null
exit $status
"""

# Without confinement (`unconfined`, asked for): the descriptors closed, the
# workspace as the directory.
UNCONFINED = r"""
for fd in /proc/self/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ]; then { exec {fd}>&-; } 2>/dev/null || true; fi
done
cd "$1" && shift && exec "$@"
"""

# What each mode confines, for the lease record, and what `unconfined` gives up.
CONFINED = ["user", "pid", "mount", "ipc", "uts", "cgroupns", "pivot_root", "uid"]
CONFINED += ["no-capabilities", "no_new_privs", "seccomp"]
LIMITS = ("memory", "processes", "disk")
UNCONFINED_GIVES_UP = ["namespaces", "filesystem", "network", "environment", *LIMITS]


@dataclass(frozen=True)
class Machine:
    """What this machine lets the runner do, probed once per process."""

    bwrap: str | None  # None: bubblewrap works; otherwise why not
    as_root: bool

    def refusal(self) -> str:
        return f"the local sandbox needs bubblewrap with user namespaces: {self.bwrap}"


def _bwrap_probe_argv(as_root: bool) -> list[str]:
    drop = _drop_uid(random.randrange(*THROWAWAY_UIDS)) if as_root else []
    base = [BWRAP, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    links = [
        part
        for link in ("bin", "lib", "lib64")
        for part in ("--symlink", f"usr/{link}", f"/{link}")
    ]
    return [*drop, *base, "--ro-bind", "/usr", "/usr", *links]


@lru_cache(maxsize=1)
def machine() -> Machine:
    as_root = os.geteuid() == 0
    if not os.path.exists(BWRAP):
        return Machine("no `bwrap` on this machine (Debian: apt-get install bubblewrap)", as_root)
    try:
        seccomp.program()
    except Exception as error:  # libseccomp missing or refusing: the reason is the finding
        return Machine(f"no seccomp filter ({type(error).__name__}: {error})", as_root)
    argv = [*_bwrap_probe_argv(as_root), "--", "/usr/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Machine(f"bwrap did not run ({error})", as_root)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[:300]
        return Machine(f"bwrap refused ({said or done.returncode})", as_root)
    return Machine(None, as_root)


def check(limits: Limits) -> tuple[str | None, list[str]]:
    """(why the sandbox is refused, or None; the limits that would not hold) on
    this machine under `limits`: what `waybill doctor` says, and a lease does."""
    if limits.confinement == "unconfined":
        return None, list(UNCONFINED_GIVES_UP)
    found = machine()
    if found.bwrap is not None:
        return found.refusal(), list(UNCONFINED_GIVES_UP)
    try:
        group = cgroups.create(
            f"waybill-probe-{uuid.uuid4().hex[:8]}", 1 << 30, 64, limits.cgroup_parent
        )
    except cgroups.CgroupUnavailable as error:
        not_enforced = ["memory"]
        if limits.confinement == "strict":
            return _no_cgroup(error), not_enforced
        return None, not_enforced
    group.remove()
    return None, []


def _no_cgroup(error: Exception) -> str:
    return (
        f"no cgroup for the sandbox's memory and processes ({error}); give the runner "
        "one (sandbox.cgroup_parent, a cgroup delegated to its user) or set "
        "`confinement: best_effort`"
    )


def _drop_uid(uid: int) -> list[str]:
    return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


_uids_in_use: set[int] = set()


def _throwaway_uid() -> int:
    while True:
        uid = random.randrange(*THROWAWAY_UIDS)
        if uid not in _uids_in_use:
            _uids_in_use.add(uid)
            return uid


def bwrap_options(limits: Limits) -> list[str]:
    """The sandbox's namespaces and private root (see the module's docstring)."""
    found = [BWRAP, "--unshare-all", "--unshare-user", "--disable-userns"]
    found += ["--share-net"] if limits.network else []
    found += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    found += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    found += ["--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        found += ["--symlink", f"usr/{link}", f"/{link}"]
    found += ["--dev", "/dev", "--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
    found += ["--proc", "/proc", "--ro-bind", "/dev/null", "/proc/cmdline"]
    found += ["--perms", "0755", "--size", str(1 << 20), "--tmpfs", "/etc"]
    for name in ("ld.so.cache", "hosts", "resolv.conf", "alternatives", "ssl", "localtime"):
        found += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    found += ["--file", str(PASSWD_FD), "/etc/passwd", "--file", str(GROUP_FD), "/etc/group"]
    found += ["--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    found += ["--size", str(limits.disk_bytes), "--perms", "0755", "--tmpfs", WORKSPACE_MOUNT]
    found += ["--remount-ro", "/etc", "--remount-ro", "/dev", "--remount-ro", "/"]
    found += ["--chdir", WORKSPACE_MOUNT, "--clearenv"]
    for name, value in (
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", WORKSPACE_MOUNT),
        ("LANG", "C.UTF-8"),
        ("TMPDIR", "/tmp"),
        ("USER", "sandbox"),
    ):
        found += ["--setenv", name, value]
    return [*found, "--seccomp", str(SECCOMP_FD)]


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
        drop = _drop_uid(self.uid) if self.uid is not None else []
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
        with_runner = [SETPRIV, "--pdeathsig", "KILL", "--"]
        return [*outside, *drop, *with_runner, *bwrap_options(limits), "--", *inside]

    async def _execute_confined(self, argv: list[str]) -> ExecResult:
        oom_before = self.cgroup.oom_kills() if self.cgroup is not None else 0
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        fds = {
            WORKSPACE_OUT_FD: out_write,
            SECCOMP_FD: seccomp.filter_fd(),
            PASSWD_FD: _memory_file(PASSWD),
            GROUP_FD: _memory_file(GROUP),
        }
        try:
            process = Spawned(self._argv(argv), {"PATH": SYSTEM_PATH}, in_read, fds)
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
        with_runner = [SETPRIV, "--pdeathsig", "KILL", "--"]
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
                raise SandboxUnavailable(_no_cgroup(error)) from None
            log.warning(
                "sandbox %s: best effort, memory not limited as a whole (%s)", sandbox_id, error
            )
            return None, ["memory"]
        return group, []


__all__ = ["WORKSPACE_MOUNT", "LocalProvider", "LocalSandbox", "check", "machine"]
