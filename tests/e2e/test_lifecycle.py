"""Process lifecycle: SIGTERM stops a service gracefully; the launcher notices a death."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import says
from tests.support.stacks import running_stack, stack_env


async def test_sigterm_lets_a_running_run_finish(tmp_path: Path) -> None:
    env = stack_env(tmp_path, WAYBILL_SHUTDOWN_GRACE_SECONDS="20")
    with running_stack(env, tmp_path) as stack:
        client = get_client(url=stack.url)
        thread = await client.threads.create()
        run = await client.runs.create(
            thread["thread_id"],
            "lead_agent",
            input=says("/tokens 20000"),
            stream_mode="messages-tuple",
        )
        for _ in range(200):  # until the runner has started it
            if (await client.runs.get(thread["thread_id"], run["run_id"]))["status"] == "running":
                break
            await asyncio.sleep(0.02)
        runner = stack.processes["runner"]
        runner.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(runner.wait, 30)
        assert code == 0
        finished = await client.runs.get(thread["thread_id"], run["run_id"])
        assert finished["status"] == "success"
        await client.aclose()

        for name in ("gateway", "admission", "journal", "delivery"):
            stack.processes[name].send_signal(signal.SIGTERM)
            assert stack.processes[name].wait(15) == 0, name


def _children(pid: int) -> dict[int, str]:
    listing = subprocess.run(
        ["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True
    ).stdout
    return {int(line.split(None, 1)[0]): line.split(None, 1)[1] for line in listing.splitlines()}


@contextmanager
def launched(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """`python -m waybill.common.launch` (`make run`), ready; killed if a test leaves it.
    The runner's priority is left at its default."""
    env = {**os.environ, **stack_env(tmp_path)}
    del env["WAYBILL_RUNNER_NICE"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "waybill.common.launch"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        for line in launcher.stdout:
            if "ready at" in line:
                break
        assert httpx.get(f"http://127.0.0.1:{env['WAYBILL_HTTP_PORT']}/ok").status_code == 200
        yield launcher
    finally:
        if launcher.poll() is None:
            launcher.kill()


@pytest.mark.timeout(90)
def test_launcher_stops_everything_when_one_service_dies(tmp_path: Path) -> None:
    with launched(tmp_path) as launcher:
        children = _children(launcher.pid)
        assert len(children) == 5
        journal = next(pid for pid, args in children.items() if "services.journal" in args)
        os.kill(journal, signal.SIGKILL)

        rest, _ = launcher.communicate(timeout=60)
        assert "journal exited" in rest
        assert launcher.returncode != 0
        time.sleep(0.2)
        for pid in children:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.mark.timeout(90)
def test_launcher_stops_every_service_on_sigterm(tmp_path: Path) -> None:
    with launched(tmp_path) as launcher:
        children = _children(launcher.pid)
        assert len(children) == 5
        # Runs executing yield the CPU to runs being admitted (settings.runner_nice).
        priorities = {
            args.split(" -m ", 1)[1].split()[0]: os.getpriority(os.PRIO_PROCESS, pid)
            for pid, args in children.items()
        }
        # Relative to the launcher's own: the suite may itself run under `nice`
        # (a loaded CI machine), and a niceness stops at 19.
        base = os.getpriority(os.PRIO_PROCESS, launcher.pid)
        assert priorities == {
            "waybill.services.runner.server": min(base + 10, 19),
            "waybill.services.admission.server": base,
            "waybill.services.journal.server": base,
            "waybill.services.delivery.server": base,
            "waybill.gateway.server": base,
        }
        launcher.send_signal(signal.SIGTERM)  # a supervisor stopping `make run`

        rest, _ = launcher.communicate(timeout=60)
        assert "waybill: stopping" in rest
        assert launcher.returncode == 0
        for pid in children:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
