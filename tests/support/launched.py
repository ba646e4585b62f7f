"""Waybill started as a user starts it (`waybill up`, `python -m waybill.common.launch`)
in a folder of its own, with none of the test session's WAYBILL_ settings; stopped
as a terminal's Ctrl-C stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.stacks import http_ok, wait_until


def launcher_env(data_dir: Path, http_port: int, **extra: str) -> dict[str, str]:
    """A user's environment: none of this test session's WAYBILL_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAYBILL_")}
    env.update(
        WAYBILL_DATA_DIR=str(data_dir),
        WAYBILL_HTTP_PORT=str(http_port),
        WAYBILL_SHUTDOWN_GRACE_SECONDS="2",
        WAYBILL_RUNNER_NICE="0",
        **extra,
    )
    return env


@dataclass
class Launched:
    process: subprocess.Popen[bytes]
    output: Path
    url: str

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def ready(self) -> bool:
        """Whether it said where it serves (its last ready line is the docs URL)."""
        return "  Docs:" in self.text()

    def grpc_addresses(self) -> set[str]:
        """The addresses its services said they serve on."""
        return set(re.findall(r"serving on (127\.0\.0\.1:\d+)", self.text()))


def hear_ctrl_c() -> None:
    """Give the children this test process starts Ctrl-C's default action, as a
    terminal gives the command it starts. A suite started in the background (`cmd &`
    without job control, as CI may start it) inherits SIGINT ignored, exec keeps it
    ignored, and a launched stack then outlives the `ctrl_c` a test sends. Set once,
    here, not in a `preexec_fn`: Python code run between fork and exec, beside gRPC's
    threads, can hang the child before it ever execs."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def launch(
    folder: Path, http_port: int, command: list[str] | None = None, **extra: str
) -> Launched:
    """`command` (default: the launcher, what `waybill up` runs) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "launcher.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            command or [sys.executable, "-m", "waybill.common.launch"],
            cwd=folder,
            env=launcher_env(folder / ".waybill", http_port, **extra),
            stdout=sink,
            stderr=subprocess.STDOUT,
            process_group=0,  # as a terminal would: Ctrl-C goes to this group
        )
    return Launched(process, output, f"http://127.0.0.1:{http_port}")


def ctrl_c(launched: Launched, seconds: float = 30.0) -> int:
    """What a terminal's Ctrl-C does: SIGINT to the launcher's whole process group."""
    os.killpg(launched.process.pid, signal.SIGINT)
    return launched.process.wait(timeout=seconds)


@contextmanager
def running(
    folder: Path, http_port: int, command: list[str] | None = None, **extra: str
) -> Iterator[Launched]:
    launched = launch(folder, http_port, command, **extra)
    try:
        wait_until(
            lambda: launched.process.poll() is None and http_ok(launched.url) and launched.ready(),
            f"the stack in {folder.name}",
            seconds=90,
        )
        yield launched
    except BaseException:
        print(launched.text()[-4000:])
        raise
    finally:
        if launched.process.poll() is None:
            ctrl_c(launched)
