"""A sandbox per run: `bash` and `python` through the gateway and langgraph-sdk.

The scripted model calls the tools; the commands run in the local provider's
confined subprocess (bubblewrap: namespaces, a private root, uid 1000 inside,
seccomp, a cgroup, resource limits; tests/e2e/test_escape_sandbox.py attacks it).
What is checked: output comes back; the sandbox sees the workspace and nothing
else of the host, and no network; its CPU and memory limits end a command with
a tool error naming the limit; the sandbox is released when the run ends
(success, error, cancel) with nothing left running; every step is a `sandbox`
record in the run's journal.
Embedded (SQLite) and on Postgres.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import after_its_end, present, tools
from tests.support.processes import running_with
from tests.support.stacks import eventually, stack_in_mode, start_second
from waybill.common.launch import Stack
from waybill.services.runner.sandbox.confinement import machine

CPU_SECONDS = 1
MEMORY_MB = 128


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-sandbox-{request.param}")
    config = data_dir / "waybill.yaml"
    sandbox = {"provider": "local", "cpu_seconds": CPU_SECONDS, "memory_mb": MEMORY_MB}
    sandbox["allow_without_auth"] = True  # this stack runs with auth off
    config.write_text(yaml.safe_dump({"sandbox": {**sandbox, "timeout_seconds": 60}}))
    with stack_in_mode(request.param, data_dir, WAYBILL_CONFIG=str(config)) as running:
        yield running


@pytest.fixture
def client_timeout() -> float:
    return 60  # conftest's `client`, longer: a run here waits on sandboxed commands


async def records(http: httpx.AsyncClient, thread_id: str, run_id: str) -> list[dict[str, Any]]:
    reply = await http.get(f"/threads/{thread_id}/runs/{run_id}/events", params={"type": "sandbox"})
    assert reply.status_code == 200, reply.text
    return [event["data"] for event in reply.json()]


def tool_answers(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in state["values"]["messages"] if m["type"] == "tool"]


async def finished(
    client: LangGraphClient, thread_id: str, given: dict[str, Any], **kw: Any
) -> Any:
    run = await client.runs.create(thread_id, "lead_agent", input=given, **kw)
    return await after_its_end(client, thread_id, run["run_id"])


async def test_bash_and_python_run_in_the_sandbox_and_see_the_workspace(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(
        ("bash", {"command": "echo made in the sandbox > made.txt && cat made.txt && pwd"}),
        ("python", {"code": "print(open('made.txt').read().upper(), 6 * 7)"}),
        present("made.txt"),
    )
    run = await finished(client, tid, script)

    assert run["status"] == "success"
    bash, python, _ = tool_answers(await client.threads.get_state(tid))
    assert bash["status"] == "success"
    assert "exit code 0" in bash["content"]
    assert "made in the sandbox" in bash["content"] and "/workspace" in bash["content"]
    assert "MADE IN THE SANDBOX" in python["content"] and "42" in python["content"]
    made = Path(stack.env["WAYBILL_DATA_DIR"]) / "workspaces" / tid / "made.txt"
    assert made.read_text() == "made in the sandbox\n"
    assert made.stat().st_uid == os.getuid()  # the workspace is the runner's again
    receipt = (await http.get(f"/threads/{tid}/runs/{run['run_id']}/receipt")).json()
    assert receipt["verdict"] == "delivered"

    leased, released = await records(http, tid, run["run_id"])
    assert leased["action"] == "leased" and leased["provider"] == "local"
    confined = {"user", "pid", "mount", "net", "pivot_root", "uid", "seccomp", "cgroup"}
    assert confined <= set(leased["confinement"]), leased
    assert leased["mode"] == "strict" and leased["not_enforced"] == []
    assert released == {
        "action": "released",
        "sandbox_id": leased["sandbox_id"],
        "reason": "success",
    }


async def test_the_sandbox_cannot_read_host_files_nor_use_the_network(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    assert machine().bwrap is None, machine().refusal()
    secret = Path(stack.env["WAYBILL_DATA_DIR"]) / f"host-secret-{uuid.uuid4().hex}.txt"
    secret.write_text("not for the sandbox")
    port = stack.env["WAYBILL_HTTP_PORT"]
    connect = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('CONNECTED')\n"
        "except OSError as error:\n    print('REFUSED', error)\n"
    )
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(
        ("bash", {"command": f"cat {secret}; ls /"}),
        # Its own processes only, and no descriptor the runner holds open (3: ls's own).
        ("bash", {"command": "ls /proc | grep -c '^[0-9]'; ls /proc/self/fd"}),
        ("python", {"code": connect}),
    )
    run = await finished(client, tid, script)

    assert run["status"] == "success"
    listing, inside, network = tool_answers(await client.threads.get_state(tid))
    assert "not for the sandbox" not in listing["content"]
    assert "No such file or directory" in listing["content"]
    # Its root: the system's programs (read-only), its own /tmp, /proc and /dev, the workspace.
    shown = set(listing["content"].split("stdout:\n", 1)[1].split())
    assert {"usr", "workspace", "tmp", "proc"} <= shown
    assert not shown & {"root", "home", "work", "var", "opt", "srv"}
    processes, *descriptors = inside["content"].split("stdout:\n", 1)[1].split()
    # Its own only: bwrap's init, the shell around the command and its watcher, bash, ls, grep.
    assert int(processes) <= 6, inside["content"]
    assert descriptors == ["0", "1", "2", "3"]
    assert "REFUSED" in network["content"] and "CONNECTED" not in network["content"]


async def test_cpu_and_memory_limits_end_a_command_with_a_clear_tool_error(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(
        ("python", {"code": "while True:\n    pass"}),
        ("python", {"code": f"block = bytearray({2 * MEMORY_MB} * 1024 * 1024)"}),
        ("bash", {"command": "head -c 100000 /dev/zero | tr '\\0' Z"}),
        ("bash", {"command": "echo still usable"}),
    )
    run = await finished(client, tid, script)

    assert run["status"] == "success"
    cpu, memory, output, after = tool_answers(await client.threads.get_state(tid))
    assert cpu["status"] == "error"
    assert f"its CPU time limit ({CPU_SECONDS} s)" in cpu["content"]
    assert memory["status"] == "error"
    assert f"its memory limit ({MEMORY_MB} MiB)" in memory["content"]
    assert "MemoryError" in memory["content"]
    # Output beyond the limit is counted, not kept (the default: 64 KiB a stream).
    assert output["status"] == "success"
    assert output["content"].count("Z") == 65536
    assert output["content"].endswith("[output truncated: 34464 more bytes not kept]")
    assert "still usable" in after["content"]
    listed = await records(http, tid, run["run_id"])
    assert [(r["action"], r.get("limit")) for r in listed] == [
        ("leased", None),
        ("limit_hit", "cpu"),
        ("limit_hit", "memory"),
        ("limit_hit", "output"),
        ("released", None),
    ]


async def test_the_sandbox_is_released_when_the_run_is_cancelled(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"  # sleep takes seconds
    thread = await client.threads.create()
    tid = thread["thread_id"]
    given = tools(("bash", {"command": f"sleep {marker} & sleep {marker}"}))
    run = await client.runs.create(tid, "lead_agent", input=given)

    await eventually(lambda: _running(marker), "the command running in its sandbox")
    await client.runs.cancel(tid, run["run_id"])
    ended = await after_its_end(client, tid, run["run_id"])

    assert ended["status"] == "interrupted"
    assert running_with(f"sleep {marker}") == []
    leased, released = await records(http, tid, run["run_id"])
    assert released == {
        "action": "released",
        "sandbox_id": leased["sandbox_id"],
        "reason": "interrupted",
    }


async def _running(marker: str) -> bool:
    return len(running_with(f"sleep {marker}")) >= 2


async def test_the_sandbox_is_released_when_the_run_fails(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    thread = await client.threads.create()
    tid = thread["thread_id"]
    # Its recursion limit ends the run with an error while the background sleep goes on.
    command = {"command": f"(sleep {marker} &) ; echo started"}
    script = tools(("bash", command), ("bash", command), ("bash", command))
    run = await finished(client, tid, script, config={"recursion_limit": 3})

    assert run["status"] == "error"
    assert running_with(f"sleep {marker}") == []
    leased, released = await records(http, tid, run["run_id"])
    assert leased["action"] == "leased"
    assert released["action"] == "released" and released["reason"] == "error"


def parent_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def runner_holding(stack: Stack, pid: int) -> str:
    """The stack's runner process that `pid` descends from."""
    runners = {p.pid: name for name, p in stack.processes.items() if name.startswith("runner")}
    while pid > 1 and pid not in runners:
        pid = parent_of(pid)
    return runners[pid]


async def test_a_runner_that_dies_takes_its_sandbox_with_it(
    client: LangGraphClient, stack: Stack
) -> None:
    """Last of the stack's tests: it kills a runner (a second one serves what follows)."""
    start_second(stack, "runner")
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    thread = await client.threads.create()
    given = tools(("bash", {"command": f"sleep {marker}"}))
    await client.runs.create(thread["thread_id"], "lead_agent", input=given)

    # The command and the sandbox's own processes (their arguments hold it too).
    found = await eventually(lambda: _found(marker), "the command running in its sandbox")
    victim = stack.processes[runner_holding(stack, found[0])]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    # Those processes: the run's takeover by the second runner may start the same
    # command again, in a sandbox of its own (it did, on a loaded machine).
    await eventually(lambda: _gone(marker, found), "the sandbox's command gone with its runner")


async def _found(marker: str) -> list[int]:
    return running_with(f"sleep {marker}")


async def _gone(marker: str, pids: list[int]) -> bool:
    return not set(pids) & set(running_with(f"sleep {marker}"))


# ---- dying with the runner, without a stack -------------------------------------------

# A "runner" that starts a command through `dies_with_runner()` and exits at once,
# before the command has asked for its death signal (its first step waits).
DIES_FIRST = """
import subprocess, sys
from waybill.services.runner.sandbox.bwrap import BASH, dies_with_runner
late = [BASH, "-c", 'sleep 0.5; exec "$@"', "late"]
subprocess.Popen([*late, *dies_with_runner(), "sleep", sys.argv[1]], start_new_session=True)
"""


