"""A cgroup per local sandbox: its memory and processes limited as a whole.

Resource limits (setrlimit) hold per process, and a sandbox is many processes;
a cgroup holds them all. The runner makes one per sandbox, under a parent it
may write to: `sandbox.cgroup_parent` when configured (a cgroup delegated to
the runner's user, e.g. by systemd's `Delegate=yes`; a relative path is under
the runner's own cgroup), otherwise its own cgroup.
Root may always make one; another user only where it was delegated. Both
cgroup versions: v1 (a `memory` and a `pids` hierarchy) and v2 (one unified
tree, where a cgroup with processes cannot give controllers to children: the
runner first moves itself into a leaf of its own).

A command joins the cgroup before it enters its namespaces (the shell that
starts it writes its own pid into each `cgroup.procs`), so every process it
starts is counted from the first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

V1_CONTROLLERS = ("memory", "pids")
RUNNER_LEAF = "waybill-runner"  # v2: where the runner moves itself to free its cgroup


class CgroupUnavailable(RuntimeError):
    """No cgroup could be made for the sandbox (the reason says why)."""


@dataclass(frozen=True)
class Hierarchy:
    controller: str  # memory | pids | "" (v2: one tree for all)
    mount: Path
    own: str  # the runner's cgroup in it, e.g. "/user.slice/..."


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, super options) of each cgroup file system mounted here."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        fstype, _source, options = (rest.split() + ["", ""])[:3]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fstype, Path(fields.split()[4]), set(options.split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """The runner's cgroup per controller ("" for v2), from /proc/self/cgroup."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def hierarchies() -> tuple[int, list[Hierarchy]]:
    """The cgroup version in use here and where its controllers are mounted."""
    mounts, own = _mounts(), _own_cgroups()
    v1 = {}
    for fstype, point, options in mounts:
        for controller in V1_CONTROLLERS:
            if fstype == "cgroup" and controller in options:
                v1[controller] = Hierarchy(controller, point, own.get(controller, "/"))
    if len(v1) == len(V1_CONTROLLERS):
        return 1, [v1[c] for c in V1_CONTROLLERS]
    for fstype, point, _ in mounts:
        if fstype == "cgroup2":
            return 2, [Hierarchy("", point, own.get("", "/"))]
    raise CgroupUnavailable("no cgroup file system with the memory and pids controllers")


@dataclass
class SandboxCgroup:
    version: int
    paths: list[Path]  # one per hierarchy: the memory's first
    relative: str  # its path inside the hierarchy, for the lease record

    @property
    def procs_files(self) -> list[str]:
        """What the command's first process writes its pid into to join it."""
        return [str(path / "cgroup.procs") for path in self.paths]

    def oom_kills(self) -> int:
        """Processes the kernel killed for the memory limit so far."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.paths[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
        return sorted(found)

    def kill_all(self, seconds: float = 5.0) -> None:
        """Kill every process in it (a fork bomb too: until none is left)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.paths[0] / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + seconds
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for path in self.paths:
            for _ in range(50):  # a killed process leaves its cgroup a moment later
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)

    def record(self) -> dict[str, object]:
        return {"version": self.version, "path": self.relative}


def create(name: str, memory_bytes: int, processes: int, parent: str | None) -> SandboxCgroup:
    """A cgroup for one sandbox, its limits written; CgroupUnavailable if it cannot be."""
    version, found = hierarchies()
    made: list[Path] = []
    try:
        for hierarchy in found:
            base = _parent_dir(version, hierarchy, parent)
            path = base / name
            path.mkdir()
            made.append(path)
            _write_limits(version, hierarchy.controller, path, memory_bytes, processes)
    except OSError as error:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
        raise CgroupUnavailable(f"cannot make a cgroup ({error})") from error
    relative = "/" + str(made[0].relative_to(found[0].mount))
    return SandboxCgroup(version, made, relative)


def sweep(prefix: str, alive: Callable[[int], bool], parent: str | None) -> list[str]:
    """Empty and remove the sandbox cgroups of runners that died: named
    `<prefix><runner pid>-...`, their runner's pid no longer alive. What their
    namespaces left running (a runner killed mid-command) is killed here."""
    swept = []
    with contextlib.suppress(CgroupUnavailable, OSError):
        version, found = hierarchies()
        for hierarchy in found:
            base = _parent_dir(version, hierarchy, parent, give=False)
            for path in base.glob(f"{prefix}*"):
                pid = path.name[len(prefix) :].split("-", 1)[0]
                if path.is_dir() and pid.isdigit() and not alive(int(pid)):
                    SandboxCgroup(version, [path], path.name).remove()
                    swept.append(path.name)
    return swept


def _parent_dir(version: int, hierarchy: Hierarchy, parent: str | None, give: bool = True) -> Path:
    # A relative parent is under the runner's own cgroup; an absolute one, from the top.
    if parent is None:
        inside = hierarchy.own
    elif parent.startswith("/"):
        inside = parent
    else:
        inside = f"{hierarchy.own.rstrip('/')}/{parent}"
    inside = inside.strip("/")
    base = hierarchy.mount / inside if inside else hierarchy.mount
    if version == 2 and give:
        _give_controllers(base, own=parent is None and bool(inside))
    return base


def _give_controllers(base: Path, own: bool) -> None:
    """v2: the parent's children may use memory and pids; a cgroup with processes
    cannot (the "no internal processes" rule), so the runner leaves its own first."""
    control = base / "cgroup.subtree_control"
    if {"memory", "pids"} <= set(control.read_text().split()):
        return
    try:
        control.write_text("+memory +pids")
    except OSError:
        if not own:
            raise
        leaf = base / RUNNER_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (base / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                (leaf / "cgroup.procs").write_text(pid)
        control.write_text("+memory +pids")


def _write_limits(
    version: int, controller: str, path: Path, memory_bytes: int, processes: int
) -> None:
    if version == 1 and controller == "memory":
        (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
        swap = path / "memory.memsw.limit_in_bytes"  # present when swap is accounted
        if swap.exists():
            swap.write_text(str(memory_bytes))
    elif version == 1 and controller == "pids":
        (path / "pids.max").write_text(str(processes))
    else:
        (path / "memory.max").write_text(str(memory_bytes))
        swap = path / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
        (path / "pids.max").write_text(str(processes))
