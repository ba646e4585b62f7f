"""A prompt-injected agent against the host's access to its workspace (issue 31).

The attacker is the agent's own `bash` tool, in the local sandbox. It races the
host: it swaps a folder for a link to a host folder, or a file for a FIFO, while
this test drives every host-side access to the workspace at once — downloads
and the outputs list (delivery, through the gateway), uploads, and the runner's
`write_file` / `read_file` tools (the runner's own code, called here with the
stack's settings). Nothing of the host may come back, nothing may be written
outside the workspace, and delivery must keep serving. Also: a tree 1,500
folders deep, and a workspace that cannot be removed, against `DELETE /threads`.

The sandbox works on a copy of the workspace that is written back into the host
folder when each command ends, so the race is between those write-backs and the
host's reads and writes: the agent's `bash` calls flip the workspace, one state
per call, WAYBILL_TEST_FLIPS times (default 40).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langchain_core.tools import ToolException
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import after_its_end, present, tools, write
from tests.support.run_scopes import tool_config, tool_scope
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack
from waybill.common.workspace_tree import remove_tree

FLIPS = int(os.environ.get("WAYBILL_TEST_FLIPS", "40"))  # even: each race ends as it began
DEEP = 1500
REQUEST_SECONDS = 5.0  # a download slower than this counts as hung
PLANTED_NAMES = 8  # the runner's write_file tool writes docs/planted-0..7.txt


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack-escape-workspace")
    config = data_dir / "waybill.yaml"
    sandbox = {"provider": "local", "cpu_seconds": 120, "timeout_seconds": 120}
    sandbox["allow_without_auth"] = True  # this stack runs with auth off
    config.write_text(yaml.safe_dump({"sandbox": sandbox}))
    with stack_in_mode(
        "sqlite", data_dir, WAYBILL_CONFIG=str(config), WAYBILL_WORKSPACE_IO_SECONDS="10"
    ) as running:
        yield running


@pytest.fixture
def client_timeout() -> float:
    return 120  # a run here waits on a sandboxed loop


@pytest.fixture
def host_secret(stack: Stack) -> Path:
    """A host folder the sandbox's uid cannot read, holding a file named like the
    workspace's output, so a followed link serves it under the output's name."""
    folder = Path(stack.env["WAYBILL_DATA_DIR"]) / f"host-secret-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o700)
    (folder / "report.txt").write_text(f"HOST-SECRET-{uuid.uuid4().hex}")
    return folder


def flips(count: int, flip: str, prepare: str = "true") -> list[tuple[str, dict[str, Any]]]:
    """`bash` calls: `prepare`, then `count` times `flip`. Each call's workspace is
    copied back into the host folder when it ends, so the host meets each state
    the agent leaves, one after the other, while it reads and writes there."""
    return [("bash", {"command": prepare})] + [
        ("bash", {"command": f"{flip}; echo flipped"}) for _ in range(count)
    ]


async def ready_output(client: LangGraphClient, thread_id: str, path: str, text: str) -> None:
    """The run writes and presents `path`: it becomes one of the thread's outputs."""
    given = tools(write(path, text), present(path))
    run = await client.runs.create(thread_id, "lead_agent", input=given)
    assert (await after_its_end(client, thread_id, run["run_id"]))["status"] == "success"


def present_at(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def immutable(path: Path, on: bool) -> None:
    """chattr +i / -i: not even root may then remove what is in the folder."""
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True)


async def start_attack(
    client: LangGraphClient, thread_id: str, steps: list[tuple[str, dict[str, Any]]], sign: Any
) -> dict[str, Any]:
    """Start the run whose `bash` calls race the host; returns once the race is on
    (`sign()`: the first flip has reached the host folder)."""
    config = {"recursion_limit": 4 * len(steps) + 10}
    run: dict[str, Any] = await client.runs.create(
        thread_id, "lead_agent", input=tools(*steps), config=config
    )
    deadline = time.monotonic() + 60
    while not sign():
        assert time.monotonic() < deadline, "the sandboxed flips never started"
        await asyncio.sleep(0.02)
    return run


def assert_every_flip_ran(state: dict[str, Any]) -> None:
    """Each of the run's `bash` flips ran to its end, in the sandbox."""
    answers = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    flips = [m for m in answers if m["name"] == "bash"][1:]  # after `prepare`
    failed = [m["content"] for m in flips if "flipped" not in str(m["content"])]
    assert len(flips) == FLIPS and not failed, failed
    for flip in flips:
        assert flip["status"] == "success", flip["content"]


