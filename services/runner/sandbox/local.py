"""The local sandbox provider: each command a confined subprocess.

What confines it depends on what the machine allows, found once by a probe:

- `namespaces+uid` (the runner is root): new pid, net, mount, ipc and uts
  namespaces; a root of its own (a tmpfs holding read-only `/usr`, a few device
  nodes, a fresh `/proc` and `/tmp`, and the thread's workspace at
  `/workspace`), entered with chroot; a throwaway uid with no capabilities and
  `no_new_privs`; resource limits (CPU, address space, processes, file size).
- `namespaces` (not root, user namespaces allowed): the same in a user
  namespace, without the throwaway uid (nor its process limit).
- `rlimits` (neither): a plain subprocess in the workspace with the resource
  limits only. It can read the host's files and reach the network: the lease
  record and the runner's log say so.

The pid namespace is torn down with its first process, so nothing a command
started outlives it; the sandbox's close kills any process still running, and
a runner that dies takes its commands with it (`setpriv --pdeathsig`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from waybill.common.settings import get_settings
from waybill.services.runner.sandbox.provider import (
    WORKSPACE_MOUNT,
    ExecResult,
    LeaseRequest,
    Limits,
    Sandbox,
    limit_hit,
)
from waybill.services.runner.sandbox.spawn import Spawned

log = logging.getLogger("waybill.runner.sandbox")

# Run as the namespaces' first process (root inside them): build the sandbox's
# root on a tmpfs, enter it, drop to the sandbox's uid under its limits, and run
# the command as a child (so that its end by a signal is told as 128 + n). CPU
# time: SIGXCPU at the limit, SIGKILL a second later if that was ignored.
# First of all, close every file descriptor but 0-2: nothing the runner holds open
# may reach the sandbox.
CLOSE_FDS = r"""
for fd in /proc/self/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ]; then { exec {fd}>&-; } 2>/dev/null || true; fi
done
"""

CONFINE = (
    CLOSE_FDS
    + r"""
set -e
root=$1 workspace=$2 uid=$3 cpu=$4 memory=$5 nproc=$6 fsize=$7
shift 7
mount --make-rprivate /
mount -t tmpfs -o size=16m,mode=755 sandbox "$root"
mkdir -p "$root/usr" "$root/etc" "$root/dev" "$root/proc" "$root/tmp" "$root/workspace"
mount --rbind /usr "$root/usr"
mount -o remount,bind,ro "$root/usr"
for link in bin lib lib64 sbin; do ln -s "usr/$link" "$root/$link"; done
for node in null zero random urandom; do
  touch "$root/dev/$node"
  mount --bind "/dev/$node" "$root/dev/$node"
done
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev tmp "$root/tmp"
mount --bind "$workspace" "$root/workspace"
for file in ld.so.cache hosts resolv.conf; do
  if [ -f "/etc/$file" ]; then cp "/etc/$file" "$root/etc/"; fi
done
for folder in alternatives ssl; do  # programs' links (awk...), CA certificates
  if [ -d "/etc/$folder" ]; then
    mkdir "$root/etc/$folder"
    mount --rbind "/etc/$folder" "$root/etc/$folder"
    mount -o remount,bind,ro "$root/etc/$folder"
  fi
done
echo "sandbox:x:$uid:$uid:sandbox:/workspace:/bin/sh" > "$root/etc/passwd"
echo "sandbox:x:$uid:" > "$root/etc/group"
mount -t tmpfs -o remount,ro sandbox "$root"
cd /
if [ "$uid" = "-" ]; then
  drop=""
  limits="--cpu=$cpu:$((cpu + 1)) --as=$memory --fsize=$fsize"
else
  drop="/usr/bin/setpriv --reuid=$uid --regid=$uid --clear-groups --no-new-privs"
  drop="$drop --inh-caps=-all --bounding-set=-all"
  limits="--cpu=$cpu:$((cpu + 1)) --as=$memory --nproc=$nproc --fsize=$fsize"
fi
exec chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/workspace \
  LANG=C.UTF-8 TMPDIR=/tmp /usr/bin/prlimit $limits -- $drop \
  /bin/sh -c 'cd /workspace && "$@"; exit $?' sandbox "$@"
"""
)

# Without namespaces: the descriptors closed, the workspace as the directory.
UNCONFINED = (
    CLOSE_FDS
    + r"""
