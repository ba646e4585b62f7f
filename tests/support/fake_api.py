"""A chat platform's HTTP API on loopback, for one fake per platform to build on:
it records every call, answers through the subclass's `answer`, and can refuse
the next calls to a path for their rate the way the platform does (`limit`)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Answer = tuple[int, Any, dict[str, str]]  # status, JSON body (or bytes), headers
DROP = 0  # as the status: close the connection without an answer


@dataclass
class ApiCall:
    method: str  # GET, POST, PUT, PATCH
    path: str
    query: dict[str, str]
    body: Any  # the JSON body, else {}
    headers: dict[str, str]
    raw: bytes
    at: float = field(default_factory=time.monotonic)
    limited: bool = False  # refused for its rate


class LoopbackApi:
    """The server part: JSON over HTTP on a loopback port, each request answered by
    `handle`. Also tests/support/fake_platforms.py's, which keeps HTTP/1.0 and POST only."""

    server: ThreadingHTTPServer | None = None
    protocol = "HTTP/1.1"
    methods: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE")

    def handle(self, method: str, target: str, raw: bytes, headers: dict[str, str]) -> Answer:
        raise NotImplementedError

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = fake.protocol

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, body, headers = fake.handle(
                    self.command, self.path, raw, dict(self.headers.items())
                )
                if status == DROP:  # the connection cut before any answer
                    self.close_connection = True
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                # The caller may have stopped waiting (a poll cut short at shutdown).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        for method in self.methods:  # any other is answered 501, as BaseHTTPRequestHandler does
            setattr(Handler, f"do_{method}", Handler._serve)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class FakeApi(LoopbackApi):
    def __init__(self) -> None:
        self.calls: list[ApiCall] = []
        self.lock = threading.Condition()
        self.limits: dict[str, int] = {}  # path fragment -> calls still to refuse
        self.next_id = 1000

    # ---- what a platform fake says -------------------------------------------------

    def answer(self, call: ApiCall) -> Answer:
        raise NotImplementedError

    def rate_limited(self, call: ApiCall) -> Answer:
        return 429, {"error": "rate limited"}, {"Retry-After": "1"}

    # ---- the server ----------------------------------------------------------------

    def handle(self, method: str, target: str, raw: bytes, headers: dict[str, str]) -> Answer:
        parts = urllib.parse.urlsplit(target)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        call = ApiCall(
            method,
            parts.path,
            dict(urllib.parse.parse_qsl(parts.query)),
            body,
            {k.lower(): v for k, v in headers.items()},
            raw,
        )
        with self.lock:
            self.calls.append(call)
            self.lock.notify_all()
            limited = next((f for f, n in self.limits.items() if n > 0 and f in call.path), None)
            if limited is not None:
                self.limits[limited] -= 1
                call.limited = True
        return self.rate_limited(call) if limited is not None else self.answer(call)

    # ---- for the tests -------------------------------------------------------------

    def limit(self, path_fragment: str, times: int) -> None:
        """Refuse the next `times` calls whose path has this fragment, for their rate."""
        with self.lock:
            self.limits[path_fragment] = times

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    def calls_to(self, path_fragment: str, method: str | None = None) -> list[ApiCall]:
        with self.lock:
            return [
                c
                for c in self.calls
                if path_fragment in c.path and (method is None or c.method == method)
            ]

    def wait_for(self, what: str, check: Any, seconds: float = 30.0) -> Any:
        deadline = time.monotonic() + seconds
        with self.lock:
            while True:
                found = check()
                if found:
                    return found
                if time.monotonic() > deadline:
                    raise AssertionError(f"gave up waiting for {what}; calls: {self.calls[-20:]}")
                self.lock.wait(timeout=0.2)
