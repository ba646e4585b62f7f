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


class Failing:
    @translate_errors
    async def Refuse(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise invalid("thread_id must be a UUID")

    @translate_errors
    async def Crash(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise RuntimeError("/srv/waybill/secret.py exploded")

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
