"""A NUL character (`%00`) in a request's path or query string is answered 422
before any route runs: PostgreSQL refuses NUL in text, so a thread id, a search
term or a filter holding one used to reach the database and come back a 5xx.
(A body's NUL is refused by the request models: schemas.Envelope.)
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


def nul_in_request_line(scope: Scope) -> str | None:
    """Which part of the request line holds a NUL (path or query string); None if none."""
    if "\x00" in scope.get("path", ""):
        return "the path"
    if b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
        return "the query string"
    return None


class RefuseNulCharacters:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        where = nul_in_request_line(scope) if scope["type"] == "http" else None
        if where is None:
            await self.app(scope, receive, send)
            return
        detail = (
            f"{where} holds a NUL character (%00), which Waybill's storage "
            "(PostgreSQL's text) cannot keep"
        )
        await JSONResponse({"detail": detail}, status_code=422)(scope, receive, send)
