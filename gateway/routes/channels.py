"""Inbound deliveries of chat platforms: thin, forwarded byte for byte.

The body, query and headers go to `Channels.Receive` untouched (signatures cover
the raw bytes); the service verifies them, acts, and says what to answer. Every
platform but Telegram and the signed webhook (older routes) posts to
`/channels/<platform>/<channel>/events`; a platform that verifies the URL with a
GET (WeCom) gets it there too.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from waybill.gateway.peers import call
from waybill.gateway.response_schemas import error_responses
from waybill.v1 import channels_pb2

router = APIRouter(tags=["channels"], responses=error_responses())

# Platforms prove themselves in headers of their own (`X-Lark-Signature`,
# DingTalk's bare `sign`): every header is forwarded but the caller's
# credentials for us, which a platform never sends and the service never needs.
WITHHELD = frozenset({"authorization", "cookie", "x-api-key", "proxy-authorization"})


async def _forward(request: Request, platform: str, channel: str) -> Response:
    headers = [
        channels_pb2.Header(name=name, value=value)
        for name, value in request.headers.items()
        if name.lower() not in WITHHELD
    ]
    delivery = channels_pb2.InboundDelivery(
        platform=platform,
        channel=channel,
        body=await request.body(),
        headers=headers,
        method=request.method,
        query=request.url.query,
    )
    reply = await call(request.app.state.peers.inbound.Receive(delivery))
    return Response(
        content=reply.body_json or (b"" if reply.content_type else b"{}"),
        status_code=reply.http_status or 200,
        media_type=reply.content_type or "application/json",
    )


@router.post("/channels/telegram/{channel}/webhook")
async def telegram_webhook(request: Request, channel: str) -> Response:
    return await _forward(request, "telegram", channel)


# Two routes, not one with two methods: each needs an operation id of its own (one
# shared by both methods made the OpenAPI document differ from process to process).
@router.get("/channels/{platform}/{channel}/events")
async def platform_url_check(request: Request, platform: str, channel: str) -> Response:
    """A platform checking the URL it was given (WeCom's `echostr`)."""
    return await _forward(request, platform, channel)


@router.post("/channels/{platform}/{channel}/events")
async def platform_events(request: Request, platform: str, channel: str) -> Response:
    return await _forward(request, platform, channel)


@router.post("/channels/webhook/{channel}")
async def signed_webhook(request: Request, channel: str) -> Response:
    return await _forward(request, "webhook", channel)
