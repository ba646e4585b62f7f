"""What a sandbox is, whoever provides it.

A run's `bash` and `python` tools run their commands in a sandbox, leased when
the run first needs one and released when the run ends (see leases.py). A
sandbox sees the thread's workspace at `/workspace` and nothing else of the
host; each command is limited in CPU time, memory, processes, file size,
output and wall-clock time, and reaches no network unless the config allows.

Two providers: `local` (a confined subprocess per command, local.py) and
`kubernetes` (a pod per sandbox, kubernetes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from waybill.common.config_file import SandboxSpec

WORKSPACE_MOUNT = "/workspace"


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int
    memory_bytes: int
    processes: int
    file_bytes: int
    output_bytes: int
    timeout_seconds: float
    network: bool
    disk_bytes: int = 256 * 1024 * 1024
    confinement: str = "strict"  # strict | best_effort | unconfined (SandboxSpec)
    cgroup_parent: str | None = None

    @classmethod
    def of(cls, spec: SandboxSpec) -> Limits:
        return cls(
            cpu_seconds=spec.cpu_seconds,
            memory_bytes=spec.memory_mb * 1024 * 1024,
            processes=spec.processes,
            file_bytes=spec.file_mb * 1024 * 1024,
            output_bytes=spec.output_bytes,
            timeout_seconds=spec.timeout_seconds,
            network=spec.network,
            disk_bytes=spec.disk_mb * 1024 * 1024,
            confinement=spec.confinement,
            cgroup_parent=spec.cgroup_parent,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_mb": self.memory_bytes // (1024 * 1024),
            "processes": self.processes,
            "file_mb": self.file_bytes // (1024 * 1024),
            "output_bytes": self.output_bytes,
            "timeout_seconds": self.timeout_seconds,
            "network": self.network,
            "disk_mb": self.disk_bytes // (1024 * 1024),
        }


@dataclass(frozen=True)
class LeaseRequest:
    run_id: str
    epoch: int
    thread_id: str
    workspace: Path  # the thread's workspace on this host (or the shared volume)


@dataclass
class Output:
    """stdout or stderr, kept up to a limit; what is beyond it is counted, not kept."""

    limit: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, data: bytes) -> None:
        room = max(self.limit - len(self.kept), 0)
        self.kept += data[:room]
        self.dropped += max(len(data) - room, 0)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    # The limit it ran into: cpu | memory | timeout | output | processes | disk | None.
    limit_hit: str | None = None
    output_dropped: int = 0  # bytes of output beyond the limit, not kept


# Exit statuses of a process killed by a signal, as a shell reports them (128 + n).
SIGNAL_EXIT = 128
SIGXCPU = 24
SIGKILL = 9
MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "out of memory", "std::bad_alloc")
PROCESS_WORDS = ("Resource temporarily unavailable", "fork: retry")
DISK_WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "does not fit in the sandbox's disk",
)


def limit_hit(
    exit_code: int, stderr: str, timed_out: bool, dropped: int, oom_killed: bool = False
) -> str | None:
    """Which limit a finished command ran into, from how it ended (`oom_killed`: its
    cgroup says the kernel killed a process of it for the memory limit)."""
    if timed_out:
        return "timeout"
    if oom_killed:
        return "memory"
    if exit_code in (SIGNAL_EXIT + SIGXCPU, -SIGXCPU, SIGNAL_EXIT + SIGKILL, -SIGKILL):
        return "cpu"  # SIGKILL: the CPU limit's hard end (nothing else here sends it)
    if exit_code != 0 and any(word in stderr for word in MEMORY_WORDS):
        return "memory"
    if exit_code != 0 and any(word in stderr for word in PROCESS_WORDS):
        return "processes"
    if exit_code != 0 and any(word in stderr for word in DISK_WORDS):
        return "disk"
    if dropped:
        return "output"
    return None


class Sandbox(Protocol):
    """One run's sandbox: commands run in it until it is closed."""

    @property
    def sandbox_id(self) -> str: ...

    @property
    def confinement(self) -> list[str]:
        """What confines it, e.g. ["pid", "mount", "net", "uid", "rlimits"] (said when leased)."""
        ...

    @property
    def lease_details(self) -> dict[str, object]:
        """More of its lease record: `not_enforced` (limits that do not hold here),
        `cgroup`, `workspace`, `mode` (the configured confinement)."""
        ...

    async def execute(self, argv: list[str]) -> ExecResult: ...

    async def close(self) -> None:
        """Stop everything still running in it and free what it held."""


class SandboxProvider(Protocol):
    name: str

    async def lease(self, request: LeaseRequest) -> Sandbox: ...


class SandboxUnavailable(RuntimeError):
    """No sandbox could be leased (the tool call fails; the run goes on)."""
