"""What confinement the local sandbox has on this machine: bubblewrap probed once
(`machine`), a cgroup tried (`check`: what `waybill doctor` says, and what a
lease is refused on), and what each mode confines, for the lease record.
"""

from __future__ import annotations

import os
import random
import subprocess
import uuid
from dataclasses import dataclass
from functools import lru_cache

from waybill.services.runner.sandbox import cgroups, seccomp
from waybill.services.runner.sandbox.bwrap import BWRAP, THROWAWAY_UIDS, drop_uid
from waybill.services.runner.sandbox.provider import Limits

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
    drop = drop_uid(random.randrange(*THROWAWAY_UIDS)) if as_root else []
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
            return no_cgroup(error), not_enforced
        return None, not_enforced
    group.remove()
    return None, []


def no_cgroup(error: Exception) -> str:
    return (
        f"no cgroup for the sandbox's memory and processes ({error}); give the runner "
        "one (sandbox.cgroup_parent, a cgroup delegated to its user) or set "
        "`confinement: best_effort`"
    )
