"""The gateway's HTTP API as the CLI uses it: one client, the API key from
WAYBILL_API_KEY, and an error a person can act on instead of a traceback."""

from __future__ import annotations

from typing import Any

import httpx


class CommandFailed(Exception):
    """A request the command cannot go on without; the message says why."""


class Gateway:
    def __init__(self, url: str, api_key: str | None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"x-api-key": api_key} if api_key else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            reply = self.http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise CommandFailed(unreachable(self.url, error)) from error
        check(reply)
        return reply.json() if reply.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)


def unreachable(url: str, error: Exception) -> str:
    return f"cannot reach the gateway at {url} ({error}); is it running? (`waybill up`)"


def check(reply: httpx.Response) -> None:
    """Raise `CommandFailed` with the gateway's own message for a refused request."""
    if reply.is_success:
        return
    try:
        body = reply.json()
        detail = body.get("detail") or body.get("message") or body
    except ValueError:
        detail = reply.text
    hint = ""
    if reply.status_code == 401:
        hint = " (set WAYBILL_API_KEY or pass --api-key)"
    raise CommandFailed(
        f"{reply.request.method} {reply.request.url.path}: {reply.status_code} {detail}{hint}"
    )
