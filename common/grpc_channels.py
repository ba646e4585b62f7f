"""The one place a gRPC channel to a peer is opened, so that every channel agrees
with every server on the largest message (`WAYBILL_GRPC_MAX_MESSAGE_BYTES`).

The gateway refuses a request body over `WAYBILL_MAX_REQUEST_BYTES` before any
service is called; the message limit sits well above it (a run's input is
copied into its state and its events), so what was admitted can always be read
back, cancelled and deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from waybill.common.settings import get_settings

Option = tuple[str, Any]


def message_options(max_message_bytes: int | None = None) -> list[Option]:
    """Both directions' size limits, for a channel or a server."""
    limit = max_message_bytes or get_settings().grpc_max_message_bytes
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
    ]


def open_channel(
    target: str,
    *,
    options: Sequence[Option] = (),
    interceptors: Sequence[Any] | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to `target` (an address, or a list for round robin)."""
    return grpc.aio.insecure_channel(
        target, options=[*message_options(), *options], interceptors=interceptors
    )


def round_robin(target: str, **kwargs: Any) -> grpc.aio.Channel:
    """A channel spreading calls over every address `target` lists (runner reads)."""
    options = [("grpc.lb_policy_name", "round_robin"), *kwargs.pop("options", ())]
    return open_channel(target, options=options, **kwargs)
