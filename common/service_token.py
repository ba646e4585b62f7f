"""The services' own credential: who may call a Waybill gRPC service at all.

Reaching a service's port is not enough to be trusted by it. Every call carries
the deployment's service token (`waybill-service-token` metadata), which only
Waybill's own processes know, and every server refuses a call without it
(UNAUTHENTICATED); the standard health service alone answers anyone, for probes.
Where mutual TLS is configured (common/grpc_channels.py) and no token is, the
client certificate is the credential instead.

Where the token comes from: `WAYBILL_SERVICE_TOKEN`; else, in the embedded mode
(no `WAYBILL_DATABASE_URL` or `WAYBILL_REDIS_URL`), the file `<data dir>/service.token`
(0600), which the launcher makes before any service starts and hands to every
process it starts. A scaled deployment with neither a token nor mutual TLS refuses
to start (exit status 5): its ports would otherwise trust every process that can
reach them.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from waybill.common.settings import Settings

SERVICE_TOKEN_KEY = "waybill-service-token"
TOKEN_FILE = "service.token"
# The exit status of a service that refused to start without a credential.
CREDENTIAL_EXIT_CODE = 7
# Callers needing no credential: health probes (the launcher's, kubelet's).
OPEN_SERVICES = ("/grpc.health.v1.Health/",)


class NoServiceCredential(Exception):
    """A scaled deployment without a service token or mutual TLS."""


def scaled(settings: Settings) -> bool:
    """Whether services share Postgres or Redis: they may run on other machines."""
    return bool(settings.database_url or settings.redis_url)


def token_file(settings: Settings) -> Path:
    return settings.data_dir / TOKEN_FILE


def ensure_token_file(settings: Settings) -> str:
    """The embedded mode's token: read from the data directory, made there (0600)
    first if missing. Made under another name and linked into place, so a process
    reading it at the same time never sees it half-written."""
    path = token_file(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=".service.token.")
        try:
            with os.fdopen(descriptor, "w") as file:  # mkstemp makes it 0600
                file.write(secrets.token_urlsafe(32))
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the token
        finally:
            os.unlink(draft)
    return path.read_text().strip()


def service_token(settings: Settings) -> str | None:
    """The token this process sends: configured, else the embedded mode's file if
    it is there. A client never makes the file: the launcher (or a server) does."""
    if settings.service_token:
        return settings.service_token
    path = token_file(settings)
    if scaled(settings) or not path.exists():
        return None
    return path.read_text().strip()


def launcher_token(settings: Settings) -> str:
    """The token the launcher gives every process it starts: configured, else its
    data directory's (all its processes run on this machine)."""
    return settings.service_token or ensure_token_file(settings)


def required_token(settings: Settings) -> str | None:
    """What a server asks of every caller: the token, or None under mutual TLS (the
    client certificate is the credential). Embedded, a server started on its own
    makes the file if the launcher did not. Raises `NoServiceCredential` when a
    scaled deployment has neither."""
    if settings.service_token:
        return settings.service_token
    if settings.tls_enabled:
        return None
    if scaled(settings):
        raise NoServiceCredential(
            "a scaled deployment needs WAYBILL_SERVICE_TOKEN (the same in every service) "
            "or mutual TLS (WAYBILL_TLS_CA_FILE, WAYBILL_TLS_CERT_FILE, WAYBILL_TLS_KEY_FILE)"
        )
    return ensure_token_file(settings)


# ---- the server's side --------------------------------------------------------------

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class ServiceTokenRequired(grpc.aio.ServerInterceptor):
    """Refuses every call that does not present `token` (UNAUTHENTICATED), but for
    the health service's."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_SERVICES):
            return handler
        if self._presented(handler_call_details.invocation_metadata or ()):
            return handler
        return _refusing(handler)

    def _presented(self, metadata: Any) -> bool:
        given = next((v for k, v in metadata if k == SERVICE_TOKEN_KEY), None)
        if not isinstance(given, str):
            return False
        return hmac.compare_digest(given.encode(), self._token)  # no timing tells how close


async def _refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "This service needs its service token.")


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that refuses the call."""
    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    build = kinds[(handler.request_streaming, handler.response_streaming)]
    return build(
        _refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


# ---- the client's side --------------------------------------------------------------


class _TokenOnCalls:
    """Every call of an asyncio channel carries the service token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = [*(details.metadata or ()), (SERVICE_TOKEN_KEY, self.token)]
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnaryToken(_TokenOnCalls, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _UnaryStreamToken(_TokenOnCalls, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _StreamUnaryToken(_TokenOnCalls, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._details(details), requests)


class _StreamStreamToken(_TokenOnCalls, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._details(details), requests)


def token_interceptors(token: str) -> list[Any]:
    """An asyncio channel's interceptors putting `token` on every call: one per kind
    of call (a channel files an interceptor under the first kind it implements)."""
    kinds = (_UnaryUnaryToken, _UnaryStreamToken, _StreamUnaryToken, _StreamStreamToken)
    return [kind(token) for kind in kinds]


class BlockingTokenOnCalls(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The same for a synchronous channel (the launcher, `waybill doctor`)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _details(self, details: Any) -> Any:
        return _BlockingDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), (SERVICE_TOKEN_KEY, self.token)],
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


class _BlockingDetails(grpc.ClientCallDetails):
    def __init__(
        self,
        method: str,
        timeout: float | None,
        metadata: Any,
        credentials: Any,
        wait_for_ready: bool | None,
        compression: Any,
    ) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression
