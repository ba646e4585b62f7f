"""CPU time per process, to show which hop of the gateway path spends it (Linux /proc)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

CpuProbe = Callable[[], dict[str, float]]


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, or None where /proc is unavailable."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # Fields after the `(comm)` part, which may itself contain spaces.
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def this_process_probe(label: str) -> CpuProbe:
    return lambda: {label: time.process_time()}


def stack_probe(pids: Mapping[str, int], client_label: str) -> CpuProbe:
    def probe() -> dict[str, float]:
        readings = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        known = {name: seconds for name, seconds in readings.items() if seconds is not None}
        return {**known, client_label: time.process_time()}

    return probe


def spent_per_run(before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, float]:
    return {name: (after[name] - before[name]) / runs for name in after if name in before}


def postgres_probe(database: str) -> CpuProbe:
    """CPU of the Postgres backends connected to `database` (read from their titles),
    summed; backends that exited between two readings are not counted."""

    def probe() -> dict[str, float]:
        total = 0.0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    title = cmdline.read().decode(errors="replace")
            except OSError:
                continue
            if title.startswith("postgres: ") and f" {database} " in title:
                total += process_cpu_seconds(int(entry.name)) or 0.0
        return {"postgres": total}

    return probe
