"""A Matrix homeserver's client-server API on loopback: `/sync` long polling
with `since` tokens over one timeline of room events, sends with transaction
ids (a retried send is taken once), edits, whoami, joins. `drop_syncs(n)`
cuts the next n sync answers that carry events, as a network drop would."""

from __future__ import annotations

import time
import urllib.parse
import uuid
from typing import Any

from tests.support.fake_api import DROP, Answer, ApiCall, FakeApi

BOT = "@waybill:localhost"


class FakeMatrix(FakeApi):
    def __init__(self, access_token: str) -> None:
        super().__init__()
        self.access_token = access_token
        self.timeline: list[tuple[str, dict[str, Any]]] = []  # (room id, event); batch = index
        self.transactions: dict[str, str] = {}  # txn id -> event id
        self.drops = 0

    def rate_limited(self, call: ApiCall) -> Answer:
        return (
            429,
            {"errcode": "M_LIMIT_EXCEEDED", "error": "Too many requests", "retry_after_ms": 800},
            {},
        )

    def answer(self, call: ApiCall) -> Answer:
        if call.headers.get("authorization") != f"Bearer {self.access_token}":
            return 401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid access token"}, {}
        path = urllib.parse.unquote(call.path.removeprefix("/_matrix/client/v3"))
        if path == "/account/whoami":
            return 200, {"user_id": BOT, "device_id": "WAYBILL"}, {}
        if path == "/sync":
            return self._sync(call)
        if path.startswith("/rooms/") and "/send/m.room.message/" in path:
            room, txn = path.split("/")[2], path.rsplit("/", 1)[-1]
            with self.lock:
                new = txn not in self.transactions
                if new:
                    self.transactions[txn] = f"$ev{uuid.uuid4().hex}"
            if new:
                time.sleep(0.2)
                event = {
                    "type": "m.room.message",
                    "event_id": self.transactions[txn],
                    "sender": BOT,
                    "content": call.body,
                    "origin_server_ts": int(time.time() * 1000),
                }
                self._append(room, event)  # our own messages come back in the sync
            return 200, {"event_id": self.transactions[txn]}, {}
        if path.startswith("/join/"):
            return 200, {"room_id": path.split("/")[2]}, {}
        return 404, {"errcode": "M_UNRECOGNIZED", "error": "Unrecognized request"}, {}

    def _sync(self, call: ApiCall) -> Answer:
        since = call.query.get("since", "")
        start = int(since.removeprefix("s").split("_")[0]) if since else None
        deadline = time.monotonic() + min(int(call.query.get("timeout") or 0) / 1000, 2.0)
        with self.lock:
            while start is not None and len(self.timeline) <= start:
                if time.monotonic() >= deadline:
                    break
                self.lock.wait(timeout=max(0.01, deadline - time.monotonic()))
            end = len(self.timeline)
            events = self.timeline[start:end] if start is not None else []
            if events and self.drops > 0:
                self.drops -= 1
                return DROP, None, {}
        rooms: dict[str, Any] = {}
        for room, event in events:
            rooms.setdefault(room, {"timeline": {"events": [], "limited": False}})
            rooms[room]["timeline"]["events"].append(event)
        return 200, {"next_batch": f"s{end}_{uuid.uuid4().hex[:4]}", "rooms": {"join": rooms}}, {}

    def _append(self, room: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.timeline.append((room, event))
            self.lock.notify_all()

    # ---- for the tests -------------------------------------------------------------

    def say(self, room: str, text: str, sender: str = "@ada:localhost") -> str:
        """A user's message in a room; returns its event id."""
        event_id = f"$ev{uuid.uuid4().hex}"
        content = {"msgtype": "m.text", "body": text}
        self._append(
            room,
            {
                "type": "m.room.message",
                "event_id": event_id,
                "sender": sender,
                "content": content,
                "origin_server_ts": int(time.time() * 1000),
            },
        )
        return event_id

    def drop_syncs(self, times: int) -> None:
        with self.lock:
            self.drops = times

    def syncs(self) -> list[ApiCall]:
        return [c for c in self.calls_to("/sync", "GET") if not c.limited]

    def replies_to(self, event_id: str) -> list[dict[str, Any]]:
        """Our messages replying to `event_id` (each taken send once)."""
        with self.lock:
            return [
                e["content"]
                for _, e in self.timeline
                if e["sender"] == BOT
                and ((e["content"].get("m.relates_to") or {}).get("m.in_reply_to") or {}).get(
                    "event_id"
                )
                == event_id
            ]

    def shown(self, event_id: str) -> list[str]:
        """The reply to `event_id`, then each edit of it, as text."""
        with self.lock:
            posts = [
                e
                for _, e in self.timeline
                if e["sender"] == BOT
                and ((e["content"].get("m.relates_to") or {}).get("m.in_reply_to") or {}).get(
                    "event_id"
                )
                == event_id
            ]
            if not posts:
                return []
            reply = posts[0]["event_id"]
            edits = [
                e["content"]["m.new_content"]["body"]
                for _, e in self.timeline
                if (e["content"].get("m.relates_to") or {}).get("event_id") == reply
            ]
            return [posts[0]["content"]["body"]] + edits
