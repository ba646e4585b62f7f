"""A process's channels to its peers (`PeerChannels`): one per peer, the runner reads
spread over every runner and retried on another when one just died, all closed
together. Real gRPC servers on loopback stand in for two runners."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.support.stacks import free_port
from waybill.common.errors import ServiceError
from waybill.common.grpc_channels import PeerChannels
from waybill.common.grpc_server import new_server
from waybill.common.settings import Settings
from waybill.v1 import runner_pb2, runner_pb2_grpc


class Runner(runner_pb2_grpc.RunnerServicer):
    """A runner that answers, or one that is going away (UNAVAILABLE to everything)."""

    def __init__(self, name: str, going_away: bool) -> None:
        self.name = name
        self.going_away = going_away
        self.calls = 0

    def _answer(self) -> runner_pb2.JsonReply:
        self.calls += 1
        if self.going_away:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"{self.name} is shutting down")
        return runner_pb2.JsonReply(json=f'"{self.name}"'.encode())

    async def GetSchemas(self, request: Any, context: Any) -> runner_pb2.JsonReply:  # noqa: N802
        return self._answer()

    async def DeleteThreadState(self, request: Any, context: Any) -> runner_pb2.JsonReply:  # noqa: N802
        return self._answer()


@pytest.fixture
async def two_runners() -> AsyncIterator[tuple[Runner, Runner, str]]:
    runners = (Runner("alive", going_away=False), Runner("dying", going_away=True))
    servers, addresses = [], []
    for runner in runners:
        server = new_server()
        runner_pb2_grpc.add_RunnerServicer_to_server(runner, server)
        address = f"127.0.0.1:{free_port()}"
        server.add_insecure_port(address)
        await server.start()
        servers.append(server)
        addresses.append(address)
    yield runners[0], runners[1], "ipv4:" + ",".join(addresses)
    for server in servers:
        await server.stop(None)


async def test_a_read_refused_by_a_dying_runner_is_answered_by_another(
    two_runners: tuple[Runner, Runner, str],
) -> None:
    alive, dying, target = two_runners
    peers = PeerChannels(Settings(runner_read_target=target, runner_read_backoff_seconds=0.01))
    runner = runner_pb2_grpc.RunnerStub(peers.runner_reads())
    try:
        for _ in range(8):
            reply = await runner.GetSchemas(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=5)
            assert reply.json == b'"alive"'
        assert alive.calls == 8
        assert dying.calls > 0, "round robin sent some reads to the dying runner"

        # A write is not retried: one that reached the dying runner fails.
        refused = 0
        for _ in range(8):
            try:
                await runner.DeleteThreadState(
                    runner_pb2.DeleteThreadStateRequest(thread_id="t"), timeout=5
                )
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                refused += 1
        assert 0 < refused < 8
    finally:
        await peers.close()


async def test_one_channel_per_peer_and_all_closed_together(
    two_runners: tuple[Runner, Runner, str],
) -> None:
    alive, _, target = two_runners
    peers = PeerChannels(Settings(journal_addr=target.split(",")[0].removeprefix("ipv4:")))
    assert peers.journal() is peers.journal()
    assert peers.admission() is not peers.journal()
    assert peers.runner_reads() is peers.runner_reads()

    # The journal's address is the live runner's here: the channel really connects.
    as_runner = runner_pb2_grpc.RunnerStub(peers.journal())
    reply = await as_runner.GetSchemas(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=5)
    assert reply.json == b'"alive"'

    opened = [peers.journal(), peers.admission(), peers.runner_reads()]
    # Stubs made before the close: gRPC's core aborts the process when a method is
    # registered on a closed channel, so only calls are tried after it.
    calls = [runner_pb2_grpc.RunnerStub(channel).GetSchemas for channel in opened]
    await peers.close()
    for call in calls:
        with pytest.raises(grpc.aio.UsageError):
            await call(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=5)
    assert peers.journal() not in opened, "a channel asked for after close is a new one"
    await peers.close()


async def test_a_read_waits_for_a_runner_that_started_while_the_only_one_it_knew_dies() -> None:
    """The channel met the second runner's address before it listened, so its
    reconnect backoff has grown; the first runner dies. gRPC's quick retries find
    nobody; the read waits until the channel reaches the second runner."""
    first, second = Runner("first", going_away=False), Runner("second", going_away=False)
    first_address, second_address = (f"127.0.0.1:{free_port()}" for _ in range(2))
    first_server = new_server()
    runner_pb2_grpc.add_RunnerServicer_to_server(first, first_server)
    first_server.add_insecure_port(first_address)
    await first_server.start()
    settings = Settings(
        runner_read_target=f"ipv4:{first_address},{second_address}",
        runner_read_backoff_seconds=0.01,
        runner_read_wait_seconds=10,
        grpc_reconnect_max_seconds=2,
    )
    peers = PeerChannels(settings)
    runner = runner_pb2_grpc.RunnerStub(peers.runner_reads())
    second_server = new_server()
    try:
        for _ in range(20):  # 3 s of reads: the second address refuses, backing off
            reply = await runner.GetSchemas(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=5)
            assert reply.json == b'"first"'
            await asyncio.sleep(0.15)
        runner_pb2_grpc.add_RunnerServicer_to_server(second, second_server)
        second_server.add_insecure_port(second_address)
        await second_server.start()
        await first_server.stop(None)

        reply = await runner.GetSchemas(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=15)
        assert reply.json == b'"second"'
    finally:
        await peers.close()
        await second_server.stop(None)
        await first_server.stop(None)


async def test_a_read_with_no_runner_at_all_fails_once_its_wait_is_spent() -> None:
    settings = Settings(
        runner_read_target=f"ipv4:127.0.0.1:{free_port()}",
        runner_read_backoff_seconds=0.01,
        runner_read_wait_seconds=0.5,
    )
    peers = PeerChannels(settings)
    runner = runner_pb2_grpc.RunnerStub(peers.runner_reads())
    started = asyncio.get_running_loop().time()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.GetSchemas(runner_pb2.GetSchemasRequest(graph_id="g"), timeout=15)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert asyncio.get_running_loop().time() - started < 5
    finally:
        await peers.close()
