"""Local fakes of the chat platforms' HTTP APIs, recording every call.

One server plays Telegram's Bot API (`/tg/bot<token>/<method>`, with
`getUpdates` long polling fed by `push_update`), Slack's Web API
(`/slack/<method>`, bearer token checked) and a webhook receiver (`/hook`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_api import Answer, LoopbackApi


@dataclass
class Call:
    service: str  # telegram | slack | hook
    method: str  # sendMessage, chat.update, reply, ...
    body: dict[str, Any]
    headers: dict[str, str]
    raw: bytes


@dataclass
class FakePlatforms(LoopbackApi):
    telegram_token: str
    slack_token: str
    send_delay: float = 0.3  # sendMessage / postMessage answer after this (lets edits pile up)
    calls: list[Call] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)
    next_id: int = 100
    # What this fake always spoke (LoopbackApi's own default is HTTP/1.1, any method).
    protocol = "HTTP/1.0"
    methods = ("POST",)

    def push_update(self, update: dict[str, Any]) -> None:
        with self.lock:
            self.updates.append(update)
            self.lock.notify_all()

    def _record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)
            self.lock.notify_all()

    def _message_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    def handle(self, method: str, path: str, raw: bytes, headers: dict[str, str]) -> Answer:
        status, answer = self._answer(path, raw, headers)
        return status, answer, {}

    def _answer(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        body = json.loads(raw) if raw else {}
        headers = {k.lower(): v for k, v in headers.items()}
        if path.startswith("/tg/"):
            token, _, method = path[len("/tg/") :].partition("/")
            if token != f"bot{self.telegram_token}":
                return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            if method == "getUpdates":
                return 200, {"ok": True, "result": self._updates(body)}
            self._record(Call("telegram", method, body, headers, raw))
            if method == "sendMessage":
                time.sleep(self.send_delay)
                return 200, {"ok": True, "result": {"message_id": self._message_id()}}
            return 200, {"ok": True, "result": True}
        if path.startswith("/slack/"):
            if headers.get("authorization") != f"Bearer {self.slack_token}":
                return 200, {"ok": False, "error": "invalid_auth"}
            method = path[len("/slack/") :]
            self._record(Call("slack", method, body, headers, raw))
            if method == "chat.postMessage":
                time.sleep(self.send_delay)
                return 200, {"ok": True, "ts": f"1700000000.{self._message_id():06d}"}
            return 200, {"ok": True, "ts": body.get("ts")}
        if path == "/hook":
            self._record(Call("hook", "reply", body, headers, raw))
            return 200, {"ok": True}
        return 404, {"ok": False}

    def _updates(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(body.get("offset") or 0)
        deadline = time.monotonic() + min(float(body.get("timeout") or 0), 2.0)
        with self.lock:
            while True:
                found = [u for u in self.updates if u["update_id"] >= offset]
                if found or time.monotonic() >= deadline:
                    return found
                self.lock.wait(timeout=max(0.01, deadline - time.monotonic()))

    def calls_to(self, service: str, chat: str | None = None) -> list[Call]:
        key = {"telegram": "chat_id", "slack": "channel", "hook": "chat_id"}[service]
        with self.lock:
            return [
                c
                for c in self.calls
                if c.service == service and (chat is None or str(c.body.get(key)) == chat)
            ]

    def wait_for(self, what: str, check: Any, seconds: float = 30.0) -> Any:
        deadline = time.monotonic() + seconds
        with self.lock:
            while True:
                found = check()
                if found:
                    return found
                if time.monotonic() > deadline:
                    raise AssertionError(f"gave up waiting for {what}; calls: {self.calls}")
                self.lock.wait(timeout=0.2)
