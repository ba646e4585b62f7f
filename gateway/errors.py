"""The gateway's answers to malformed requests: FastAPI's 422 made safe to write
as JSON, and a 422 for values that JSON in Waybill cannot carry."""

from __future__ import annotations

import math
from typing import Any

from fastapi import HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


async def validation_error(_request: Request, error: Exception) -> JSONResponse:
    """The usual `{"detail": [...]}`; an echoed input such as 1e999 (infinity),
    which JSON cannot carry, is shown as text instead of failing with a 500."""
    assert isinstance(error, RequestValidationError)
    detail = _json_safe(jsonable_encoder(error.errors()))
    return JSONResponse(status_code=422, content={"detail": detail})


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


async def unencodable_value(_request: Request, error: Exception) -> JSONResponse:
    """A value the services' JSON cannot carry (an integer beyond 64 bits, nesting
    deeper than 254 levels): refused before anything is written."""
    return JSONResponse(
        status_code=422,
        content={"detail": f"a value in the request cannot be stored as JSON: {error}"},
    )


class QuotaRefused(HTTPException):
    """429 over a quota: `Retry-After` when waiting helps, and a body naming the
    limit, its value and the use found (`quota_refused` writes it)."""

    def __init__(self, message: str, refusal: dict[str, Any]) -> None:
        wait = refusal.get("retry_after")
        headers = {"Retry-After": str(math.ceil(wait))} if wait is not None else None
        super().__init__(429, message, headers)
        self.refusal = refusal


async def quota_refused(_request: Request, error: Exception) -> JSONResponse:
    """`{"detail", "limit", "value", "use", "retry_after"}` with its headers."""
    assert isinstance(error, QuotaRefused)
    return JSONResponse(
        status_code=429, content={"detail": error.detail, **error.refusal}, headers=error.headers
    )
