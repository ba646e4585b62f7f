"""The request size limit: a body over `WAYBILL_MAX_REQUEST_BYTES` is answered 413
before any route runs, so nothing of it is written anywhere.

A pure ASGI middleware (as Starlette's own are), so that the body is counted as
it arrives: a declared `Content-Length` over the limit is refused at once, a
chunked body as soon as it passes it. Uploads are exempt: the upload route
limits each file (`WAYBILL_UPLOAD_MAX_BYTES`) as it streams it.
"""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UPLOADS = re.compile(r"^/threads/[^/]+/uploads/?$")


def too_large_detail(max_bytes: int) -> str:
    return (
        f"the request body is over {max_bytes} bytes, the limit "
        "(WAYBILL_MAX_REQUEST_BYTES); send less, or upload files with /threads/{id}/uploads"
    )


class RequestTooLarge(HTTPException):
    """Raised while the body is read: the app's error handling answers it 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, too_large_detail(max_bytes))


class RequestSizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or UPLOADS.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.declared_length(scope) > self.max_bytes:
            await self.too_large()(scope, receive, send)
            return
        await self.app(scope, self.counted(receive), send)

    def declared_length(self, scope: Scope) -> int:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    def counted(self, receive: Receive) -> Receive:
        seen = 0

        async def receive_counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise RequestTooLarge(self.max_bytes)
            return message

        return receive_counted

    def too_large(self) -> JSONResponse:
        return JSONResponse({"detail": too_large_detail(self.max_bytes)}, status_code=413)
