"""Feishu / Lark (event subscription over HTTP): encrypted, signed deliveries;
answers as a card replied to the message, updated in place as it grows.

With an Encrypt Key set on the app, Feishu posts `{"encrypt": <base64>}`: the
16-byte IV then the event JSON under AES-256-CBC with SHA-256(encrypt key) as
the key, and signs the request: `X-Lark-Signature` = hex SHA-256 of
`timestamp + nonce + encrypt_key + body` (`X-Lark-Request-Timestamp`,
`X-Lark-Request-Nonce`). The URL verification handshake comes unsigned; it is
answered only when it decrypts under our key (it starts nothing). The optional
Verification Token is checked in every event too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import httpx
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from waybill.common import codec
from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    CachedToken,
    ChannelAdapter,
    Delivery,
    InboundMessage,
    PlatformCallFailed,
    cut,
    equal_secrets,
    fetch_app_token,
    fresh,
    json_body,
    unauthenticated,
)

SIGNATURE_HEADER = "x-lark-signature"
TIMESTAMP_HEADER = "x-lark-request-timestamp"
NONCE_HEADER = "x-lark-request-nonce"
MENTION = re.compile(r"@_user_\d+\s*")
RATE_LIMITED = 99991400  # "request trigger frequency limit"
TOKEN_REFUSED = (99991661, 99991663, 99991668)  # missing, invalid, expired token
MAX_TEXT = 8000


def feishu_signature(encrypt_key: str, timestamp: str, nonce: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def feishu_decrypt(encrypt_key: str, encrypted: str) -> bytes:
    raw = base64.b64decode(encrypted)
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def card(text: str) -> str:
    """An interactive card showing `text` as Markdown, updatable by the bot."""
    return json.dumps(
        {
            "config": {"wide_screen_mode": True, "update_multi": True},
            "elements": [{"tag": "markdown", "content": cut(text, MAX_TEXT)}],
        },
        ensure_ascii=False,
    )


class FeishuAdapter(ChannelAdapter):
    platform = "feishu"
    default_api_base = "https://open.feishu.cn"
    required = ("app_id", "app_secret", "encrypt_key")
    max_text = MAX_TEXT

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.token = CachedToken(self._tenant_token)

    # ---- inbound -------------------------------------------------------------

    def _payload(self, body: bytes) -> dict[str, Any]:
        outer = json_body(body)
        encrypted = outer.get("encrypt")
        if not isinstance(encrypted, str):
            raise unauthenticated("The event is not encrypted with the app's Encrypt Key.")
        try:
            return json_body(feishu_decrypt(str(self.spec.encrypt_key), encrypted))
        except Exception:  # a wrong key or a forged body: not Feishu's
            raise unauthenticated(
                "The event does not decrypt under the app's Encrypt Key."
            ) from None

    def verify(self, delivery: Delivery) -> None:
        headers = delivery.headers
        signature, timestamp = headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER, "")
        payload = self._payload(delivery.body)
        if signature is None and payload.get("type") == "url_verification":
            self._check_token(str(payload.get("token") or ""))
            return  # the handshake: proven by decrypting, and it starts nothing
        if not timestamp.isdigit():
            raise unauthenticated(f"{TIMESTAMP_HEADER} is missing.")
        fresh(int(timestamp), self.settings.channel_max_skew_seconds, TIMESTAMP_HEADER)
        expected = feishu_signature(
            str(self.spec.encrypt_key), timestamp, headers.get(NONCE_HEADER, ""), delivery.body
        )
        if not equal_secrets(signature, expected):
            raise unauthenticated(f"{SIGNATURE_HEADER} does not match the body.")
        self._check_token(str((payload.get("header") or {}).get("token") or ""))

    def _check_token(self, token: str) -> None:
        if self.spec.verification_token and not equal_secrets(token, self.spec.verification_token):
            raise unauthenticated("The event's verification token is wrong.")

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        payload = self._payload(delivery.body)
        if payload.get("type") == "url_verification":
            return Acknowledge({"challenge": str(payload.get("challenge", ""))})
        header, event = payload.get("header") or {}, payload.get("event") or {}
        if header.get("event_type") != "im.message.receive_v1" or not isinstance(event, dict):
            return Acknowledge()
        sender, message = event.get("sender") or {}, event.get("message") or {}
        if sender.get("sender_type") != "user" or message.get("message_type") != "text":
            return Acknowledge()  # our own cards, images, files: nothing to run
        content = codec.loads(str(message.get("content") or "{}"), {})
        text = MENTION.sub("", str(content.get("text") or "")).strip()
        chat, message_id = str(message.get("chat_id", "")), str(message.get("message_id", ""))
        if not text or not chat or not message_id or not header.get("event_id"):
            return Acknowledge()
        topic = str(message.get("thread_id") or message.get("root_id") or message_id)
        return InboundMessage(
            event_id=str(header["event_id"]),
            conversation=chat if self.spec.threads == "chat" else f"{chat}:{topic}",
            chat=chat,
            user=str((sender.get("sender_id") or {}).get("open_id", "")),
            text=text,
            reply_to=message_id,
        )

    # ---- outbound ------------------------------------------------------------

    async def _tenant_token(self) -> tuple[str, float]:
        return await fetch_app_token(
            self,
            f"{self.base_url}/open-apis/auth/v3/tenant_access_token/internal",
            "tenant_access_token",
            "tenant_access_token",
            "expire",
            failure="feishu tenant_access_token",  # Lark's too, as before
            code_key="code",
            json={"app_id": self.spec.app_id, "app_secret": self.spec.app_secret},
        )

    async def _api(
        self, method: str, path: str, what: str, attempts: int = 0, **kwargs: Any
    ) -> dict[str, Any]:
        for _ in range(2):  # once more with a fresh token when it was refused
            token = await self.token.get()
            answer = await self._call(
                f"{self.base_url}/open-apis{path}",
                what,
                method=method,
                attempts=attempts,
                answer_errors=True,  # its errors are codes in a JSON answer
                headers={"Authorization": f"Bearer {token}"},
                **kwargs,
            )
            if answer.get("code") in TOKEN_REFUSED:
                self.token.drop()
                continue
            if answer.get("code") != 0:
                raise PlatformCallFailed(f"feishu {what}: {self.error_of(answer)}")
            return answer
        raise PlatformCallFailed(f"feishu {what}: the tenant token was refused")

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        if response.status_code == 429 or answer.get("code") == RATE_LIMITED:
            reset = response.headers.get("x-ogw-ratelimit-reset")
            return float(reset) if reset and reset.isdigit() else 1.0
        return None

    def error_of(self, answer: dict[str, Any]) -> str:
        return f"code {answer.get('code')} {str(answer.get('msg') or '')[:200]}".strip()

    async def post(self, message: InboundMessage, text: str) -> str:
        answer = await self._api(
            "POST",
            f"/im/v1/messages/{message.reply_to}/reply",
            "reply",
            json={"msg_type": "interactive", "content": card(text)},
        )
        return str((answer.get("data") or {}).get("message_id", ""))

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        await self._api(
            "PATCH", f"/im/v1/messages/{handle}", "update card", json={"content": card(text)}
        )

    async def check(self) -> str:
        self.token.drop()  # a fresh one: the secret is what is checked
        answer = await self._api("GET", "/bot/v3/info", "bot info", attempts=1)
        return f"bot {(answer.get('bot') or {}).get('app_name', '?')}"


class LarkAdapter(FeishuAdapter):
    """Lark, Feishu's international edition: the same API on another host."""

    platform = "lark"
    default_api_base = "https://open.larksuite.com"
