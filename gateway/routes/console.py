"""The console: the static web app under `/console` (gateway/console/).

Plain files, no build step: ES modules and one vendored library. The page holds
no data of its own; it calls the public API like any client, with the key the
user types in, so the files themselves are served without a key. Every answer
carries a strict Content-Security-Policy (scripts, styles and calls from this
origin only, no inline script, no eval).
"""

from __future__ import annotations

import os
from os import PathLike
from pathlib import Path

from fastapi import FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
PREFIX = "/console"

# Named here rather than guessed from the host's mime.types: a module script
# served with the wrong type is refused by the browser.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (ETag): an upgraded gateway serves its own console.
    "Cache-Control": "no-cache",
}


class ConsoleFiles(StaticFiles):
    """StaticFiles (safe paths, ETag, HEAD) with our content types and headers."""

    def file_response(
        self,
        full_path: str | PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        media_type = CONTENT_TYPES.get(Path(full_path).suffix)
        if media_type:
            response.headers["content-type"] = media_type
        response.headers.update(SECURITY_HEADERS)
        return response

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if response.status_code == 404:  # the 404 page too: no sniffing, no framing
            response.headers.update(SECURITY_HEADERS)
        return response


def install(app: FastAPI) -> None:
    """Serve the console at /console/ (`/console` redirects there)."""
    app.mount(PREFIX, ConsoleFiles(directory=CONSOLE_DIR, html=True), name="console")
