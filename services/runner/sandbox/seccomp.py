"""The local sandbox's seccomp filter: the system calls a command may not make.

bwrap loads it (`--seccomp FD`) last, just before it runs the command, so the
sandbox's own set-up is not affected. Everything not named here is allowed
(the command is an ordinary program); what is refused is what reaches past the
sandbox's walls: new namespaces and mounts (the way out of a private root),
tracing another process, the kernel's keyring, eBPF, kernel modules, and the
terminal's input queue. A refused call fails with EPERM, as an unprivileged
program expects.
"""

from __future__ import annotations

import errno
import os
from functools import lru_cache

import pyseccomp

REFUSED = (
    # namespaces and mounts: the way out of the private root
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    # other processes, the kernel's keyring, eBPF, modules, the machine itself
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "iopl",
    "ioperm",
    "personality",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)

# clone(2) with any namespace flag: refused like unshare. clone3 passes its flags
# in memory a filter cannot read, so it answers ENOSYS: libc then falls back to clone.
CLONE_NAMESPACES = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
TIOCSTI = 0x5412  # pushes input into the terminal: the classic way out of a sandbox


@lru_cache(maxsize=1)
def program() -> bytes:
    """The filter as the BPF program bwrap loads (built once per process)."""
    found = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in REFUSED:
        found.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    # Any namespace bit set is refused: one rule per bit (a rule compares one mask).
    for bit in _bits(CLONE_NAMESPACES):
        found.add_rule(
            pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, bit, bit)
        )
    found.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    found.add_rule(
        pyseccomp.ERRNO(errno.EPERM),
        "ioctl",
        pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI),
    )
    memory = os.memfd_create("waybill-seccomp", os.MFD_CLOEXEC)
    with os.fdopen(memory, "w+b", 0) as file:
        found.export_bpf(file)
        file.seek(0)
        return file.read()


def _bits(mask: int) -> list[int]:
    return [1 << n for n in range(mask.bit_length()) if mask >> n & 1]


def filter_fd() -> int:
    """A fresh descriptor holding the program, at its start (bwrap reads it once)."""
    memory = os.memfd_create("waybill-seccomp", os.MFD_CLOEXEC)
    os.write(memory, program())
    os.lseek(memory, 0, os.SEEK_SET)
    return memory
