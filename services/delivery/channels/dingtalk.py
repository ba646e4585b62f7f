"""DingTalk (robot callbacks over HTTP): signed deliveries; answers as an
interactive card sent by the robot and updated in place as it grows.

A callback is authentic when its `sign` header is base64 HMAC-SHA256 of
`"<timestamp>\\n<app secret>"` under the app secret, and its `timestamp` header
(milliseconds) is recent: DingTalk's signature covers the time, not the body,
so a delivery replayed late is refused by its timestamp, and one replayed in
time by its `msgId` (the dedupe key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from typing import Any

import httpx

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

ONE_TO_ONE = "1"  # conversationType; "2" is a group
MAX_TEXT = 5000


def dingtalk_sign(app_secret: str, timestamp: str) -> str:
    signed = f"{timestamp}\n{app_secret}".encode()
    return base64.b64encode(hmac.new(app_secret.encode(), signed, hashlib.sha256).digest()).decode()


def card_data(text: str) -> str:
    """The StandardCard template's data: one Markdown block."""
    return json.dumps(
        {
            "config": {"autoLayout": True, "enableForward": True},
            "contents": [{"type": "markdown", "text": cut(text, MAX_TEXT), "id": "answer"}],
        },
        ensure_ascii=False,
    )


class DingTalkAdapter(ChannelAdapter):
    platform = "dingtalk"
    default_api_base = "https://api.dingtalk.com"
    required = ("app_id", "app_secret")  # the app's AppKey (Client ID) and AppSecret
    max_text = MAX_TEXT

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.token = CachedToken(self._access_token)

    def verify(self, delivery: Delivery) -> None:
        timestamp = delivery.headers.get("timestamp") or ""
        if not timestamp.isdigit():
            raise unauthenticated("The timestamp header is missing.")
        fresh(int(timestamp) / 1000, self.settings.channel_max_skew_seconds, "timestamp")
        expected = dingtalk_sign(str(self.spec.app_secret), timestamp)
        if not equal_secrets(delivery.headers.get("sign"), expected):
            raise unauthenticated("The sign header does not match the app secret.")

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        found = json_body(delivery.body)
        if found.get("msgtype") != "text":
            return Acknowledge()  # pictures, files, rich text: nothing to run
        text = str((found.get("text") or {}).get("content") or "").strip()
        conversation, message_id = str(found.get("conversationId", "")), str(found.get("msgId", ""))
        if not text or not conversation or not message_id:
            return Acknowledge()
        kind = str(found.get("conversationType") or ONE_TO_ONE)
        staff = str(found.get("senderStaffId") or "")
        return InboundMessage(
            event_id=message_id,
            conversation=conversation,  # DingTalk has no reply threads
            chat=conversation,
            user=staff or str(found.get("senderId", "")),
            text=text,
            reply_to=message_id,
            extra={"kind": kind, "staff": staff},
        )

    async def _access_token(self) -> tuple[str, float]:
        return await fetch_app_token(
            self,
            f"{self.base_url}/v1.0/oauth2/accessToken",
            "accessToken",
            "accessToken",
            "expireIn",
            failure="dingtalk accessToken",
            json={"appKey": self.spec.app_id, "appSecret": self.spec.app_secret},
        )

    async def _api(
        self, method: str, path: str, what: str, attempts: int = 0, **kwargs: Any
    ) -> dict[str, Any]:
        for _ in range(2):  # once more with a fresh token when it was refused
            token = await self.token.get()
            try:
                return await self._call(
                    f"{self.base_url}{path}",
                    what,
                    method=method,
                    attempts=attempts,
                    headers={"x-acs-dingtalk-access-token": token},
                    **kwargs,
                )
            except PlatformCallFailed as error:
                if "HTTP 401" not in str(error):
                    raise
                self.token.drop()
        raise PlatformCallFailed(f"dingtalk {what}: the access token was refused")

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        code = str(answer.get("code") or "")
        if response.status_code == 429 or "QpsLimit" in code or "Throttling" in code:
            return super().retry_after(response, answer) or 1.0
        return None

    async def post(self, message: InboundMessage, text: str) -> str:
        card_id = uuid.uuid4().hex
        payload: dict[str, Any] = {
            "cardTemplateId": "StandardCard",
            "cardBizId": card_id,  # ours: the handle its updates name
            "robotCode": self.spec.robot_code or self.spec.app_id,
            "cardData": card_data(text),
        }
        if message.extra.get("kind") == ONE_TO_ONE:
            payload["singleChatReceiver"] = json.dumps({"userId": message.extra.get("staff")})
        else:
            payload["openConversationId"] = message.chat
        await self._api(
            "POST", "/v1.0/im/v1.0/robot/interactiveCards/send", "send card", json=payload
        )
        return card_id

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        payload = {"cardBizId": handle, "cardData": card_data(text)}
        await self._api("PUT", "/v1.0/im/robots/interactiveCards", "update card", json=payload)

    async def check(self) -> str:
        self.token.drop()  # a fresh one: the secret is what is checked
        answer = await self._call(
            f"{self.base_url}/v1.0/oauth2/accessToken",
            "accessToken",
            attempts=1,
            json={"appKey": self.spec.app_id, "appSecret": self.spec.app_secret},
        )
        if not answer.get("accessToken"):
            raise PlatformCallFailed(f"dingtalk accessToken: {self.error_of(answer)}")
        return f"app {self.spec.app_id}"
