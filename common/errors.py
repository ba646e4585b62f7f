"""One table from gRPC status codes to HTTP status codes.

Services report client mistakes with the codes on the left; the gateway answers
with the code on the right and the service's message as `detail`. A client
mistake never becomes a 5xx.
"""

from __future__ import annotations

import grpc

GRPC_TO_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,  # a field is malformed
    grpc.StatusCode.FAILED_PRECONDITION: 400,  # well-formed but not allowed now/here
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,  # lost a race: thread busy, stale write
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def http_status_for(code: grpc.StatusCode, details: str = "") -> int:
    # gRPC reports a message over its size limit as RESOURCE_EXHAUSTED too; that is
    # no reason to retry (429), the request is too large.
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        return 413
    return GRPC_TO_HTTP.get(code, 500)


# Messages echo what the client sent; gRPC carries them in a header, which a long
# echo (a 10,000-character schedule) would push past the peer's header limit.
MAX_MESSAGE_CHARS = 1000


def capped(message: str) -> str:
    """The head and the tail (where the advice usually is) of a long message."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = (MAX_MESSAGE_CHARS - 40) // 2
    cut = len(message) - 2 * keep
    return f"{message[:keep]} …[{cut} characters]… {message[-keep:]}"


class ServiceError(Exception):
    """Raised by domain code; servicers turn it into a gRPC status."""

    def __init__(
        self, code: grpc.StatusCode, message: str, trailers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        message = capped(message)
        super().__init__(message)
        self.code = code
        self.message = message
        # gRPC trailing metadata for a caller that reads more than the message
        # (a quota refusal's limit, use and wait: `QUOTA_TRAILER`).
        self.trailers = trailers


def not_found(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.NOT_FOUND, message)


def invalid(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, message)


def conflict(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.ALREADY_EXISTS, message)


def refused(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, message)


def busy(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.ABORTED, message)


def forbidden(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.PERMISSION_DENIED, message)


# The trailing metadata key of a quota refusal: JSON (ASCII) with `limit`, `value`,
# `use` and `retry_after` (seconds, or null where no wait helps).
QUOTA_TRAILER = "waybill-quota"


def over_quota(message: str, refusal_json: str) -> ServiceError:
    """A creation over a quota: RESOURCE_EXHAUSTED (429), the refusal in a trailer."""
    return ServiceError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, message, ((QUOTA_TRAILER, refusal_json),)
    )
