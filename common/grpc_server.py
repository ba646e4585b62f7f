"""How every Waybill service runs: one gRPC server, the standard health service,
and a graceful stop on SIGTERM (health goes NOT_SERVING, then in-flight calls
get `shutdown_grace_seconds` to finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from waybill.common import logs, tracing
from waybill.common.errors import ServiceError
from waybill.common.extras import MISSING_EXTRA_EXIT_CODE, MissingExtra
from waybill.common.grpc_channels import message_options, server_credentials
from waybill.common.heap import freeze_startup_objects
from waybill.common.metrics import serve_metrics
from waybill.common.ports import (
    PORT_IN_USE_EXIT_CODE,
    PortInUse,
    address_free,
    address_setting,
)
from waybill.common.project import PROJECT_EXIT_CODE, ProjectError
from waybill.common.readiness import serve_health_port
from waybill.common.schema import SchemaMismatch
from waybill.common.service_token import (
    CREDENTIAL_EXIT_CODE,
    NoServiceCredential,
    ServiceTokenRequired,
    required_token,
    scaled,
)
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import database_unreachable
from waybill.common.work_counts import RpcCounts

log = logging.getLogger("waybill")

# The exit status of a service that refused to start on a schema it does not run on.
SCHEMA_EXIT_CODE = 3


# A peer this call needed could not be reached (not started yet, restarting, down):
# the caller hears UNAVAILABLE (HTTP 503, worth a retry), not an unexpected failure.
PEER_DOWN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

Behavior = Callable[..., Any]


class ErrorStatuses(grpc.aio.ServerInterceptor):
    """Every method of a server, unary or streaming, answers its failures alike: a
    `ServiceError` raised by domain code becomes the gRPC status it names, a peer
    that could not be reached becomes UNAVAILABLE, and anything else becomes
    INTERNAL with a plain message (the log keeps the traceback; no class name or
    server path reaches the client, as gRPC's own "Unexpected <class …>" would).

    `serve` installs it on every service's server."""

    def __init__(self) -> None:
        # Per method: the handler the server found and its translating twin, built
        # once (the server hands out the same handler for every call).
        self._translated: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:  # no such method: gRPC answers UNIMPLEMENTED itself
            return None
        method = handler_call_details.method
        known = self._translated.get(method)
        if known is None or known[0] is not handler:
            known = (handler, _translated_handler(handler, method))
            self._translated[method] = known
        return known[1]


# A handler's kind (request streaming, response streaming): which of its behaviors
# serves the calls, and how a handler of that kind is built.
HANDLER_KINDS: dict[tuple[bool, bool], tuple[str, Callable[..., grpc.RpcMethodHandler]]] = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


def _translated_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    field, build = HANDLER_KINDS[(handler.request_streaming, handler.response_streaming)]
    behavior = getattr(handler, field)
    return build(
        _translating(behavior, getattr(behavior, "__qualname__", method)),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _translating(behavior: Behavior, name: str) -> Behavior:
    """`behavior` answering its failures as `ErrorStatuses` says; a synchronous one
    (gRPC's UNIMPLEMENTED default of a method no servicer defines) as it is. The
    arguments end with the call's context."""
    if inspect.isasyncgenfunction(behavior):

        async def streaming(*args: Any) -> AsyncIterator[Any]:
            try:
                async with contextlib.aclosing(behavior(*args)) as items:
                    async for item in items:
                        yield item
            except Exception as error:
                await _abort_for(error, args[-1], name)
                raise

        return streaming

    if inspect.iscoroutinefunction(behavior):

        async def unary(*args: Any) -> Any:
            try:
                return await behavior(*args)
            except Exception as error:
                await _abort_for(error, args[-1], name)
                raise

        return unary

    return behavior


async def _abort_for(error: Exception, context: Any, method: str) -> None:
    """Abort the call with the status `error` stands for; returns only when the error
    should propagate as it is (the caller re-raises it)."""
    if isinstance(error, ServiceError):
        await context.abort(error.code, error.message, trailing_metadata=error.trailers)
    elif isinstance(error, grpc.aio.AbortError):
        return  # the handler aborted with a status of its own choosing already
    elif isinstance(error, grpc.aio.AioRpcError):
        await _abort_if_peer_down(context, error)
    elif database_unreachable(error):
        log.warning("%s: the database is not reachable: %s", method, error)
        await context.abort(
            grpc.StatusCode.UNAVAILABLE, "The database is not reachable; retry shortly."
        )
    else:
        await _abort_internal(context, method)


async def _abort_internal(context: Any, method: str) -> None:
    log.exception("%s failed", method)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"{method} failed on the server; its log has the details."
    )


async def _abort_if_peer_down(context: Any, error: grpc.aio.AioRpcError) -> None:
    if error.code() in PEER_DOWN:
        # The peer's details (its address, gRPC's own error text) go to the log only.
        log.warning("a peer could not be reached: %s", error.details())
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            "A Waybill service this request needs is not reachable; retry shortly.",
        )


