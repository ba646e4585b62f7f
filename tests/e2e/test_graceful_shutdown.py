"""Graceful shutdown, with real processes and real signals: a stopping gateway
ends its open SSE streams (after WAYBILL_STREAM_DRAIN_SECONDS) and clients resume
them with Last-Event-ID; a stopping journal stores what it accepted. (A stopping
runner handing its runs back: tests/e2e/test_drain_and_timeout.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import parse_sse, says
from tests.support.stacks import (
    aio_service_channel,
    running_stack,
    stack_env,
    start_second_gateway,
    wait_until,
)
from waybill.common.launch import grpc_serving
from waybill.v1 import journal_pb2, journal_pb2_grpc

pytestmark = pytest.mark.timeout(150)

LONG_TOOL = '/tool wait {"seconds": 6}'
# The SDK resumes only a run still going when it looks again, after the gateway's
# restart: on a loaded machine a restart took 7 s, so the run outlasts it widely.
SDK_TOOL_SECONDS = 20


def contiguous(frames: list[dict[str, str]]) -> list[int]:
    ids = [int(frame["id"]) for frame in frames]
    assert ids == list(range(len(ids))), ids
    return ids


async def test_a_stopping_gateway_ends_its_streams_and_they_resume_elsewhere(
    tmp_path: Path,
) -> None:
    env = stack_env(tmp_path, WAYBILL_STREAM_DRAIN_SECONDS="0.5")
    with running_stack(env, tmp_path) as stack:
        leaving_url = start_second_gateway(stack)
        leaving = stack.processes["gateway-2"]
        body = {"assistant_id": "lead_agent", "input": says(LONG_TOOL), "stream_mode": ["values"]}
        async with (
            httpx.AsyncClient(base_url=leaving_url, timeout=60) as doomed,
            httpx.AsyncClient(base_url=stack.url, timeout=60) as staying,
        ):
            thread_id = (await staying.post("/threads", json={})).json()["thread_id"]
            buffer = ""
            async with doomed.stream(
                "POST", f"/threads/{thread_id}/runs/stream", json=body
            ) as response:
                location = response.headers["location"]
                async for chunk in response.aiter_text():
                    buffer += chunk
                    if "tool_calls" in buffer and leaving.poll() is None:
                        leaving.send_signal(signal.SIGTERM)  # mid-run, the tool is waiting
            before = parse_sse(buffer)
            run_path = location.removesuffix("/stream")
            # The stream ended because the gateway stopped, not because the run did.
            assert (await staying.get(run_path)).json()["status"] == "running"
            assert await asyncio.to_thread(leaving.wait, 30) == 0

            rest = parse_sse(
                (await staying.get(location, headers={"Last-Event-ID": before[-1]["id"]})).text
            )
        frames = before + rest
        contiguous(frames)
        assert frames[0]["event"] == "metadata" and len(rest) > 0
        final = json.loads(frames[-1]["data"])
        assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]


async def test_the_sdk_resumes_its_stream_across_a_gateway_restart(tmp_path: Path) -> None:
    env = stack_env(tmp_path, WAYBILL_STREAM_DRAIN_SECONDS="0.5")
    with running_stack(env, tmp_path) as stack:
        client = get_client(url=stack.url, timeout=60)
        thread = await client.threads.create()
        parts = []
        gateway: subprocess.Popen[bytes] | None = None  # the one restarted
        tool = '/tool wait {"seconds": ' + str(SDK_TOOL_SECONDS) + "}"
        async for part in client.runs.stream(
            thread["thread_id"], "lead_agent", input=says(tool), stream_mode="updates"
        ):
            parts.append(part)
            if part.event == "updates" and "agent" in part.data and gateway is None:
                gateway = stack.processes["gateway"]  # the model's turn: the tool is waiting
                gateway.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(gateway.wait, 30) == 0
                stack.start_one("gateway")  # the same address: the SDK reconnects to it
                [run] = await client.runs.list(thread["thread_id"])
                assert run["status"] == "running", "the restart outlasted the run's tool"
        ids = [int(part.id) for part in parts if part.id is not None]
        assert ids == list(range(len(parts))), ids  # every event once, in order
        assert gateway is not None and stack.processes["gateway"] is not gateway
        final = [p for p in parts if p.event == "updates" and "agent" in p.data][-1]
        answer = f"Tool wait returned: waited {SDK_TOOL_SECONDS} s"
        assert final.data["agent"]["messages"][-1]["content"] == answer
        runs = await client.runs.list(thread["thread_id"])
        assert [run["status"] for run in runs] == ["success"]
        await client.aclose()


async def test_a_stopping_journal_stores_what_it_accepted(tmp_path: Path) -> None:
    """Events appended before SIGTERM, and events a runner's open AppendStream
    still sends during the shutdown grace, are all in the log after a restart."""
    env = stack_env(tmp_path, WAYBILL_SHUTDOWN_GRACE_SECONDS="10")
    with running_stack(env, tmp_path) as stack:
        address = stack.address_of("journal")
        stopping = stack.processes["journal"]
        run_id = str(uuid.uuid4())

        def batch(n: int) -> journal_pb2.AppendRequest:
            event = journal_pb2.RunEvent(event="custom", data=b'{"n": %d}' % n)
            return journal_pb2.AppendRequest(run_id=run_id, epoch=1, events=[event])

        async with aio_service_channel(address) as channel:
            journal = journal_pb2_grpc.JournalStub(channel)
            for n in range(20):  # no Flush: the events wait in the write-behind
                await journal.Append(batch(n))
            stream = journal.AppendStream()
            await stream.write(batch(20))
            assert (await stream.read()).last_seq == 20
            stopping.send_signal(signal.SIGTERM)
            wait_until(lambda: not grpc_serving(address), "the journal draining")
            # Well into the grace: a journal that flushed at SIGTERM and only then
            # let its server drain would be done flushing by now, and lose these.
            await asyncio.sleep(1.0)
            for n in range(21, 30):  # during the grace, on the stream already open
                await stream.write(batch(n))
                reply = await stream.read()
                assert (reply.error, reply.last_seq) == ("", n)
            await stream.done_writing()
        assert await asyncio.to_thread(stopping.wait, 30) == 0

        stack.start_one("journal")
        wait_until(lambda: grpc_serving(address), "the journal serving again")
        got: list[journal_pb2.RunEvent] = []
        async with aio_service_channel(address) as channel:
            call = journal_pb2_grpc.JournalStub(channel).Subscribe(
                journal_pb2.SubscribeRequest(run_id=run_id, from_seq=0)
            )
            # A lost event would never come: stop following after a while and compare.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    async for item in call:
                        got.extend(item.events)
                        if len(got) >= 30:
                            break
            call.cancel()
        assert [e.data for e in got] == [b'{"n": %d}' % n for n in range(30)]