class Seen:
    """What the host's side of a race got back."""

    def __init__(self) -> None:
        self.statuses: dict[str, list[int]] = {}
        self.leaks: list[str] = []
        self.slowest = 0.0

    def add(self, route: str, status: int, took: float = 0.0) -> None:
        self.statuses.setdefault(route, []).append(status)
        self.slowest = max(self.slowest, took)


def runner_tools_hammer(
    stack: Stack, thread_id: str, secret: str, seen: Seen, stop: threading.Event
) -> None:
    """The runner's own write_file / read_file tools, in a loop, in a run scope with
    the stack's workspaces (as the runner's run scope holds them). Their
    functions are called, not `invoke`: the agent's assembly makes the tool objects
    answer errors as text, which would hide a refusal here."""
    from waybill.services.runner.agent.workspace import read_file as read_tool
    from waybill.services.runner.agent.workspace import write_file as write_tool

    read_file, write_file = read_tool.func, write_tool.func
    assert read_file is not None and write_file is not None
    config: Any = tool_config(tool_scope(stack.settings.workspaces_path(), thread_id=thread_id))
    n = 0
    while not stop.is_set():
        n += 1
        try:
            text = read_file(path="docs/report.txt", config=config)
            seen.add("read_file", 200)
            if secret in text:
                seen.leaks.append(f"read_file #{n}")
        except ToolException:
            seen.add("read_file", 400)
        try:
            # A few names over and over: every flip copies the whole workspace in and
            # out of the sandbox, so a new file each turn made the race quadratic.
            write_file(path=f"docs/planted-{n % PLANTED_NAMES}.txt", content="x", config=config)
            seen.add("write_file", 200)
        except ToolException:
            seen.add("write_file", 400)


async def test_a_link_swapped_into_the_workspace_never_reaches_host_files(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack, host_secret: Path
) -> None:
    secret = (host_secret / "report.txt").read_text()
    secret_sha = hashlib.sha256(secret.encode()).hexdigest()
    thread_id = (await client.threads.create())["thread_id"]
    workspace = stack.settings.workspaces_path() / thread_id
    await ready_output(client, thread_id, "docs/report.txt", "the run's own report")
    # The agent links to a host path it cannot read itself: the host would follow
    # it. Each flip makes `docs` and `uploads` links to it, or folders again.
    flip = (
        "if [ -L docs ]; then rm -f docs uploads; mv docs.real docs; mv uploads.real uploads;"
        f" else mv docs docs.real; mv uploads uploads.real; ln -s {host_secret} docs;"
        f" ln -s {host_secret} uploads; fi"
    )
    steps = flips(FLIPS, flip, prepare="mkdir -p uploads")
    run = await start_attack(client, thread_id, steps, (workspace / "docs").is_symlink)
    seen = Seen()
    stop = threading.Event()
    hammer = threading.Thread(
        target=runner_tools_hammer, args=(stack, thread_id, secret, seen, stop), daemon=True
    )
    hammer.start()

    async def downloads() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            reply = await http.get(f"/threads/{thread_id}/outputs/docs/report.txt")
            seen.add("download", reply.status_code)
            if secret.encode() in reply.content:
                seen.leaks.append(f"download #{n}")

    async def listings() -> None:
        while not stop.is_set():
            reply = await http.get(f"/threads/{thread_id}/outputs")
            seen.add("list", reply.status_code)
            if secret_sha in reply.text:
                seen.leaks.append("the outputs list named the host file's digest")

    async def uploads() -> None:
        while not stop.is_set():
            given = {"files": ("report.txt", b"from the user")}
            reply = await http.post(f"/threads/{thread_id}/uploads", files=given)
            seen.add("upload", reply.status_code)

    async def until_the_loop_ends() -> None:
        await after_its_end(client, thread_id, run["run_id"])
        stop.set()

    try:
        await asyncio.gather(downloads(), listings(), uploads(), until_the_loop_ends())
    finally:
        stop.set()
        hammer.join(30)

    assert_every_flip_ran(await client.threads.get_state(thread_id))
    assert seen.leaks == []
    assert names_in(host_secret) == ["report.txt"]  # nothing written there
    assert (host_secret / "report.txt").read_text() == secret
    counts = {route: dict(Counter(statuses)) for route, statuses in seen.statuses.items()}
    tried = {route: len(statuses) for route, statuses in seen.statuses.items()}
    assert tried["read_file"] >= FLIPS and tried["write_file"] >= FLIPS, counts
    # A loaded machine serves fewer downloads meanwhile; what matters is that
    # both sides of the race were met (below).
    assert tried["download"] >= 30 and tried["upload"] >= 30, counts
    for route, statuses in seen.statuses.items():
        assert set(statuses) <= {200, 400, 404, 422}, (route, sorted(set(statuses)))
    # The race was on: each route both served the workspace and met the link.
    assert 200 in seen.statuses["download"], counts
    assert set(seen.statuses["download"]) & {400, 404}, counts
    assert {200, 400} <= set(seen.statuses["read_file"]), counts
    assert {200, 400} <= set(seen.statuses["write_file"]), counts


