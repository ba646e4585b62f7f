"""The gateway's answers to malformed requests: FastAPI's 422 made safe to write
as JSON, and a 422 for values that JSON in Waybill cannot carry."""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
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
