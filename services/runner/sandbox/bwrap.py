"""The command line of a confined command: the binaries it runs through, the uids
it runs as, the descriptors it is given (the workspace's way back, the seccomp
program, its own /etc/passwd and /etc/group), the shell scripts outside and
inside bubblewrap, and bubblewrap's options (the namespaces and the private root
that local.py's docstring lists).
"""

from __future__ import annotations

import os
import shutil

from waybill.services.runner.sandbox.provider import WORKSPACE_MOUNT, Limits

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
BASH = shutil.which("bash") or "/bin/bash"
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_UID = 1000
THROWAWAY_UIDS = (1_000_000, 2_000_000_000)
TMP_BYTES = 64 * 1024 * 1024

# The descriptors a command is given: the workspace's way back, the seccomp
# program, /etc/passwd and /etc/group, and the lifeline (a pipe whose only
# writing end the runner holds, never written: it reads end-of-file once the
# runner has gone, however it went).
WORKSPACE_OUT_FD, SECCOMP_FD, PASSWD_FD, GROUP_FD, LIFELINE_FD = 3, 10, 11, 12, 13
PASSWD = f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/workspace:/bin/bash\n"
GROUP = f"sandbox:x:{SANDBOX_UID}:\n"

# Outside the sandbox, before bwrap: close whatever the runner left open (but the
# descriptors given), join the sandbox's cgroup, then run what follows.
#   $1: how many cgroup.procs files follow; then them; then the command.
OUTSIDE = r"""
for fd in /proc/self/fd/*; do
  fd=${fd##*/}
  case $fd in 0|1|2|3|10|11|12|13) ;; *) { exec {fd}>&-; } 2>/dev/null || true ;; esac
done
n=$1; shift
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "waybill: cannot join the sandbox's cgroup ($1)" >&2; exit 125; }
  shift; n=$((n - 1))
done
cd / && exec /usr/bin/env -i "$@"
"""

# Inside, as uid 1000: a watcher that kills every process of the sandbox once the
# lifeline ends (the runner gone: bwrap's own death signal is set late in its
# setup and is lost to a runner that dies before it), the workspace in from
# stdin, the command under its limits (without the way back or the lifeline),
# every process it left killed (the watcher too), the workspace out on fd 3.
#   $1-$4: cpu seconds, address space, processes, file size; then the command.
INSIDE = r"""
( exec 0</dev/null 1>/dev/null 2>&1 3>&-; read -r -u 13 _; kill -KILL -1 ) & disown
exec 13<&-
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


# A command dies with the runner that started it: setpriv asks the kernel for
# SIGKILL at its parent's death. Asked for after the parent died (the runner
# killed between the spawn and this step), it never comes; so the command then
# checks that its parent is still the runner, and stops if it is not.
STILL_THE_RUNNERS = 'test "$PPID" = "$0" || exit 125; exec "$@"'


def dies_with_runner() -> list[str]:
    """What a command runs through to die with this process (the runner)."""
    return [SETPRIV, "--pdeathsig", "KILL", "--", BASH, "-c", STILL_THE_RUNNERS, str(os.getpid())]


def drop_uid(uid: int) -> list[str]:
    return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def bwrap_options(limits: Limits) -> list[str]:
    """The sandbox's namespaces and private root (see local.py's docstring)."""
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
