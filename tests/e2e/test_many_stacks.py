"""Many stacks, one machine: two `waybill up` side by side share no socket.

The launcher (`python -m waybill.common.launch`, what `waybill up` runs) is started
as a user starts it, with only a data directory and an HTTP port: it picks the
gRPC ports itself. Every gRPC server binds its port exclusively (no SO_REUSEPORT),
so a stack told to use ports another stack holds stops at once, saying which.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.launched import ctrl_c, launch, running
from tests.support.stacks import free_port
from waybill.common.grpc_server import bind, new_server
from waybill.common.ports import PORT_IN_USE_EXIT_CODE, PortInUse

# A stack told to bind a busy port says so this fast (the launcher's own start-up,
# imports included, is most of it).
BUSY_PORT_SECONDS = 3.0


def busy_refusal(folder: Path, http_port: int, **extra: str) -> tuple[int, str, float]:
    """A launcher that must refuse: its exit status, its output, how long it took."""
    started = time.monotonic()
    launched = launch(folder, http_port, **extra)
    code = launched.process.wait(timeout=60)
    return code, launched.text(), time.monotonic() - started


async def run_once(url: str, text: str) -> tuple[str, str]:
    """One run of the built-in lead agent (the scripted model echoes); its thread id
    and final answer."""
    client = get_client(url=url, timeout=30)
    thread = await client.threads.create()
    values = await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": text}]}
    )
    assert isinstance(values, dict)
    return thread["thread_id"], str(values["messages"][-1]["content"])


async def thread_ids(url: str) -> set[str]:
    client = get_client(url=url, timeout=30)
    return {thread["thread_id"] for thread in await client.threads.search(limit=100)}


def test_two_stacks_run_side_by_side_each_with_its_own_services(tmp_path: Path) -> None:
    with (
        running(tmp_path / "one", free_port()) as one,
        running(tmp_path / "two", free_port()) as two,
    ):
        assert one.grpc_addresses() and two.grpc_addresses()
        assert not one.grpc_addresses() & two.grpc_addresses(), (
            one.grpc_addresses(),
            two.grpc_addresses(),
        )

        async def both() -> None:
            (first, answer_one), (second, answer_two) = await asyncio.gather(
                run_once(one.url, "from project one"), run_once(two.url, "from project two")
            )
            assert "from project one" in answer_one
            assert "from project two" in answer_two
            assert await thread_ids(one.url) == {first}
            assert await thread_ids(two.url) == {second}

        asyncio.run(both())
        assert ctrl_c(one) == 0
        assert ctrl_c(two) == 0


def test_a_busy_http_port_is_one_line_at_once(tmp_path: Path) -> None:
    port = free_port()
    with running(tmp_path / "one", port) as one:
        code, output, seconds = busy_refusal(tmp_path / "two", port)
        assert code == PORT_IN_USE_EXIT_CODE, output
        lines = output.strip().splitlines()
        assert len(lines) == 1, output
        assert f"127.0.0.1:{port}" in lines[0] and "WAYBILL_HTTP_PORT" in lines[0]
        assert "Traceback" not in output
        assert seconds < BUSY_PORT_SECONDS, seconds
        print(f"busy HTTP port refused in {seconds:.2f} s")
        asyncio.run(run_once(one.url, "still mine"))  # the first stack is untouched


def test_grpc_ports_held_by_another_stack_are_refused(tmp_path: Path) -> None:
    base = free_port()
    with running(tmp_path / "one", free_port(), WAYBILL_GRPC_BASE_PORT=str(base)) as one:
        assert f"127.0.0.1:{base}" in one.grpc_addresses()
        code, output, _ = busy_refusal(
            tmp_path / "two", free_port(), WAYBILL_GRPC_BASE_PORT=str(base)
        )
        assert code == PORT_IN_USE_EXIT_CODE, output
        # Whichever service lost its port first says so, naming the port and its setting.
        said = re.search(r"127\.0\.0\.1:(\d+) is already in use: choose another with (\w+)", output)
        assert said, output
        port, setting = int(said.group(1)), said.group(2)
        services = ["ADMISSION", "RUNNER", "JOURNAL", "DELIVERY"]
        assert setting == f"WAYBILL_{services[port - base]}_ADDR", output
        assert "Traceback" not in output
        asyncio.run(run_once(one.url, "still mine"))


async def test_a_grpc_server_never_shares_its_port() -> None:
    first = new_server()
    address = f"127.0.0.1:{free_port()}"
    bind(first, "journal", address, None)
    await first.start()
    try:
        second = new_server()
        with pytest.raises(PortInUse, match="WAYBILL_JOURNAL_ADDR"):
            bind(second, "journal", address, None)
        # And without our check first, gRPC itself refuses: SO_REUSEPORT is off.
        with pytest.raises(RuntimeError):
            second.add_insecure_port(address)
    finally:
        await first.stop(0)
