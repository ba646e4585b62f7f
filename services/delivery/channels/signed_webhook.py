"""A generic signed webhook: any system can post messages and receive answers.

Both ways, a request is signed: `X-Waybill-Timestamp: <unix seconds>` and
`X-Waybill-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` under
the channel's shared secret. Inbound body:
`{"event_id", "chat_id", "user_id", "text", "conversation_id"?}`. The answer is
POSTed once, when the run ends, to the channel's `reply_url`:
`{"channel", "event_id", "chat_id", "conversation_id", "text"}` (a command's
answer too).
"""

from __future__ import annotations

import hashlib
import hmac
import time

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    Delivery,
    InboundMessage,
    equal_secrets,
    json_body,
    unauthenticated,
)

SIGNATURE_HEADER = "x-waybill-signature"
TIMESTAMP_HEADER = "x-waybill-timestamp"
MAX_SKEW_SECONDS = 300
REQUIRED = ("event_id", "chat_id", "user_id", "text")


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    return {
        "content-type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: webhook_signature(secret, timestamp, body),
    }


class SignedWebhookAdapter(ChannelAdapter):
    platform = "webhook"
    reply_style = "final"  # one signed POST with the final answer
    required = ("secret", "reply_url")

    def verify(self, delivery: Delivery) -> None:
        headers, body = delivery.headers, delivery.body
        timestamp = headers.get(TIMESTAMP_HEADER) or ""
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > MAX_SKEW_SECONDS:
            raise unauthenticated(f"{TIMESTAMP_HEADER} is missing or too far from now.")
        expected = webhook_signature(str(self.spec.secret), timestamp, body)
        if not equal_secrets(headers.get(SIGNATURE_HEADER), expected):
            raise unauthenticated(f"{SIGNATURE_HEADER} does not match the body.")

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        found = json_body(delivery.body)
        missing = [k for k in REQUIRED if not isinstance(found.get(k), str) or not found[k]]
        if missing:
            raise invalid(f"The message needs non-empty strings: {', '.join(missing)}.")
        chat = found["chat_id"]
        conversation = str(found.get("conversation_id") or "")
        per_conversation = self.spec.threads == "conversation" and conversation
        return InboundMessage(
            event_id=found["event_id"],
            conversation=f"{chat}:{conversation}" if per_conversation else chat,
            chat=chat,
            user=found["user_id"],
            text=found["text"].strip(),
            reply_to=conversation,
        )

    async def post(self, message: InboundMessage, text: str) -> str:
        body = codec.dumps(
            {
                "channel": self.spec.name,
                "event_id": message.event_id,
                "chat_id": message.chat,
                "conversation_id": message.reply_to,
                "text": text,
            }
        )
        headers = signed_headers(str(self.spec.secret), body)
        await self._call(str(self.spec.reply_url), "reply", content=body, headers=headers)
        return message.event_id

    async def check(self) -> str:
        return f"answers POSTed to {self.spec.reply_url}"  # nothing to ask
