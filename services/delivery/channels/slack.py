"""Slack (Events API): signed deliveries, answers as thread replies streamed
with `chat.postMessage` then `chat.update`.

A delivery is authentic when `X-Slack-Signature` is `v0=` + HMAC-SHA256 of
`v0:<X-Slack-Request-Timestamp>:<body>` under the app's signing secret, and the
timestamp is recent (a replayed old delivery is refused).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    Delivery,
    InboundMessage,
    PlatformCallFailed,
    equal_secrets,
    json_body,
    unauthenticated,
)

SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
MAX_SKEW_SECONDS = 300  # Slack's own advice
MENTION = re.compile(r"^\s*<@[A-Z0-9]+>\s*")


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    signed = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


class SlackAdapter(ChannelAdapter):
    platform = "slack"
    default_api_base = "https://slack.com/api"
    required = ("bot_token", "signing_secret")

    def verify(self, delivery: Delivery) -> None:
        headers = delivery.headers
        timestamp = headers.get(TIMESTAMP_HEADER) or ""
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > MAX_SKEW_SECONDS:
            raise unauthenticated(f"{TIMESTAMP_HEADER} is missing or too far from now.")
        expected = slack_signature(str(self.spec.signing_secret), timestamp, delivery.body)
        if not equal_secrets(headers.get(SIGNATURE_HEADER), expected):
            raise unauthenticated(f"{SIGNATURE_HEADER} does not match the body.")

    def parse(self, received: Delivery) -> InboundMessage | Acknowledge:
        delivery = json_body(received.body)
        if delivery.get("type") == "url_verification":
            return Acknowledge({"challenge": str(delivery.get("challenge", ""))})
        event = delivery.get("event")
        if delivery.get("type") != "event_callback" or not isinstance(event, dict):
            return Acknowledge()
        # Our own replies come back as events too: a bot's message or any subtype
        # (edits, joins) is never a user's message.
        if event.get("type") not in ("message", "app_mention"):
            return Acknowledge()
        if event.get("subtype") or event.get("bot_id"):
            return Acknowledge()
        text = MENTION.sub("", str(event.get("text") or "")).strip()
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        if not text or not channel or not ts:
            return Acknowledge()
        thread_ts = str(event.get("thread_ts") or ts)
        return InboundMessage(
            # One message may arrive as `message` and as `app_mention` (two event
            # ids); its channel and ts name it once, and retries keep them.
            event_id=f"{channel}:{ts}",
            conversation=channel if self.spec.threads == "chat" else f"{channel}:{thread_ts}",
            chat=channel,
            user=str(event.get("user", "")),
            text=text,
            reply_to=thread_ts,
            extra={"slack_event_id": str(delivery.get("event_id", ""))},
        )

    async def _api(self, method: str, payload: dict[str, Any], attempts: int = 0) -> dict[str, Any]:
        answer = await self._call(
            f"{self.base_url}/{method}",
            method,
            attempts=attempts,
            json=payload,
            headers={"Authorization": f"Bearer {self.spec.bot_token}"},
        )
        if not answer.get("ok"):
            raise PlatformCallFailed(f"slack {method}: {answer.get('error', 'not ok')}")
        return answer

    async def post(self, message: InboundMessage, text: str) -> str:
        payload = {"channel": message.chat, "text": text or "…", "thread_ts": message.reply_to}
        return str((await self._api("chat.postMessage", payload))["ts"])

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        await self._api("chat.update", {"channel": message.chat, "ts": handle, "text": text})

    async def check(self) -> str:
        answer = await self._api("auth.test", {}, attempts=1)
        return f"bot {answer.get('user', '?')} in {answer.get('team', '?')}"
