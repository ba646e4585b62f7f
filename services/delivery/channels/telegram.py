"""Telegram (Bot API): webhook deliveries or long polling (`getUpdates`), answers
streamed with `sendMessage` then `editMessageText`.

A webhook delivery is authentic when it carries the secret token the webhook
was registered with (`X-Telegram-Bot-Api-Secret-Token`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waybill.common.errors import refused
from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    InboundMessage,
    PlatformCallFailed,
    equal_secrets,
    json_body,
    unauthenticated,
)

SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_TEXT = 4096  # Telegram's limit for one message


def _fitted(text: str) -> str:
    text = text or "…"
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class TelegramAdapter(ChannelAdapter):
    platform = "telegram"

    def _method(self, name: str) -> str:
        return f"{self.spec.base_url}/bot{self.spec.bot_token}/{name}"

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        if self.spec.mode != "webhook":
            raise refused(f"Channel {self.spec.name} uses long polling, not a webhook.")
        if not equal_secrets(headers.get(SECRET_HEADER), self.spec.secret_token):
            raise unauthenticated(f"{SECRET_HEADER} is missing or wrong.")

    def parse(self, body: bytes) -> InboundMessage | Acknowledge:
        return self.message_of(json_body(body))

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
