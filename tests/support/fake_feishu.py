"""Feishu's open platform on loopback (tenant token, message reply, card update,
bot info), and events as Feishu sends them: encrypted with the app's Encrypt
Key (AES-256-CBC, SHA-256 of the key) and signed (`X-Lark-Signature`)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.support.fake_api import Answer, ApiCall, FakeApi


def encrypt(encrypt_key: str, payload: dict[str, Any]) -> bytes:
    """The body Feishu posts: `{"encrypt": base64(iv + AES-256-CBC(json))}`."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(json.dumps(payload).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    sealed = iv + encryptor.update(padded) + encryptor.finalize()
    return json.dumps({"encrypt": base64.b64encode(sealed).decode()}).encode()


def signed(encrypt_key: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    nonce = uuid.uuid4().hex[:12]
    digest = hashlib.sha256((stamp + nonce + encrypt_key).encode() + body).hexdigest()
    return {
        "content-type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": digest,
    }


def message_event(
    chat: str, text: str, token: str, event_id: str | None = None, root_id: str = ""
) -> dict[str, Any]:
    """An `im.message.receive_v1` event (schema 2.0), a user's text in a group."""
    message_id = f"om_{uuid.uuid4().hex}"
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "im.message.receive_v1",
            "create_time": str(int(time.time() * 1000)),
            "token": token,
            "app_id": "cli_test",
            "tenant_key": "tenant-1",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": "ou_ada", "user_id": "ada", "union_id": "on_ada"},
                "sender_type": "user",
                "tenant_key": "tenant-1",
            },
            "message": {
                "message_id": message_id,
                "root_id": root_id,
                "parent_id": root_id,
                "create_time": str(int(time.time() * 1000)),
                "chat_id": chat,
                "chat_type": "group",
                "message_type": "text",
                "content": json.dumps({"text": f"@_user_1 {text}"}),
                "mentions": [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "waybill"}],
            },
        },
    }


class FakeFeishu(FakeApi):
    def __init__(self, app_id: str, app_secret: str) -> None:
        super().__init__()
        self.app_id, self.app_secret = app_id, app_secret
        self.tokens: set[str] = set()
        self.replies: dict[str, str] = {}  # the user's message id -> our card's

    def rate_limited(self, call: ApiCall) -> Answer:
        body = {"code": 99991400, "msg": "request trigger frequency limit"}
        return 400, body, {"x-ogw-ratelimit-reset": "1"}

    def answer(self, call: ApiCall) -> Answer:
        path = call.path.removeprefix("/open-apis")
        if path == "/auth/v3/tenant_access_token/internal":
            if call.body.get("app_id") != self.app_id or call.body.get("app_secret") != (
                self.app_secret
            ):
                return 400, {"code": 10014, "msg": "app secret invalid"}, {}
            token = f"t-{uuid.uuid4().hex}"
            self.tokens.add(token)
            return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}, {}
        if call.headers.get("authorization", "").removeprefix("Bearer ") not in self.tokens:
            return 400, {"code": 99991663, "msg": "Invalid access token for authorization."}, {}
        if path == "/bot/v3/info":
            return 200, {"code": 0, "msg": "ok", "bot": {"app_name": "waybill-test"}}, {}
        if path.startswith("/im/v1/messages/") and path.endswith("/reply"):
            time.sleep(0.2)  # lets the answer grow before the first update
            data = {"message_id": f"om_reply_{self.new_id()}"}
            self.replies[path.split("/")[-2]] = data["message_id"]
            return 200, {"code": 0, "msg": "success", "data": data}, {}
        if path.startswith("/im/v1/messages/") and call.method == "PATCH":
            return 200, {"code": 0, "msg": "success", "data": {}}, {}
        return 404, {"code": 404, "msg": "not found"}, {}

    def shown(self, message_id: str) -> list[str]:
        """The text of each card posted in reply to `message_id`, then of its updates."""
        replies = self.calls_to(f"/messages/{message_id}/reply")
        if not replies or message_id not in self.replies:
            return []
        updates = self.calls_to(f"/im/v1/messages/{self.replies[message_id]}", "PATCH")
        return [card_text(replies[-1])] + [card_text(call) for call in updates]


def card_text(call: ApiCall) -> str:
    card = json.loads(call.body["content"])
    return str(card["elements"][0]["content"])
