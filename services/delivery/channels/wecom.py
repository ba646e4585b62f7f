"""WeCom / WeChat Work (an app's callback URL): encrypted XML deliveries; answers
as app messages, posted in chunks as the answer grows (WeCom cannot edit one).

WeCom signs each callback in its query: `msg_signature` is the hex SHA-1 of the
sorted, joined `Token`, `timestamp`, `nonce` and encrypted text. The text is
AES-256-CBC under `base64(EncodingAESKey + "=")` (IV: the key's first 16 bytes,
PKCS#7 to 32-byte blocks) of 16 random bytes, the message's length (4 bytes,
network order), the message, and the corp id it was meant for. The URL
verification is a GET whose `echostr` is answered decrypted, as plain text.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import time
import xml.etree.ElementTree as ElementTree
from typing import Any

import httpx
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

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
    unauthenticated,
)

RATE_LIMITED = (45009, 45033)  # api freq out of limit; too many concurrent calls
TOKEN_REFUSED = (40014, 42001)  # invalid, expired access_token
MAX_TEXT = 680  # a text message holds 2048 bytes: room for three-byte characters


def wecom_signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def wecom_decrypt(encoding_aes_key: str, encrypted: str, corp_id: str) -> str:
    key = base64.b64decode(encoding_aes_key + "=")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    pad = padded[-1]
    if not 1 <= pad <= 32:
        raise ValueError("bad padding")
    plain = padded[:-pad]
    (length,) = struct.unpack(">I", plain[16:20])
    message, receiver = plain[20 : 20 + length], plain[20 + length :]
    if receiver.decode() != corp_id:
        raise ValueError("meant for another corp")
    return message.decode()


def _xml_fields(text: str | bytes) -> dict[str, str]:
    # ElementTree expands no external entities (and expat caps entity growth).
    root = ElementTree.fromstring(text)
    return {child.tag: (child.text or "") for child in root}


class WeComAdapter(ChannelAdapter):
    platform = "wecom"
    default_api_base = "https://qyapi.weixin.qq.com"
    required = ("corp_id", "agent_id", "corp_secret", "callback_token", "encoding_aes_key")
    reply_style = "chunks"
    max_text = MAX_TEXT

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.token = CachedToken(self._access_token)

    # ---- inbound -------------------------------------------------------------

    def _encrypted(self, delivery: Delivery) -> str:
        if delivery.method == "GET":
            return delivery.query.get("echostr", "")
        try:
            return _xml_fields(delivery.body).get("Encrypt", "")
        except ElementTree.ParseError:
            raise unauthenticated("The body is not WeCom's encrypted XML.") from None

    def verify(self, delivery: Delivery) -> None:
        query = delivery.query
        timestamp, nonce = query.get("timestamp", ""), query.get("nonce", "")
        if not timestamp.isdigit():
            raise unauthenticated("The timestamp parameter is missing.")
        if delivery.method != "GET":  # the URL check may come from the admin console later
            fresh(int(timestamp), self.settings.channel_max_skew_seconds, "timestamp")
        encrypted = self._encrypted(delivery)
        expected = wecom_signature(str(self.spec.callback_token), timestamp, nonce, encrypted)
        if not encrypted or not equal_secrets(query.get("msg_signature"), expected):
            raise unauthenticated("msg_signature does not match.")

    def _plain(self, delivery: Delivery) -> str:
        try:
            return wecom_decrypt(
                str(self.spec.encoding_aes_key), self._encrypted(delivery), str(self.spec.corp_id)
            )
        except (ValueError, struct.error, UnicodeDecodeError):
            raise unauthenticated(
                "The message does not decrypt under the EncodingAESKey."
            ) from None

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        plain = self._plain(delivery)
        if delivery.method == "GET":
            return Acknowledge(text=plain)  # the URL verification: echostr, decrypted
        found = _xml_fields(plain)
        text, user = found.get("Content", "").strip(), found.get("FromUserName", "")
        if found.get("MsgType") != "text" or not text or not user or not found.get("MsgId"):
            return Acknowledge(text="")  # events (enter the app, menus), pictures
        return InboundMessage(
            event_id=found["MsgId"],
            conversation=user,  # an app's messages are one to one
            chat=user,
            user=user,
            text=text,
        )

    def received(self, message: InboundMessage) -> Acknowledge:
        return Acknowledge(text="")  # WeCom wants an empty 200 (no passive reply)

    # ---- outbound ------------------------------------------------------------

    async def _access_token(self) -> tuple[str, float]:
        return await self._fetch_token(attempts=0)

    async def _fetch_token(self, attempts: int) -> tuple[str, float]:
        return await fetch_app_token(
            self,
            f"{self.base_url}/cgi-bin/gettoken",
            "gettoken",
            "access_token",
            "expires_in",
            failure="wecom gettoken",
            code_key="errcode",
            method="GET",
            attempts=attempts,
            params={"corpid": self.spec.corp_id, "corpsecret": self.spec.corp_secret},
        )

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        if response.status_code == 429 or answer.get("errcode") in RATE_LIMITED:
            return super().retry_after(response, answer) or 1.0
        return None

    def error_of(self, answer: dict[str, Any]) -> str:
        return f"errcode {answer.get('errcode')} {str(answer.get('errmsg') or '')[:120]}".strip()

    async def post(self, message: InboundMessage, text: str) -> str:
        payload = {
            "touser": message.chat,
            "msgtype": "text",
            "agentid": int(str(self.spec.agent_id)),
            "text": {"content": cut(text, MAX_TEXT)},
        }
        for _ in range(2):  # once more with a fresh token when it was refused
            answer = await self._call(
                f"{self.base_url}/cgi-bin/message/send",
                "message/send",
                params={"access_token": await self.token.get()},
                json=payload,
            )
            if answer.get("errcode") in TOKEN_REFUSED:
                self.token.drop()
                continue
            if answer.get("errcode") != 0:
                raise PlatformCallFailed(f"wecom message/send: {self.error_of(answer)}")
            return str(answer.get("msgid") or time.time())
        raise PlatformCallFailed("wecom message/send: the access token was refused")

    async def check(self) -> str:
        await self._fetch_token(attempts=1)
        return f"corp {self.spec.corp_id}, agent {self.spec.agent_id}"
