"""How a service's failures reach its callers: a client mistake keeps its code and
message; anything unexpected is INTERNAL with a plain message, never gRPC's
"Unexpected <class …>" with the exception and its server paths."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.stacks import free_port
from waybill.common.errors import invalid
from waybill.common.grpc_server import translate_errors
from waybill.services.runner.frames import RunnerFailure, as_reported

DEAD_PEER = f"127.0.0.1:{free_port()}"  # nobody listens there


async def call_a_peer_that_is_down() -> bytes:
    async with grpc.aio.insecure_channel(DEAD_PEER) as channel:
        reply: bytes = await channel.unary_unary("/test.Peer/Call")(b"", timeout=2)
        return reply


class Failing:
    @translate_errors
    async def Refuse(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise invalid("thread_id must be a UUID")

    @translate_errors
    async def Crash(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise RuntimeError("/srv/waybill/secret.py exploded")

    @translate_errors
    async def CallDeadPeer(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        return await call_a_peer_that_is_down()

    @translate_errors
    async def CrashMidStream(self, request: bytes, context: Any) -> AsyncIterator[bytes]:  # noqa: N802
        yield b"first"
        raise KeyError("checkpoint_ns")


@pytest.fixture
async def failing_server() -> AsyncIterator[grpc.aio.Channel]:
    servicer = Failing()
    handlers = {
        "Refuse": grpc.unary_unary_rpc_method_handler(servicer.Refuse),
        "Crash": grpc.unary_unary_rpc_method_handler(servicer.Crash),
        "CrashMidStream": grpc.unary_stream_rpc_method_handler(servicer.CrashMidStream),
        "CallDeadPeer": grpc.unary_unary_rpc_method_handler(servicer.CallDeadPeer),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("test.Failing", handlers)]
    )
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    async with grpc.aio.insecure_channel(address) as channel:
        yield channel
    await server.stop(None)


async def test_a_client_mistake_keeps_its_code_and_message(
    failing_server: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await failing_server.unary_unary("/test.Failing/Refuse")(b"")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "thread_id must be a UUID"


async def test_an_unexpected_failure_is_internal_and_names_no_class_or_path(
    failing_server: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await failing_server.unary_unary("/test.Failing/Crash")(b"")
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    details = raised.value.details() or ""
    assert "failed on the server" in details
    for leak in ("RuntimeError", "/srv/", "class", "exploded"):
        assert leak not in details

    stream = failing_server.unary_stream("/test.Failing/CrashMidStream")(b"")
    assert await stream.read() == b"first"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.read()
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert "KeyError" not in (raised.value.details() or "")


async def test_a_peer_down_is_unavailable_without_its_address_or_grpcs_text(
    failing_server: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await failing_server.unary_unary("/test.Failing/CallDeadPeer")(b"")
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    details = raised.value.details() or ""
    assert details == "A Waybill service this request needs is not reachable; retry shortly."
    for leak in (DEAD_PEER, "ipv4", "failed to connect"):
        assert leak not in details


async def test_a_run_failed_by_waybill_itself_reports_no_class_or_details() -> None:
    """A run's stream and receipt show a graph's own error as LangGraph Platform
    does, but Waybill's own failure (here a real one: a peer down) in plain words."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call_a_peer_that_is_down()
    reported = as_reported(raised.value)
    assert isinstance(reported, RunnerFailure)
    for leak in (DEAD_PEER, "AioRpcError", "StatusCode", "debug_error_string"):
        assert leak not in str(reported)
    graphs_own = ValueError("the factory needs a model name")
    assert as_reported(graphs_own) is graphs_own
