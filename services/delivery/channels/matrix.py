"""Matrix (client-server API): a `/sync` long-poll loop held by one replica;
answers sent into the room as a reply, then edited in place (`m.replace`).

The position kept in the lease row is the sync's `next_batch` token, written
once a batch's messages are taken, so a dropped sync, a restart or a new
leader goes on from the last batch taken: nothing lost, and a batch fetched
again is taken once (event ids are the dedupe key). The first sync of a
channel only learns where "now" is: the rooms' history starts no runs.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any

import httpx

from waybill.services.delivery.channels.adapter import (
    ChannelAdapter,
    Deliver,
    InboundMessage,
    cut,
)

MAX_TEXT = 16000
# Only messages in the rooms' timelines; no presence, no account data.
SYNC_FILTER = json.dumps(
    {
        "room": {"timeline": {"types": ["m.room.message"], "limit": 50}},
        "presence": {"types": []},
        "account_data": {"types": []},
    }
)


def _room(room_id: str) -> str:
    return urllib.parse.quote(room_id, safe="")


class MatrixAdapter(ChannelAdapter):
    platform = "matrix"
    required = ("access_token", "api_base")  # api_base: the homeserver's URL
    max_text = MAX_TEXT

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.me = self.spec.user_id or ""

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.spec.access_token}"}

    async def _api(self, method: str, path: str, what: str, **kwargs: Any) -> dict[str, Any]:
        return await self._call(
            f"{self.base_url}/_matrix/client/v3{path}",
            what,
            method=method,
            headers=self._auth,
            **kwargs,
        )

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        if response.status_code == 429 or answer.get("errcode") == "M_LIMIT_EXCEEDED":
            if answer.get("retry_after_ms"):
                return float(answer["retry_after_ms"]) / 1000
            return super().retry_after(response, answer) or 1.0
        return None

    # ---- the sync loop ---------------------------------------------------------

    def listens(self) -> bool:
        return True

    async def listen(self, position: str, deliver: Deliver) -> None:
        if not self.me:
            self.me = str((await self._api("GET", "/account/whoami", "whoami"))["user_id"])
        since = position
        if not since:  # where "now" is; earlier messages start nothing
            since = str((await self._sync("", 0))["next_batch"])
            if not await deliver(None, since):
                return
        wait = min(self.settings.channel_poll_seconds, self.settings.channel_leader_seconds / 2)
        while True:
            batch = await self._sync(since, wait)
            rooms = batch.get("rooms") or {}
            for room_id in rooms.get("invite") or {}:
                await self._api("POST", f"/join/{_room(room_id)}", "join", json={})
            for room_id, room in (rooms.get("join") or {}).items():
                for event in (room.get("timeline") or {}).get("events") or []:
                    message = self._message_of(room_id, event)
                    if message is not None and not await deliver(message, since):
                        return
            since = str(batch.get("next_batch") or since)
            if not await deliver(None, since):
                return

    async def _sync(self, since: str, wait: float) -> dict[str, Any]:
        params = {"timeout": str(int(wait * 1000)), "filter": SYNC_FILTER}
        if since:
            params["since"] = since
        return await self._api("GET", "/sync", "sync", params=params, timeout=wait + 10)

    def _message_of(self, room_id: str, event: dict[str, Any]) -> InboundMessage | None:
        content = event.get("content") or {}
        relation = content.get("m.relates_to") or {}
        if (
            event.get("type") != "m.room.message"
            or event.get("sender") == self.me
            or content.get("msgtype") != "m.text"
            or relation.get("rel_type") == "m.replace"  # an edit, not a new message
            or not str(content.get("body") or "").strip()
            or not event.get("event_id")
        ):
            return None
        thread = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
        per_thread = self.spec.threads == "conversation" and thread
        return InboundMessage(
            event_id=str(event["event_id"]),
            conversation=f"{room_id}:{thread}" if per_thread else room_id,
            chat=room_id,
            user=str(event.get("sender", "")),
            text=str(content["body"]).strip(),
            reply_to=str(event["event_id"]),
            extra={"thread": str(thread)} if thread else {},
        )

    # ---- outbound ------------------------------------------------------------

    async def _send(self, room_id: str, content: dict[str, Any], what: str) -> str:
        # One transaction id per message, kept across retries: the homeserver
        # takes a retried send once.
        path = f"/rooms/{_room(room_id)}/send/m.room.message/{uuid.uuid4().hex}"
        return str((await self._api("PUT", path, what, json=content)).get("event_id", ""))

    async def post(self, message: InboundMessage, text: str) -> str:
        relation: dict[str, Any] = {"m.in_reply_to": {"event_id": message.reply_to}}
        if "thread" in message.extra:
            relation |= {"rel_type": "m.thread", "event_id": message.extra["thread"]}
        content = {"msgtype": "m.text", "body": cut(text, MAX_TEXT), "m.relates_to": relation}
        return await self._send(message.chat, content, "send")

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        body = cut(text, MAX_TEXT)
        content = {
            "msgtype": "m.text",
            "body": f"* {body}",  # what clients without edits show
            "m.new_content": {"msgtype": "m.text", "body": body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": handle},
        }
        await self._send(message.chat, content, "edit")

    async def check(self) -> str:
        answer = await self._call(
            f"{self.base_url}/_matrix/client/v3/account/whoami",
            "whoami",
            method="GET",
            attempts=1,
            headers=self._auth,
        )
        return f"user {answer.get('user_id', '?')}"
