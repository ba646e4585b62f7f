"""The one place a gRPC channel to a peer is opened, so that every channel agrees
with every server on the largest message (`WAYBILL_GRPC_MAX_MESSAGE_BYTES`) and
on transport security.

The gateway refuses a request body over `WAYBILL_MAX_REQUEST_BYTES` before any
service is called; the message limit sits well above it (a run's input is
copied into its state and its events), so what was admitted can always be read
back, cancelled and deleted.

Transport: plaintext by default (the embedded default, on loopback). With
`WAYBILL_TLS_CA_FILE`, `WAYBILL_TLS_CERT_FILE` and `WAYBILL_TLS_KEY_FILE` set,
every service serves only TLS and asks each caller for a certificate signed by
that CA (mutual TLS), and every channel presents its own: a process that can
reach a port but holds no certificate gets nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from waybill.common.settings import Settings, get_settings

Option = tuple[str, Any]


def message_options(max_message_bytes: int | None = None) -> list[Option]:
    """Both directions' size limits, for a channel or a server."""
    limit = max_message_bytes or get_settings().grpc_max_message_bytes
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
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
) -> grpc.aio.Channel:
    """An asyncio channel to `target` (an address, or a list for round robin)."""
    settings = get_settings()
    all_options = [*message_options(), *options]
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


def blocking_channel(target: str, settings: Settings | None = None) -> grpc.Channel:
    """A synchronous channel (health checks from the launcher and `waybill doctor`);
    plaintext unless `settings` configure TLS."""
    credentials = None if settings is None else channel_credentials(settings)
    if credentials is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, credentials)