cd "$1" && shift && exec "$@"
"""
)

NAMESPACES = ["--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts"]
THROWAWAY_UIDS = (1_000_000, 2_000_000_000)
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
BASH = shutil.which("bash") or "/bin/bash"
SETPRIV = shutil.which("setpriv")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Confinement:
    unshare: list[str]  # the `unshare` options, empty: no namespaces
    switch_uid: bool

    def names(self, network: bool) -> list[str]:
        """What confines a sandbox, for its lease record (`network`: it may use it)."""
        if not self.unshare:
            return ["rlimits"]
        found = ["user"] if "--user" in self.unshare else []
        found += ["pid", "mount", "ipc", "uts"] + ([] if network else ["net"])
        found += ["uid"] if self.switch_uid else []
        return [*found, "rlimits"]


def _works(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@lru_cache(maxsize=1)
def confinement() -> Confinement:
    """The strongest confinement this machine allows (probed once per process)."""
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0 and _works([unshare, *NAMESPACES, "--net", "true"]):
        return Confinement(NAMESPACES, switch_uid=True)
    as_user = ["--user", "--map-root-user", *NAMESPACES]
    if unshare and _works([unshare, *as_user, "--net", "true"]):
        return Confinement(as_user, switch_uid=False)
    log.warning(
        "sandbox: no namespaces on this machine (unshare refused): commands run as plain "
        "subprocesses with resource limits only; they can read host files and the network"
    )
    return Confinement([], switch_uid=False)


_uids_in_use: set[int] = set()


def _throwaway_uid() -> int:
    while True:
        uid = random.randrange(*THROWAWAY_UIDS)
        if uid not in _uids_in_use:
            _uids_in_use.add(uid)
            return uid


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for path in root.rglob("*"):
        os.chown(path, uid, gid, follow_symlinks=False)


@dataclass
class LocalSandbox:
    sandbox_id: str
    workspace: Path
    scratch: Path  # the sandbox's mount point on the host, removed at close
    limits: Limits
    way: Confinement
    uid: int | None
    _running: set[Spawned] = field(default_factory=set)

    @property
    def confinement(self) -> list[str]:
        return self.way.names(self.limits.network)

    def _argv(self, command: list[str]) -> list[str]:
        limits = self.limits
        if not self.way.unshare:
            return [
                BASH,
                "-c",
                UNCONFINED,
                "unconfined",
                str(self.workspace),
                "prlimit",
                f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
                f"--as={limits.memory_bytes}",
                f"--fsize={limits.file_bytes}",
                "--",
                *command,
            ]
        network = [] if limits.network else ["--net"]
        uid = str(self.uid) if self.uid is not None else "-"
        return [
            UNSHARE,
            *self.way.unshare,
            *network,
            "--",
            BASH,
            "-c",
            CONFINE,
            "confine",
            str(self.scratch),
            str(self.workspace),
            uid,
            str(limits.cpu_seconds),
            str(limits.memory_bytes),
            str(limits.processes),
            str(limits.file_bytes),
            *command,
        ]

    async def execute(self, argv: list[str]) -> ExecResult:
        env = {"PATH": SYSTEM_PATH}
        if not self.way.unshare:
            env["HOME"] = str(self.workspace)
        # Killed with the runner, should it die first (its pid namespace with it).
        with_runner = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []
        process = Spawned([*with_runner, *self._argv(argv)], env)
        self._running.add(process)
        try:
            done = await process.finish(self.limits.output_bytes, self.limits.timeout_seconds)
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
        if self.uid is not None:
            await asyncio.to_thread(self._hand_back_workspace)
            _uids_in_use.discard(self.uid)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _hand_back_workspace(self) -> None:
        """The workspace's files belong to the runner again (the uid was lent)."""
        if self.uid is not None and self.workspace.exists():
            _chown_tree(self.workspace, os.getuid(), os.getgid())


class LocalProvider:
    name = "local"

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    async def lease(self, request: LeaseRequest) -> Sandbox:
        way = await asyncio.to_thread(confinement)
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        scratch = get_settings().data_dir.resolve() / "sandboxes" / sandbox_id
        scratch.mkdir(parents=True)
        uid = _throwaway_uid() if way.switch_uid else None
        if uid is not None:
            # The sandbox's user may change the workspace while it holds it.
            await asyncio.to_thread(_chown_tree, request.workspace, uid, uid)
        return LocalSandbox(sandbox_id, request.workspace, scratch, self.limits, way, uid)


__all__ = ["WORKSPACE_MOUNT", "LocalProvider", "LocalSandbox", "confinement"]
