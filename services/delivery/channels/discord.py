"""Discord: messages from the gateway (a WebSocket held by one replica), slash
commands as signed interactions over HTTP; answers posted then edited in place.

The gateway: Hello (op 10) gives the heartbeat interval; we Identify (op 2), or
Resume (op 6) with the session id and the last sequence number taken, and
Discord replays what we missed. The position kept in the lease row is that
session, sequence and resume URL, written after each message is taken, so a
dropped connection (or a new leader) resumes without losing or repeating one.
A heartbeat left unacknowledged means a dead connection: it is dropped and resumed.

An interaction is authentic when `X-Signature-Ed25519` is the app's Ed25519
signature of `X-Signature-Timestamp + body`; it is answered "deferred" (type 5)
and the answer edits that response (`/webhooks/<app>/<token>/messages/@original`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import httpx
import websockets
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from websockets.asyncio.client import ClientConnection, connect

from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    Deliver,
    Delivery,
    InboundMessage,
    PlatformCallFailed,
    cut,
    fresh,
    json_body,
    unauthenticated,
)

MAX_TEXT = 2000
# GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
INTENTS = (1 << 9) | (1 << 12) | (1 << 15)
FATAL_CLOSES = {4004: "authentication failed", 4010: "invalid shard", 4011: "sharding required"}
FATAL_CLOSES |= {4012: "invalid API version", 4013: "invalid intents", 4014: "disallowed intents"}
PING, COMMAND = 1, 2  # interaction types
PONG, DEFERRED = 1, 5  # interaction response types


class Reconnect(Exception):
    """The gateway asked us to reconnect (op 7, op 9) or stopped acknowledging."""


class DiscordAdapter(ChannelAdapter):
    platform = "discord"
    default_api_base = "https://discord.com/api/v10"
    required = ("bot_token",)
    max_text = MAX_TEXT

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.bot_id = ""

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bot {self.spec.bot_token}"}

    # ---- interactions (HTTP) -------------------------------------------------

    def verify(self, delivery: Delivery) -> None:
        if not self.spec.public_key:
            raise unauthenticated(f"Channel {self.spec.name} has no public_key for interactions.")
        timestamp = delivery.headers.get("x-signature-timestamp", "")
        if not timestamp.isdigit():
            raise unauthenticated("X-Signature-Timestamp is missing.")
        fresh(int(timestamp), self.settings.channel_max_skew_seconds, "X-Signature-Timestamp")
        try:
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(self.spec.public_key))
            signature = bytes.fromhex(delivery.headers.get("x-signature-ed25519", ""))
            key.verify(signature, timestamp.encode() + delivery.body)
        except (ValueError, InvalidSignature):
            raise unauthenticated("X-Signature-Ed25519 does not match the body.") from None

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        found = json_body(delivery.body)
        if found.get("type") == PING:
            return Acknowledge({"type": PONG})
        data = found.get("data") or {}
        if found.get("type") != COMMAND or not found.get("id") or not found.get("token"):
            return Acknowledge({"type": DEFERRED})
        options = [o for o in data.get("options") or [] if isinstance(o.get("value"), str)]
        text = options[0]["value"] if options else f"/{data.get('name', '')}"
        user = (found.get("member") or {}).get("user") or found.get("user") or {}
        chat = str(found.get("channel_id", ""))
        return InboundMessage(
            event_id=str(found["id"]),
            conversation=chat,
            chat=chat,
            user=str(user.get("id", "")),
            text=text.strip(),
            extra={"interaction": str(found["token"]), "application": str(found["application_id"])},
        )

    def received(self, message: InboundMessage) -> Acknowledge:
        return Acknowledge({"type": DEFERRED})  # "thinking…", edited by the answer

    # ---- the gateway ---------------------------------------------------------

    def listens(self) -> bool:
        return True

    async def listen(self, position: str, deliver: Deliver) -> None:
        state = json.loads(position) if position else {}
        self.bot_id = str(state.get("bot_id") or self.bot_id)  # a resume sends no READY
        url = state.get("resume_url") if state.get("session_id") else None
        if not url:
            url = str((await self._api("GET", "/gateway/bot", "gateway/bot"))["url"])
        try:
            async with connect(f"{url}/?v=10&encoding=json", max_size=2**24) as socket:
                await self._session(socket, state, deliver)
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else 1006
            if code in FATAL_CLOSES:
                raise PlatformCallFailed(f"discord gateway: {FATAL_CLOSES[code]}") from None
            raise PlatformCallFailed(f"discord gateway: connection closed ({code})") from None
        except (OSError, websockets.InvalidHandshake) as error:
            raise PlatformCallFailed(f"discord gateway: {type(error).__name__}") from None
        except Reconnect as why:
            raise PlatformCallFailed(f"discord gateway: {why}") from None

    async def _session(
        self, socket: ClientConnection, state: dict[str, Any], deliver: Deliver
    ) -> None:
        hello = json.loads(await socket.recv())
        if hello.get("op") != 10:
            raise Reconnect("no Hello")
        seq: list[int | None] = [state.get("seq")]
        acked = asyncio.Event()
        acked.set()
        beating = asyncio.create_task(
            self._heartbeat(socket, hello["d"]["heartbeat_interval"] / 1000, seq, acked)
        )
        try:
            if state.get("session_id"):
                resume = {"token": self.spec.bot_token, "session_id": state["session_id"]}
                await socket.send(json.dumps({"op": 6, "d": {**resume, "seq": seq[0]}}))
            else:
                await socket.send(json.dumps({"op": 2, "d": self._identity()}))
            async for frame in socket:
                payload = json.loads(frame)
                if not await self._on(payload, state, seq, acked, socket, deliver):
                    return
                if beating.done():
                    beating.result()  # raises Reconnect: no acknowledgement came
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError, Reconnect):
                await beating

    def _identity(self) -> dict[str, Any]:
        return {
            "token": self.spec.bot_token,
            "intents": INTENTS,
            "properties": {"os": "linux", "browser": "waybill", "device": "waybill"},
        }

    async def _heartbeat(
        self, socket: ClientConnection, interval: float, seq: list[int | None], acked: asyncio.Event
    ) -> None:
        while True:
            await asyncio.sleep(interval)
            if not acked.is_set():
                await socket.close(4000)  # a zombie connection: resume on a new one
                raise Reconnect("heartbeat not acknowledged")
            acked.clear()
            await socket.send(json.dumps({"op": 1, "d": seq[0]}))

    async def _on(
        self,
        payload: dict[str, Any],
        state: dict[str, Any],
        seq: list[int | None],
        acked: asyncio.Event,
        socket: ClientConnection,
        deliver: Deliver,
    ) -> bool:
        """One gateway frame; False when the lease is lost."""
        op = payload.get("op")
        if op == 11:
            acked.set()
        elif op == 1:  # the gateway wants a heartbeat now
            await socket.send(json.dumps({"op": 1, "d": seq[0]}))
        elif op == 7:
            raise Reconnect("asked to reconnect")
        elif op == 9:  # invalid session: resumable or not, says d
            if not payload.get("d"):
                state.clear()
                await deliver(None, "")
            raise Reconnect("invalid session")
        elif op == 0:
            seq[0] = payload.get("s") or seq[0]
            return await self._dispatch(
                payload.get("t"), payload.get("d") or {}, state, seq, deliver
            )
        return True

    async def _dispatch(
        self,
        kind: str | None,
        data: dict[str, Any],
        state: dict[str, Any],
        seq: list[int | None],
        deliver: Deliver,
    ) -> bool:
        if kind == "READY":
            self.bot_id = str((data.get("user") or {}).get("id", ""))
            state.update(
                session_id=data.get("session_id"), resume_url=data.get("resume_gateway_url")
            )
        elif kind == "RESUMED":
            return True
        elif kind != "MESSAGE_CREATE":
            return True  # the sequence moves on in memory; nothing to keep for it
        state.update(seq=seq[0], bot_id=self.bot_id)
        return await deliver(self._message_of(data), json.dumps(state))

    def _message_of(self, data: dict[str, Any]) -> InboundMessage | None:
        author = data.get("author") or {}
        text = str(data.get("content") or "")
        if author.get("bot") or not text.strip() or not data.get("id"):
            return None
        if data.get("guild_id"):  # in a server, only what mentions the bot
            mention = re.compile(rf"<@!?{re.escape(self.bot_id)}>")
            if not self.bot_id or not mention.search(text):
                return None
            text = mention.sub("", text)
        chat = str(data.get("channel_id", ""))
        return InboundMessage(
            event_id=str(data["id"]),
            conversation=chat,
            chat=chat,
            user=str(author.get("id", "")),
            text=text.strip(),
            reply_to=str(data["id"]),
        )

    # ---- outbound ------------------------------------------------------------

    async def _api(self, method: str, path: str, what: str, **kwargs: Any) -> dict[str, Any]:
        return await self._call(
            f"{self.base_url}{path}", what, method=method, headers=self._auth, **kwargs
        )

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        if response.status_code == 429:  # {"retry_after": seconds, "global": bool}
            return float(answer.get("retry_after") or response.headers.get("retry-after") or 1)
        return None

    async def post(self, message: InboundMessage, text: str) -> str:
        if "interaction" in message.extra:
            await self.edit(message, "@original", text)
            return "@original"
        payload: dict[str, Any] = {
            "content": cut(text, MAX_TEXT),
            "allowed_mentions": {"parse": []},  # an answer pings nobody
        }
        if message.reply_to:
            payload["message_reference"] = {"message_id": message.reply_to}
        answer = await self._api("POST", f"/channels/{message.chat}/messages", "post", json=payload)
        return str(answer.get("id", ""))

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        payload = {"content": cut(text, MAX_TEXT)}
        if "interaction" in message.extra:
            path = f"/webhooks/{message.extra['application']}/{message.extra['interaction']}"
            await self._call(
                f"{self.base_url}{path}/messages/@original",
                "edit response",
                method="PATCH",
                json=payload,
            )
            return
        await self._api(
            "PATCH", f"/channels/{message.chat}/messages/{handle}", "edit", json=payload
        )

    async def check(self) -> str:
        answer = await self._call(
            f"{self.base_url}/users/@me", "users/@me", method="GET", attempts=1, headers=self._auth
        )
        return f"bot {answer.get('username', '?')}"
