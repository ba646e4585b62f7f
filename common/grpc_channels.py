"""The one place a gRPC channel to a peer is opened, so that every channel agrees
with every server on the largest message (`WAYBILL_GRPC_MAX_MESSAGE_BYTES`) and
on transport security. A service holds its channels in one `PeerChannels`: one
channel per peer, the runner reads retried on another runner, all closed together
when it stops.

The gateway refuses a request body over `WAYBILL_MAX_REQUEST_BYTES` before any
service is called; the message limit sits well above it (a run's input is
copied into its state and its events), so what was admitted can always be read
back, cancelled and deleted.

Every channel sends the deployment's service token on every call
(common/service_token.py): a server refuses a call without it.

Transport: plaintext by default (the embedded default, on loopback). With
`WAYBILL_TLS_CA_FILE`, `WAYBILL_TLS_CERT_FILE` and `WAYBILL_TLS_KEY_FILE` set,
every service serves only TLS and asks each caller for a certificate signed by
that CA (mutual TLS), and every channel presents its own: a process that can
reach a port but holds no certificate gets nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from waybill.common.service_token import (
    BlockingTokenOnCalls,
    service_token,
    token_interceptors,
)
from waybill.common.settings import Settings, get_settings

Option = tuple[str, Any]


def message_options(
    max_message_bytes: int | None = None, settings: Settings | None = None
) -> list[Option]:
    """Both directions' size limits, for a channel or a server."""
    limit = max_message_bytes or (settings or get_settings()).grpc_max_message_bytes
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
    ]


def reconnect_options(settings: Settings | None = None) -> list[Option]:
    """How soon a channel dials a peer again after losing it. gRPC's own backoff
    grows to 120 s, so a run calling a peer that restarted would wait up to that
    long for the next attempt; capped at `WAYBILL_GRPC_RECONNECT_MAX_SECONDS`."""
    most_ms = int((settings or get_settings()).grpc_reconnect_max_seconds * 1000)
    first_ms = min(100, most_ms)
    return [
        ("grpc.initial_reconnect_backoff_ms", first_ms),
        ("grpc.max_reconnect_backoff_ms", most_ms),
        ("grpc.min_reconnect_backoff_ms", first_ms),
    ]


def _read(path: Path | None) -> bytes:
    assert path is not None
    return path.read_bytes()


def channel_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
    """This process's client certificate and the CA it trusts; None: plaintext."""
    if not settings.tls_enabled:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(settings.tls_ca_file),
        private_key=_read(settings.tls_key_file),
        certificate_chain=_read(settings.tls_cert_file),
    )


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """Serve TLS and require a client certificate from the CA; None: plaintext."""
    if not settings.tls_enabled:
        return None
    return grpc.ssl_server_credentials(
        [(_read(settings.tls_key_file), _read(settings.tls_cert_file))],
        root_certificates=_read(settings.tls_ca_file),
        require_client_auth=True,
    )