async def test_a_fifo_swapped_in_for_an_output_never_blocks_delivery(
    client: LangGraphClient, stack: Stack
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    workspace = stack.settings.workspaces_path() / thread_id
    await ready_output(client, thread_id, "report.txt", "the run's own report")
    # Each flip puts the report aside and a FIFO in its place, or the report back.
    flip = (
        "if [ -e report.real ]; then rm -f report.txt; mv report.real report.txt;"
        " else mv report.txt report.real; mkfifo report.txt; fi"
    )
    run = await start_attack(
        client, thread_id, flips(FLIPS, flip), lambda: present_at(workspace / "report.real")
    )
    seen = Seen()
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=stack.url, timeout=REQUEST_SECONDS) as http:

        async def downloads() -> None:
            while not done.is_set():
                started = time.monotonic()
                reply = await http.get(f"/threads/{thread_id}/outputs/report.txt")
                seen.add("download", reply.status_code, time.monotonic() - started)
                if reply.status_code == 400:
                    assert "not a regular file" in reply.json()["detail"], reply.text

        async def health() -> None:
            while not done.is_set():
                seen.add("ok", (await http.get("/ok")).status_code)
                await asyncio.sleep(0.2)

        async def until_the_loop_ends() -> None:
            await after_its_end(client, thread_id, run["run_id"])
            done.set()

        try:
            await asyncio.gather(downloads(), downloads(), health(), until_the_loop_ends())
        finally:
            done.set()
        after = await http.get(f"/threads/{thread_id}/outputs/report.txt")

    assert_every_flip_ran(await client.threads.get_state(thread_id))
    assert set(seen.statuses["ok"]) == {200}
    statuses = set(seen.statuses["download"])
    assert statuses <= {200, 400, 404}, sorted(seen.statuses["download"])
    # The race was on: the report was served, and met missing or a FIFO.
    assert 200 in statuses and statuses & {400, 404}, "the FIFO's turns were never met"
    assert seen.slowest < REQUEST_SECONDS
    assert after.status_code == 200 and after.content == b"the run's own report"


async def test_a_tree_1500_folders_deep_is_deleted_with_its_thread(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    workspace = stack.settings.workspaces_path() / thread_id
    code = (
        "import os\n"
        f"for _ in range({DEEP}):\n    os.mkdir('d'); os.chdir('d')\n"
        "open('bottom.txt', 'w').write('deep')\nprint('made')"
    )
    run = await client.runs.create(thread_id, "lead_agent", input=tools(("python", {"code": code})))
    await after_its_end(client, thread_id, run["run_id"])
    assert (workspace / "d").is_dir()

    try:
        listed = await http.get(f"/threads/{thread_id}/outputs")
        assert listed.status_code == 200, listed.text
        deleted = await http.delete(f"/threads/{thread_id}")
        assert deleted.status_code == 204, deleted.text
        assert not present_at(workspace)
    finally:
        remove_tree(workspace)  # pytest's own cleanup of its temp folder recurses
    assert (await http.get(f"/threads/{thread_id}")).status_code == 404


async def test_a_workspace_that_cannot_be_removed_keeps_its_thread(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    workspace = stack.settings.workspaces_path() / thread_id
    await ready_output(client, thread_id, "locked/kept.txt", "kept")
    # As a read-only mount, a failing disk or another uid's folder would refuse.
    immutable(workspace / "locked", True)
    try:
        refused = await http.delete(f"/threads/{thread_id}")
        assert refused.status_code == 503, refused.text
        assert "workspace" in refused.json()["detail"]
        assert (await http.get(f"/threads/{thread_id}")).status_code == 200
        assert (workspace / "locked" / "kept.txt").read_text() == "kept"
    finally:
        immutable(workspace / "locked", False)
    deleted = await http.delete(f"/threads/{thread_id}")
    assert deleted.status_code == 204, deleted.text
    assert not workspace.exists()
