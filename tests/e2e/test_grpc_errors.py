"""How a service's failures reach its callers: a client mistake keeps its code and
message; a peer that could not be reached is UNAVAILABLE; anything unexpected is
INTERNAL with a plain message, never gRPC's "Unexpected <class …>" with the
exception and its server paths. One interceptor (`ErrorStatuses`, on every server
`new_server` builds) does it for every method, unary or streaming."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.support.stacks import free_port
from waybill.common.errors import invalid
from waybill.common.grpc_server import new_server
from waybill.services.runner.reporting.frames import RunnerFailure, as_reported
from waybill.v1 import journal_pb2, journal_pb2_grpc

SERVICE = "test.Failing"


DEAD_PEER = f"127.0.0.1:{free_port()}"  # nobody listens there


async def _unreachable_peer() -> None:
    """A real call to a port nothing listens on: the peer is down."""
    async with grpc.aio.insecure_channel(DEAD_PEER) as channel:
        await channel.unary_unary("/test.Nobody/Call")(b"", timeout=2)


class Failing:
    async def Refuse(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise invalid("thread_id must be a UUID")

    async def Crash(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        raise RuntimeError("/srv/waybill/secret.py exploded")

    async def AskPeer(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        await _unreachable_peer()
        return b"never"

    async def Deny(self, request: bytes, context: Any) -> bytes:  # noqa: N802
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not yours")
        return b"never"

    async def CrashMidStream(self, request: bytes, context: Any) -> AsyncIterator[bytes]:  # noqa: N802
        yield b"first"
        raise KeyError("checkpoint_ns")

    async def RefuseMidStream(self, request: bytes, context: Any) -> AsyncIterator[bytes]:  # noqa: N802
        yield b"first"
        raise invalid("from_seq is past the end")

    async def CrashReadingStream(self, requests: AsyncIterator[bytes], context: Any) -> bytes:  # noqa: N802
        async for _ in requests:
            raise RuntimeError("/srv/waybill/secret.py exploded")
        return b"never"

    async def RefuseInBothStreams(  # noqa: N802
        self, requests: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            if request == b"bad":
                raise invalid("a bad batch")
            yield request


UNARY = ("Refuse", "Crash", "AskPeer", "Deny")
UNARY_STREAM = ("CrashMidStream", "RefuseMidStream")


def _handlers(servicer: Failing) -> dict[str, grpc.RpcMethodHandler]:
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name)) for name in UNARY
    }
    for name in UNARY_STREAM:
        handlers[name] = grpc.unary_stream_rpc_method_handler(getattr(servicer, name))
    handlers["CrashReadingStream"] = grpc.stream_unary_rpc_method_handler(
        servicer.CrashReadingStream
    )
    handlers["RefuseInBothStreams"] = grpc.stream_stream_rpc_method_handler(
        servicer.RefuseInBothStreams
    )
    return handlers


@pytest.fixture
async def failing_server() -> AsyncIterator[grpc.aio.Channel]:
    server = new_server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, _handlers(Failing()))]
    )
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    async with grpc.aio.insecure_channel(address) as channel:
        yield channel
    await server.stop(None)


async def _refusal(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


def _assert_plain_internal(error: grpc.aio.AioRpcError, method: str) -> None:
    assert error.code() == grpc.StatusCode.INTERNAL
    details = error.details() or ""
    assert details == f"{method} failed on the server; its log has the details."
    for leak in ("RuntimeError", "KeyError", "/srv/", "class", "exploded"):
        assert leak not in details


async def test_a_client_mistake_keeps_its_code_and_message(
    failing_server: grpc.aio.Channel,
) -> None:
    error = await _refusal(failing_server.unary_unary(f"/{SERVICE}/Refuse")(b""))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "thread_id must be a UUID"

    stream = failing_server.unary_stream(f"/{SERVICE}/RefuseMidStream")(b"")
    assert await stream.read() == b"first"
    error = await _refusal(stream.read())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "from_seq is past the end"

    both = failing_server.stream_stream(f"/{SERVICE}/RefuseInBothStreams")()
    await both.write(b"good")
    assert await both.read() == b"good"
    await both.write(b"bad")
    error = await _refusal(both.read())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "a bad batch"


async def test_an_unexpected_failure_is_internal_logged_and_names_no_class_or_path(
    failing_server: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="waybill"):
        error = await _refusal(failing_server.unary_unary(f"/{SERVICE}/Crash")(b""))
    _assert_plain_internal(error, "Failing.Crash")
    logged = [r for r in caplog.records if r.getMessage() == "Failing.Crash failed"]
    assert len(logged) == 1, "logged once"
    assert logged[0].exc_info is not None and "exploded" in str(logged[0].exc_info[1])

    stream = failing_server.unary_stream(f"/{SERVICE}/CrashMidStream")(b"")
    assert await stream.read() == b"first"
    _assert_plain_internal(await _refusal(stream.read()), "Failing.CrashMidStream")

    async def one_request() -> AsyncIterator[bytes]:
        yield b"x"

    reading = failing_server.stream_unary(f"/{SERVICE}/CrashReadingStream")(one_request())
    _assert_plain_internal(await _refusal(reading), "Failing.CrashReadingStream")


async def test_a_peer_out_of_reach_is_unavailable(failing_server: grpc.aio.Channel) -> None:
    error = await _refusal(failing_server.unary_unary(f"/{SERVICE}/AskPeer")(b""))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    details = error.details() or ""
    assert details == "A Waybill service this request needs is not reachable; retry shortly."
    for leak in ("127.0.0.1", "ipv4", "failed to connect"):
        assert leak not in details


async def test_a_status_the_method_chose_itself_passes_through(
    failing_server: grpc.aio.Channel,
) -> None:
    error = await _refusal(failing_server.unary_unary(f"/{SERVICE}/Deny")(b""))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "not yours"


class HalfAJournal(journal_pb2_grpc.JournalServicer):
    """A generated servicer base, registered as the services register theirs."""

    async def Subscribe(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield journal_pb2.SubscribeItem(end=False)
        raise RuntimeError("/srv/waybill/secret.py exploded")

    async def Forget(self, request: Any, context: Any) -> Any:  # noqa: N802
        raise invalid(f"run_ids: '{request.run_ids[0]}' is not a UUID.")


async def test_a_service_registered_as_generated_is_covered_and_unimplemented_stays_so() -> None:
    server = new_server()
    journal_pb2_grpc.add_JournalServicer_to_server(HalfAJournal(), server)
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            journal = journal_pb2_grpc.JournalStub(channel)
            error = await _refusal(journal.Forget(journal_pb2.ForgetRequest(run_ids=["x"])))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details() == "run_ids: 'x' is not a UUID."

            stream = journal.Subscribe(journal_pb2.SubscribeRequest(run_id="r"))
            assert (await stream.read()).end is False
            _assert_plain_internal(await _refusal(stream.read()), "HalfAJournal.Subscribe")

            # A method no servicer defines: gRPC's own UNIMPLEMENTED, as before.
            error = await _refusal(journal.Flush(journal_pb2.FlushRequest(run_id="r")))
            assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)


async def test_a_run_failed_by_waybill_itself_reports_no_class_or_details() -> None:
    """A run's stream and receipt show a graph's own error as LangGraph Platform
    does, but Waybill's own failure (here a real one: a peer down) in plain words."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _unreachable_peer()
    reported = as_reported(raised.value)
    assert isinstance(reported, RunnerFailure)
    for leak in (DEAD_PEER, "AioRpcError", "StatusCode", "debug_error_string"):
        assert leak not in str(reported)
    graphs_own = ValueError("the factory needs a model name")
    assert as_reported(graphs_own) is graphs_own
