"""Request fields every admission RPC module checks the same way (a 422 naming the field)."""

from __future__ import annotations

from typing import Any

import grpc

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.identity import auth_filter


def json_object(data: bytes, field: str) -> dict[str, Any]:
    value = codec.loads(data, {})
    if not isinstance(value, dict):
        raise invalid(f"{field} must be a JSON object.")
    return value


def page(limit: int, offset: int) -> tuple[int, int]:
    limit = limit or 10
    if not 1 <= limit <= 1000:
        raise invalid("limit must be between 1 and 1000.")
    if offset < 0:
        raise invalid("offset must not be negative.")
    return limit, offset


def checked_thread_id(value: str) -> str:
    if not codec.is_uuid(value):
        raise invalid(f"thread_id '{value}' is not a UUID.")
    return value


def one_of(value: str, field: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise invalid(f"{field} must be one of {', '.join(allowed)} (got '{value}').")
    return value


def threads_filter(context: grpc.aio.ServicerContext) -> dict[str, Any] | None:
    """The project's auth filter on threads (runs are seen through their thread)."""
    return auth_filter(context, "threads")