def open_channel(
    target: str,
    *,
    options: Sequence[Option] = (),
    interceptors: Sequence[Any] | None = None,
    settings: Settings | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to `target` (an address, or a list for round robin)."""
    settings = settings or get_settings()
    all_options = [*message_options(settings=settings), *reconnect_options(settings), *options]
    token = service_token(settings)
    if token is not None:
        interceptors = [*token_interceptors(token), *(interceptors or ())]
    credentials = channel_credentials(settings)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=all_options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target, credentials, options=all_options, interceptors=interceptors
    )


def round_robin(target: str, **kwargs: Any) -> grpc.aio.Channel:
    """A channel spreading calls over every address `target` lists (runner reads)."""
    options = [("grpc.lb_policy_name", "round_robin"), *kwargs.pop("options", ())]
    return open_channel(target, options=options, **kwargs)


# Graph-side reads any runner can answer: one refused because its runner just
# died (UNAVAILABLE) is tried again on another, instead of failing the request.
RUNNER_READS = (
    "GetThreadState",
    "GetThreadHistory",
    "GetGraph",
    "GetSchemas",
    "GetSubgraphs",
    "StoreGet",
    "StoreSearch",
    "StoreListNamespaces",
)


def read_retries(backoff_seconds: float) -> str:
    """gRPC service config: retry the runner reads on UNAVAILABLE, up to 4 tries."""
    policy = {
        "maxAttempts": 4,
        "initialBackoff": f"{backoff_seconds:.3f}s",
        "maxBackoff": f"{backoff_seconds * 8:.3f}s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    names = [{"service": "waybill.v1.Runner", "method": method} for method in RUNNER_READS]
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


class WaitForARunner(grpc.aio.UnaryUnaryClientInterceptor):
    """A runner read that finds no runner reachable waits for one, up to
    `WAYBILL_RUNNER_READ_WAIT_SECONDS` in all, and is asked again.

    gRPC's own retries (`read_retries`) go to another runner within a second; they
    fail when every runner the channel knows is down, though another is starting
    or has just started and the channel's reconnect backoff has not yet reached it
    (a rolling restart, a runner killed beside one that came up a moment ago)."""

    def __init__(self, wait_seconds: float, pause_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self.pause_seconds = pause_seconds
        self.channel: grpc.aio.Channel | None = None  # set once the channel exists

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.wait_seconds
        while True:
            call = await continuation(details, request)
            try:
                return await call
            except grpc.aio.AioRpcError as error:
                if not self._worth_waiting(error, details.method):
                    raise
                if not await self._a_runner_reached(give_up_at):
                    raise

    def _worth_waiting(self, error: grpc.aio.AioRpcError, method: str | bytes) -> bool:
        name = method.decode() if isinstance(method, bytes) else method
        return (
            self.channel is not None
            and error.code() == grpc.StatusCode.UNAVAILABLE
            and name.rsplit("/", 1)[-1] in RUNNER_READS
        )

    async def _a_runner_reached(self, give_up_at: float) -> bool:
        """Whether the channel reaches a runner before `give_up_at` (loop time), after
        a pause, so that a connection not yet seen to be dead is not asked in a loop."""
        loop = asyncio.get_running_loop()
        if loop.time() >= give_up_at or self.channel is None:
            return False
        await asyncio.sleep(min(self.pause_seconds, give_up_at - loop.time()))
        try:
            await asyncio.wait_for(self.channel.channel_ready(), give_up_at - loop.time())
        except TimeoutError:
            return False
        return True


def runner_reads(
    target: str | None = None,
    *,
    interceptors: Sequence[Any] | None = None,
    settings: Settings | None = None,
) -> grpc.aio.Channel:
    """A channel to every runner (`WAYBILL_RUNNER_READ_TARGET`, else the runner's
    address), round robin, its reads retried on another runner
    (`WAYBILL_RUNNER_READ_BACKOFF_SECONDS` apart, doubling) and, when none is
    reachable, waiting for one (`WaitForARunner`)."""
    settings = settings or get_settings()
    retries = read_retries(settings.runner_read_backoff_seconds)
    waiting = WaitForARunner(
        settings.runner_read_wait_seconds, settings.runner_read_backoff_seconds
    )
    channel = round_robin(
        target or settings.runner_read_target or settings.runner_addr,
        options=[("grpc.service_config", retries)],
        interceptors=[waiting, *(interceptors or ())],
        settings=settings,
    )
    waiting.channel = channel
    return channel


class PeerChannels:
    """The channels one process opens to its peers: one per peer, opened on first
    use, alike in limits, credentials and the process's `interceptors`, and closed
    together by `close` when the process stops."""

    def __init__(self, settings: Settings, interceptors: Sequence[Any] | None = None) -> None:
        self.settings = settings
        self.interceptors = interceptors
        self._by_address: dict[str, grpc.aio.Channel] = {}
        self._runner_reads: grpc.aio.Channel | None = None

    def admission(self) -> grpc.aio.Channel:
        return self._to(self.settings.admission_addr)

    def journal(self) -> grpc.aio.Channel:
        return self._to(self.settings.journal_addr)

    def delivery(self) -> grpc.aio.Channel:
        return self._to(self.settings.delivery_addr)

    def runner_reads(self) -> grpc.aio.Channel:
        """Any runner, round robin; a read refused by a runner that just died is
        tried on another."""
        if self._runner_reads is None:
            self._runner_reads = runner_reads(
                interceptors=self.interceptors, settings=self.settings
            )
        return self._runner_reads

    async def close(self) -> None:
        channels = list(self._by_address.values())
        if self._runner_reads is not None:
            channels.append(self._runner_reads)
        self._by_address, self._runner_reads = {}, None
        for channel in channels:
            await channel.close()

    def _to(self, address: str) -> grpc.aio.Channel:
        if address not in self._by_address:
            self._by_address[address] = open_channel(
                address, interceptors=self.interceptors, settings=self.settings
            )
        return self._by_address[address]


def blocking_channel(target: str, settings: Settings | None = None) -> grpc.Channel:
    """A synchronous channel (health checks from the launcher and `waybill doctor`);
    plaintext unless `settings` configure TLS, with the service token `settings` name."""
    credentials = None if settings is None else channel_credentials(settings)
    if credentials is None:
        channel = grpc.insecure_channel(target)
    else:
        channel = grpc.secure_channel(target, credentials)
    token = None if settings is None else service_token(settings)
    if token is None:
        return channel
    return grpc.intercept_channel(channel, BlockingTokenOnCalls(token))


def blocking_peer_channel(target: str, settings: Settings) -> grpc.Channel:
    """A synchronous channel to a peer, alike in limits, reconnects and credentials
    with the asyncio ones (the runner's lease keeper, on a thread of its own)."""
    options = [*message_options(settings=settings), *reconnect_options(settings)]
    credentials = channel_credentials(settings)
    if credentials is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        channel = grpc.secure_channel(target, credentials, options=options)
    token = service_token(settings)
    if token is None:
        return channel
    return grpc.intercept_channel(channel, BlockingTokenOnCalls(token))
