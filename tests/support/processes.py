"""Processes on this machine, read from /proc: what a test looks for to prove that
something it started (a sandbox's command, a stack's service) is gone."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def running_with(marker: str) -> list[int]:
    """The pids of processes, other than this one, whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):  # it ended while we looked
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
    return found
