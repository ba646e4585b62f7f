"""Telegram (Bot API): webhook deliveries or long polling (`getUpdates`), answers
streamed with `sendMessage` then `editMessageText`.

A webhook delivery is authentic when it carries the secret token the webhook
was registered with (`X-Telegram-Bot-Api-Secret-Token`).
"""

from __future__ import annotations

from typing import Any

import httpx

from waybill.common.errors import refused
from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    Deliver,
    Delivery,
    InboundMessage,
    PlatformCallFailed,
    cut,
    equal_secrets,
    json_body,
    unauthenticated,
)
from waybill.services.delivery.channels.config import ChannelSpec

SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_TEXT = 4096  # Telegram's limit for one message


def _fitted(text: str) -> str:
    return cut(text, MAX_TEXT)


class TelegramAdapter(ChannelAdapter):
    platform = "telegram"
    default_api_base = "https://api.telegram.org"
    required = ("bot_token",)

    @classmethod
    def needs(cls, spec: ChannelSpec) -> tuple[str, ...]:
        return cls.required + (("secret_token",) if spec.mode == "webhook" else ())

    def _method(self, name: str) -> str:
        return f"{self.base_url}/bot{self.spec.bot_token}/{name}"

    def verify(self, delivery: Delivery) -> None:
        if self.spec.mode != "webhook":
            raise refused(f"Channel {self.spec.name} uses long polling, not a webhook.")
        if not equal_secrets(delivery.headers.get(SECRET_HEADER), self.spec.secret_token):
            raise unauthenticated(f"{SECRET_HEADER} is missing or wrong.")

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        return self.message_of(json_body(delivery.body))

    def listens(self) -> bool:
        return self.spec.mode == "polling"

    async def listen(self, position: str, deliver: Deliver) -> None:
        """Long polling; the position is the next `getUpdates` offset. A poll
        waits at most half the lease, so the lease is renewed in time."""
        offset = int(position or 0)
        wait = min(self.settings.channel_poll_seconds, self.settings.channel_leader_seconds / 2)
        while True:
            for update in sorted(await self.updates(offset, wait), key=_update_id):
                parsed = self.message_of(update)
                offset = max(offset, _update_id(update) + 1)
                message = parsed if isinstance(parsed, InboundMessage) else None
                if not await deliver(message, str(offset)):
                    return

    async def check(self) -> str:
        answer = await self._call(self._method("getMe"), "getMe", attempts=1)
        if not answer.get("ok"):
            raise PlatformCallFailed("telegram getMe: not ok")
        return f"bot @{(answer.get('result') or {}).get('username', '?')}"

    def message_of(self, update: dict[str, Any]) -> InboundMessage | Acknowledge:
        message = update.get("message")
        if not isinstance(message, dict) or "update_id" not in update:
            return Acknowledge()  # edits, callbacks, channel posts: nothing to run
        sender = message.get("from") or {}
        text = message.get("text")
        if not isinstance(text, str) or not text.strip() or sender.get("is_bot"):
            return Acknowledge()
        chat = str((message.get("chat") or {}).get("id", ""))
        topic = message.get("message_thread_id")
        per_topic = self.spec.threads == "conversation" and topic is not None
        return InboundMessage(
            event_id=str(update["update_id"]),
            conversation=f"{chat}:{topic}" if per_topic else chat,
            chat=chat,
            user=str(sender.get("id", "")),
            text=text.strip(),
            reply_to=str(message.get("message_id", "")),
            extra={"topic": str(topic)} if topic is not None else {},
        )

    async def post(self, message: InboundMessage, text: str) -> str:
        payload: dict[str, Any] = {"chat_id": message.chat, "text": _fitted(text)}
        if message.reply_to:
            payload["reply_to_message_id"] = int(message.reply_to)
        if "topic" in message.extra:
            payload["message_thread_id"] = int(message.extra["topic"])
        answer = await self._call(self._method("sendMessage"), "sendMessage", json=payload)
        sent = answer.get("result") or {}
        if not answer.get("ok") or "message_id" not in sent:
            raise PlatformCallFailed("telegram sendMessage: not ok")
        return str(sent["message_id"])

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        payload = {"chat_id": message.chat, "message_id": int(handle), "text": _fitted(text)}
        answer = await self._call(self._method("editMessageText"), "editMessageText", json=payload)
        if not answer.get("ok"):
            raise PlatformCallFailed("telegram editMessageText: not ok")

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        if response.status_code == 429:  # Bot API: parameters.retry_after
            return float((answer.get("parameters") or {}).get("retry_after") or 1)
        return None

    async def updates(self, offset: int, wait_seconds: float) -> list[dict[str, Any]]:
        """Long polling: the updates after `offset`, waiting up to `wait_seconds`."""
        payload = {"offset": offset, "timeout": int(wait_seconds), "allowed_updates": ["message"]}
        answer = await self._call(
            self._method("getUpdates"), "getUpdates", json=payload, timeout=wait_seconds + 10
        )
        found = answer.get("result")
        if not answer.get("ok") or not isinstance(found, list):
            raise PlatformCallFailed("telegram getUpdates: not ok")
        return [update for update in found if isinstance(update, dict)]


def _update_id(update: dict[str, Any]) -> int:
    return int(update.get("update_id", 0))
