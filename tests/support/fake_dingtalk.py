"""DingTalk's open API on loopback (access token, robot interactive cards sent
and updated), and robot callbacks as DingTalk posts them, signed with the
app secret (`timestamp`, `sign` headers)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from tests.support.fake_api import Answer, ApiCall, FakeApi


def signed(app_secret: str, timestamp_ms: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time() * 1000) if timestamp_ms is None else timestamp_ms)
    mac = hmac.new(app_secret.encode(), f"{stamp}\n{app_secret}".encode(), hashlib.sha256)
    return {
        "content-type": "application/json",
        "timestamp": stamp,
        "sign": base64.b64encode(mac.digest()).decode(),
    }


def callback(conversation: str, text: str, group: bool = True) -> dict[str, Any]:
    """A robot callback: a user's text to the bot, in a group or one to one."""
    return {
        "conversationId": conversation,
        "atUsers": [{"dingtalkId": "$:LWCP_v1:$bot"}],
        "chatbotCorpId": "ding-corp",
        "chatbotUserId": "$:LWCP_v1:$bot",
        "msgId": f"msg{uuid.uuid4().hex}",
        "senderNick": "Ada",
        "isAdmin": False,
        "senderStaffId": "staff-ada",
        "sessionWebhookExpiredTime": int(time.time() * 1000) + 3600_000,
        "createAt": int(time.time() * 1000),
        "senderCorpId": "ding-corp",
        "conversationType": "2" if group else "1",
        "senderId": "$:LWCP_v1:$ada",
        "conversationTitle": "team",
        "isInAtList": True,
        "sessionWebhook": "http://127.0.0.1:9/unused",
        "text": {"content": f" {text}"},
        "robotCode": "ding-robot",
        "msgtype": "text",
    }


class FakeDingTalk(FakeApi):
    def __init__(self, app_key: str, app_secret: str) -> None:
        super().__init__()
        self.app_key, self.app_secret = app_key, app_secret
        self.tokens: set[str] = set()

    def rate_limited(self, call: ApiCall) -> Answer:
        body = {"code": "Forbidden.AccessDenied.QpsLimitForApi", "message": "qps limit"}
        return 403, body, {"Retry-After": "1"}

    def answer(self, call: ApiCall) -> Answer:
        if call.path == "/v1.0/oauth2/accessToken":
            if (call.body.get("appKey"), call.body.get("appSecret")) != (
                self.app_key,
                self.app_secret,
            ):
                return 400, {"code": "invalidClientSecret", "message": "bad secret"}, {}
            token = uuid.uuid4().hex
            self.tokens.add(token)
            return 200, {"accessToken": token, "expireIn": 7200}, {}
        if call.headers.get("x-acs-dingtalk-access-token") not in self.tokens:
            return 401, {"code": "InvalidAuthentication", "message": "token invalid"}, {}
        if call.path == "/v1.0/im/v1.0/robot/interactiveCards/send" and call.method == "POST":
            time.sleep(0.2)
            return 200, {"processQueryKey": uuid.uuid4().hex}, {}
        if call.path == "/v1.0/im/robots/interactiveCards" and call.method == "PUT":
            return 200, {"success": True}, {}
        return 404, {"code": "NotFound"}, {}

    def shown(self, conversation: str) -> list[str]:
        """The card sent to the conversation, then each of its updates, as text."""
        sent = [
            c
            for c in self.calls_to("/robot/interactiveCards/send")
            if conversation in (c.body.get("openConversationId"), c.body.get("singleChatReceiver"))
        ]
        if not sent:
            return []
        card = sent[-1].body["cardBizId"]
        updates = [c for c in self.calls_to("/robots/interactiveCards", "PUT")]
        return [card_text(sent[-1])] + [
            card_text(c) for c in updates if c.body.get("cardBizId") == card
        ]


def card_text(call: ApiCall) -> str:
    return str(json.loads(call.body["cardData"])["contents"][0]["text"])