def test_a_command_whose_runner_died_before_it_asked_to_die_with_it_stops() -> None:
    """The kernel's death signal, asked for once the parent is gone, never comes:
    without the check that follows it, the command would run on, orphaned."""
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    subprocess.run([sys.executable, "-c", DIES_FIRST, marker], check=True, timeout=30)
    try:
        time.sleep(1.5)  # its first step is over: it asked, and checked
        assert running_with(f"sleep {marker}") == []
    finally:
        for pid in running_with(f"sleep {marker}"):
            os.kill(pid, signal.SIGKILL)


# A "runner" whose kernel death signals never come (bwrap sets its own late in
# its setup: a runner killed before then leaves bwrap's init orphaned, as seen in
# CI once in some hundred takeovers): it leases a real sandbox, runs `sleep`, and
# is killed. Only the lifeline is left to end the sandbox.
NO_DEATH_SIGNAL = """
import asyncio, sys
from pathlib import Path
from waybill.services.runner.sandbox import local
from waybill.services.runner.sandbox.provider import LeaseRequest, Limits

with_signal = local.bwrap_options
local.bwrap_options = lambda limits: [o for o in with_signal(limits) if o != "--die-with-parent"]
local.dies_with_runner = lambda: []

async def main() -> None:
    limits = Limits(5, 256 << 20, 16, 1 << 20, 4096, 120.0, network=False)
    workspace = Path(sys.argv[2])
    sandbox = await local.LocalProvider(limits).lease(LeaseRequest("run", 1, "t", workspace))
    await sandbox.execute(["sleep", sys.argv[1]])

asyncio.run(main())
"""


def test_a_sandbox_whose_runner_died_without_a_death_signal_stops(tmp_path: Path) -> None:
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    env = {**os.environ, "WAYBILL_DATA_DIR": str(tmp_path)}
    runner = subprocess.Popen(
        [sys.executable, "-c", NO_DEATH_SIGNAL, marker, str(tmp_path / "workspace")], env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not any(_is_the_command(pid, marker) for pid in running_with(marker)):
            assert runner.poll() is None and time.monotonic() < deadline, "it never ran"
            time.sleep(0.05)
        runner.kill()
        runner.wait(10)
        deadline = time.monotonic() + 10
        while running_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running_with(marker) == []
    finally:
        runner.kill()
        for pid in running_with(marker):
            os.kill(pid, signal.SIGKILL)


def _is_the_command(pid: int, marker: str) -> bool:
    """The `sleep` itself is running (not only bwrap, whose arguments hold it too)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == f"sleep\0{marker}\0".encode()
    except OSError:
        return False


# ---- leases, without a stack: one sandbox per (run, epoch) -----------------------------


class CountingProvider:
    """Leases real local sandboxes and counts them (the registry is what is tested)."""

    name = "local"

    def __init__(self) -> None:
        from waybill.services.runner.sandbox.local import LocalProvider
        from waybill.services.runner.sandbox.provider import Limits

        limits = Limits(1, 128 << 20, 16, 1 << 20, 4096, 30.0, network=False)
        self.inner = LocalProvider(limits)
        self.leased: list[Any] = []

    async def lease(self, request: Any) -> Any:
        sandbox = await self.inner.lease(request)
        self.leased.append(sandbox)
        return sandbox


async def test_a_run_leases_once_and_a_takeover_gets_a_fresh_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from waybill.common.settings import get_settings
    from waybill.services.runner.sandbox.leases import RunSandboxes
    from waybill.services.runner.sandbox.provider import LeaseRequest

    monkeypatch.setenv("WAYBILL_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    provider = CountingProvider()
    registry = RunSandboxes(lambda: provider)
    notes: list[dict[str, Any]] = []
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    first, takeover = (LeaseRequest("run", epoch, "thread", workspace) for epoch in (1, 2))
    try:
        for request in (first, first, takeover):
            done = await registry.execute(request, ["/bin/echo", "hi"], notes.append)
            assert done.stdout == "hi\n"
        assert len(provider.leased) == 2 and registry.holding() == 2
        await registry.release("run", 1, "lease_lost")
        await registry.release("run", 1, "lease_lost")  # a second release is a no-op
        await registry.release("run", 2, "success")
    finally:
        get_settings.cache_clear()
    assert registry.holding() == 0
    ids = [sandbox.sandbox_id for sandbox in provider.leased]
    assert [(n["action"], n["sandbox_id"]) for n in notes] == [
        ("leased", ids[0]),
        ("leased", ids[1]),
        ("released", ids[0]),
        ("released", ids[1]),
    ]
    # Nothing is left of them: no copy of the workspace beside it, no cgroup.
    assert os.listdir(tmp_path) == ["workspace"]
    for sandbox in provider.leased:
        assert sandbox.cgroup is not None
        assert not any(path.exists() for path in sandbox.cgroup.paths)