# gRPC binds with SO_REUSEPORT by default: a second server on a port in use would
# start without an error and the kernel would split connections between the two
# (one stack's runs reaching another's services). Off, a busy port fails to bind.
EXCLUSIVE_PORT = ("grpc.so_reuseport", 0)


def new_server(service_token: str | None = None) -> grpc.aio.Server:
    """A service's gRPC server: the agreed message limits, an exclusive port,
    `ErrorStatuses`, and, given a `service_token`, the refusal of every call without it."""
    interceptors: list[grpc.aio.ServerInterceptor] = [ErrorStatuses()]
    if service_token is not None:
        interceptors.insert(0, ServiceTokenRequired(service_token))
    interceptors.insert(0, RpcCounts())
    return grpc.aio.server(options=[*message_options(), EXCLUSIVE_PORT], interceptors=interceptors)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def listen_address(address: str, settings: Settings) -> str:
    """Where a service listens: `address`, but on loopback alone in the embedded mode
    (every caller is on this machine; nothing else should reach the port)."""
    host, _, port = address.rpartition(":")
    if scaled(settings) or host in LOOPBACK_HOSTS:
        return address
    log.warning("embedded mode: listening on 127.0.0.1:%s, not on %s", port, host)
    return f"127.0.0.1:{port}"


def bind(server: grpc.aio.Server, service: str, address: str, credentials: Any) -> None:
    """Listen on `address` (TLS with `credentials`, else plaintext), or raise
    `PortInUse` naming the setting that moves it."""
    if not address_free(address):  # asked first: gRPC's own refusal is a C-core log line
        raise PortInUse(address, address_setting(service))
    try:
        if credentials is None:
            server.add_insecure_port(address)
        else:
            server.add_secure_port(address, credentials)  # and no plaintext port at all
    except RuntimeError as error:  # gRPC says only "Failed to bind to address …"
        raise PortInUse(address, address_setting(service)) from error


def configure_logging(service: str) -> None:
    """The first thing a service does: JSON logs, and traces when an OTLP endpoint
    is configured (the gRPC instrumentation must precede every channel and server)."""
    settings = get_settings()
    logs.configure_logging(service.lower(), settings.log_format, settings.log_level)
    tracing.start_tracing(service.lower())


async def serve(
    service: str,
    address: str,
    register: Callable[[grpc.aio.Server], None],
    *,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    grace_seconds: float = 10.0,
    on_serving: Callable[[health.aio.HealthServicer], Awaitable[None]] | None = None,
) -> None:
    """Run one service until SIGTERM/SIGINT, then stop it gracefully."""
    freeze_startup_objects()  # before the first await: no request's objects yet
    settings = get_settings()
    server = new_server(required_token(settings))
    register(server)
    serve_metrics(
        service, settings.metrics_host, getattr(settings, f"{service.lower()}_metrics_port")
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bind(server, service, listen_address(address, settings), server_credentials(settings))
    await server.start()
    health_port = getattr(settings, f"{service.lower()}_health_port")
    health_server = None
    if health_port is not None:
        health_address = f"{settings.health_host}:{health_port}"
        health_server = await serve_health_port(health_servicer, health_address)
        log.info("%s health on %s (plaintext)", service, health_address)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(f"waybill.v1.{service}", health_pb2.HealthCheckResponse.SERVING)
    if on_serving is not None:  # a service's own health statuses (the runner's work stream)
        await on_serving(health_servicer)
    log.info("%s serving on %s", service, address)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info("%s stopping (grace %.1fs)", service, grace_seconds)
    await health_servicer.enter_graceful_shutdown()
    if on_stop is not None:
        await on_stop()
    await server.stop(grace_seconds)
    if health_server is not None:
        await health_server.stop(0)
    log.info("%s stopped", service)


def run_service(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a service's `main` on uvloop: the same asyncio, with a faster event loop.
    A service whose schema is not this build's exits with status 3 and says why; one
    whose project (`WAYBILL_GRAPHS`) cannot be served, with status 4; a scaled one
    without a service credential (common/service_token.py), or one whose port is
    taken, with status 5."""
    try:
        required_token(get_settings())  # before anything else: refused without a credential
        uvloop.run(main())
    except SchemaMismatch as mismatch:
        log.error("refusing to start: %s", mismatch)
        sys.exit(SCHEMA_EXIT_CODE)
    except ProjectError as error:  # the langgraph.json (WAYBILL_GRAPHS) cannot be served
        log.error("refusing to start: %s", error)
        sys.exit(PROJECT_EXIT_CODE)
    except NoServiceCredential as error:
        log.error("refusing to start: %s", error)
        sys.exit(CREDENTIAL_EXIT_CODE)
    except MissingExtra as missing:  # a setting needs an optional part not installed
        log.error("refusing to start: %s", missing)
        sys.exit(MISSING_EXTRA_EXIT_CODE)
    except PortInUse as busy:  # another stack (or anything) listens there already
        log.error("refusing to start: %s", busy)
        sys.exit(PORT_IN_USE_EXIT_CODE)
