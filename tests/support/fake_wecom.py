"""WeCom's API on loopback (gettoken, message/send), and callbacks as WeCom
makes them: AES-256-CBC encrypted XML under the EncodingAESKey, signed in the
query (`msg_signature`), and the GET URL verification with its `echostr`."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import time
import urllib.parse
import uuid

from tests.support.fake_api import Answer, ApiCall, FakeApi


def new_aes_key() -> str:
    """An EncodingAESKey: 43 characters, base64 of 32 bytes without its `=`."""
    return base64.b64encode(os.urandom(32)).decode().rstrip("=")


def encrypt(aes_key: str, corp_id: str, message: str) -> str:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = base64.b64decode(aes_key + "=")
    raw = message.encode()
    plain = os.urandom(16) + struct.pack(">I", len(raw)) + raw + corp_id.encode()
    pad = 32 - len(plain) % 32
    plain += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plain) + encryptor.finalize()).decode()


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def signed_query(token: str, encrypted: str, timestamp: int | None = None, **extra: str) -> str:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    nonce = uuid.uuid4().hex[:10]
    query = {"msg_signature": signature(token, stamp, nonce, encrypted), "timestamp": stamp}
    return urllib.parse.urlencode({**query, "nonce": nonce, **extra})


def text_message(user: str, text: str, corp_id: str, agent_id: str) -> tuple[str, str]:
    """(the decrypted XML, its MsgId) of a user's text to the app."""
    msg_id = str(uuid.uuid4().int % 10**16)
    xml = (
        f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName>"
        f"<FromUserName><![CDATA[{user}]]></FromUserName>"
        f"<CreateTime>{int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
        f"<Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId>"
        f"<AgentID>{agent_id}</AgentID></xml>"
    )
    return xml, msg_id


def envelope(corp_id: str, agent_id: str, encrypted: str) -> bytes:
    return (
        f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName>"
        f"<AgentID><![CDATA[{agent_id}]]></AgentID>"
        f"<Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
    ).encode()


class FakeWeCom(FakeApi):
    def __init__(self, corp_id: str, corp_secret: str) -> None:
        super().__init__()
        self.corp_id, self.corp_secret = corp_id, corp_secret
        self.tokens: set[str] = set()

    def rate_limited(self, call: ApiCall) -> Answer:
        return 200, {"errcode": 45009, "errmsg": "api freq out of limit"}, {}

    def answer(self, call: ApiCall) -> Answer:
        if call.path == "/cgi-bin/gettoken":
            if (call.query.get("corpid"), call.query.get("corpsecret")) != (
                self.corp_id,
                self.corp_secret,
            ):
                return 200, {"errcode": 40001, "errmsg": "invalid credential"}, {}
            token = uuid.uuid4().hex
            self.tokens.add(token)
            return (
                200,
                {"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200},
                {},
            )
        if call.query.get("access_token") not in self.tokens:
            return 200, {"errcode": 40014, "errmsg": "invalid access_token"}, {}
        if call.path == "/cgi-bin/message/send":
            return 200, {"errcode": 0, "errmsg": "ok", "msgid": f"msg-{self.new_id()}"}, {}
        return 404, {"errcode": 404, "errmsg": "not found"}, {}

    def sent_to(self, user: str) -> list[str]:
        """The texts the app sent to `user`, in order (refused tries left out)."""
        return [
            str(c.body["text"]["content"])
            for c in self.calls_to("/cgi-bin/message/send")
            if c.body.get("touser") == user
            and c.query.get("access_token") in self.tokens
            and not c.limited
        ]
