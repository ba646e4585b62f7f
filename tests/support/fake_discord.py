"""Discord on loopback: the REST API (messages, interaction responses, gateway
URL, users/@me) and the gateway WebSocket with Hello, heartbeats and their
ACKs, Identify -> READY, and Resume, which replays the dispatches after the
sequence number the client names. `drop()` cuts the connection the way a
network does; what is pushed meanwhile waits in the session for the resume.
Interactions are signed with an Ed25519 key, as Discord signs them."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.asyncio.server import Server, ServerConnection, serve

from tests.support.fake_api import Answer, ApiCall, FakeApi

BOT_ID = "1100000000000000001"
APP_ID = "1200000000000000001"


@dataclass
class Session:
    session_id: str
    events: list[dict[str, Any]] = field(default_factory=list)  # dispatches, seq = index + 1


class FakeDiscord(FakeApi):
    def __init__(self, bot_token: str, heartbeat_ms: int = 400) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.heartbeat_ms = heartbeat_ms
        self.signing_key = Ed25519PrivateKey.generate()
        self.session: Session | None = None
        self.socket: ServerConnection | None = None
        self.identifies = 0
        self.resumes: list[tuple[str, int]] = []  # (session id, seq) of each Resume
        self.heartbeats = 0
        self.loop = asyncio.new_event_loop()
        self.ws_server: Server | None = None

    @property
    def public_key(self) -> str:
        return self.signing_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    @property
    def ws_url(self) -> str:
        assert self.ws_server is not None
        host, port = next(iter(self.ws_server.sockets)).getsockname()[:2]
        return f"ws://{host}:{port}"

    # ---- REST ----------------------------------------------------------------------

    def start(self) -> FakeDiscord:
        super().start()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def serving() -> Server:
            return await serve(self._connection, "127.0.0.1", 0)

        self.ws_server = self._run(serving())
        return self

    def stop(self) -> None:
        if self.ws_server is not None:
            self.ws_server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        super().stop()

    def rate_limited(self, call: ApiCall) -> Answer:
        body = {"message": "You are being rate limited.", "retry_after": 0.8, "global": False}
        return 429, body, {"Retry-After": "1", "X-RateLimit-Scope": "user"}

    def answer(self, call: ApiCall) -> Answer:
        if call.path.startswith("/webhooks/"):  # interaction responses: the token is the proof
            return 200, {"id": str(self.new_id()), "content": call.body.get("content")}, {}
        if call.headers.get("authorization") != f"Bot {self.bot_token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        if call.path == "/gateway/bot":
            return 200, {"url": self.ws_url, "shards": 1}, {}
        if call.path == "/users/@me":
            return 200, {"id": BOT_ID, "username": "waybill-bot", "bot": True}, {}
        if call.path.endswith("/messages") and call.method == "POST":
            time.sleep(0.2)
            return 200, {"id": str(self.new_id()), "content": call.body.get("content")}, {}
        if "/messages/" in call.path and call.method == "PATCH":
            return 200, {"id": call.path.rsplit("/", 1)[-1]}, {}
        return 404, {"message": "404: Not Found", "code": 0}, {}

    # ---- the gateway ---------------------------------------------------------------

    def _run(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    async def _connection(self, socket: ServerConnection) -> None:
        await socket.send(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}}))
        async for frame in socket:
            payload = json.loads(frame)
            op, data = payload.get("op"), payload.get("d")
            if op == 1:
                self.heartbeats += 1
                await socket.send(json.dumps({"op": 11}))
            elif op == 2:
                if data.get("token") != self.bot_token:
                    await socket.close(4004, "Authentication failed.")
                    return
                self.identifies += 1
                self.session = Session(uuid.uuid4().hex)
                self.socket = socket
                ready = {
                    "v": 10,
                    "session_id": self.session.session_id,
                    "resume_gateway_url": self.ws_url,
                    "user": {"id": BOT_ID, "username": "waybill-bot", "bot": True},
                    "guilds": [],
                }
                await self._dispatch("READY", ready)
            elif op == 6:
                if self.session is None or data.get("session_id") != self.session.session_id:
                    await socket.send(json.dumps({"op": 9, "d": False}))
                    continue
                self.resumes.append((data["session_id"], int(data.get("seq") or 0)))
                self.socket = socket
                for seq, event in enumerate(self.session.events, start=1):
                    if seq > int(data.get("seq") or 0):
                        await socket.send(json.dumps(event))
                await self._dispatch("RESUMED", {})

    async def _dispatch(self, kind: str, data: dict[str, Any]) -> None:
        assert self.session is not None
        event = {"op": 0, "t": kind, "s": len(self.session.events) + 1, "d": data}
        self.session.events.append(event)
        if self.socket is not None:
            try:
                await self.socket.send(json.dumps(event))
            except Exception:  # cut meanwhile: it waits for the resume
                self.socket = None

    async def _drop(self) -> None:
        if self.socket is not None:
            self.socket.transport.abort()  # no close frame: as a network drop
            self.socket = None

    # ---- for the tests -------------------------------------------------------------

    def ready(self) -> bool:
        return self.session is not None and self.socket is not None

    def push(self, data: dict[str, Any], kind: str = "MESSAGE_CREATE") -> int:
        """A dispatch in the session; returns its sequence number."""
        self._run(self._dispatch(kind, data))
        assert self.session is not None
        return len(self.session.events)

    def drop(self, then: list[dict[str, Any]] = ()) -> list[int]:  # type: ignore[assignment]
        """Cut the connection, then push `then` before the client can resume;
        returns their sequence numbers."""

        async def cut_then_push() -> list[int]:
            await self._drop()
            seqs = []
            for data in then:
                await self._dispatch("MESSAGE_CREATE", data)
                assert self.session is not None
                seqs.append(len(self.session.events))
            return seqs

        result: list[int] = self._run(cut_then_push())
        return result

    def sign(self, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = self.signing_key.sign(stamp.encode() + body).hex()
        return {
            "content-type": "application/json",
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": stamp,
        }

    def replies_to(self, message_id: str) -> list[ApiCall]:
        return [
            c
            for c in self.calls_to("/messages", "POST")
            if (c.body.get("message_reference") or {}).get("message_id") == message_id
            and not c.limited
        ]

    def shown(self, message_id: str) -> list[str]:
        """The answer to a message: its post, then each edit of it."""
        posts = self.replies_to(message_id)
        if not posts:
            return []
        channel = posts[0].path.split("/")[2]
        answered = [c for c in self.calls_to(f"/channels/{channel}/messages/", "PATCH")]
        return [str(posts[0].body["content"])] + [str(c.body["content"]) for c in answered]


def message_create(channel: str, text: str, guild: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": str(uuid.uuid4().int % 10**18),
        "channel_id": channel,
        "author": {"id": "1300000000000000001", "username": "ada", "bot": False},
        "content": f"<@{BOT_ID}> {text}" if guild else text,
        "timestamp": "2026-12-02T01:00:00.000000+00:00",
        "mentions": [{"id": BOT_ID}] if guild else [],
        "type": 0,
    }
    if guild:
        data["guild_id"] = "1400000000000000001"
    return data


def slash_command(channel: str, name: str, text: str | None = None) -> dict[str, Any]:
    """An APPLICATION_COMMAND interaction (`/ask text:...`) in a server."""
    data: dict[str, Any] = {"id": "1500000000000000001", "name": name, "type": 1}
    if text is not None:
        data["options"] = [{"name": "text", "type": 3, "value": text}]
    return {
        "id": str(uuid.uuid4().int % 10**18),
        "application_id": APP_ID,
        "type": 2,
        "token": f"interaction-{uuid.uuid4().hex}",
        "channel_id": channel,
        "guild_id": "1400000000000000001",
        "member": {"user": {"id": "1300000000000000001", "username": "ada"}},
        "data": data,
        "version": 1,
    }
