"""Inbound deliveries of chat platforms: thin, forwarded byte for byte.

The body and headers go to `Channels.Receive` untouched (signatures cover the
raw bytes); the service verifies them, acts, and says what to answer.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from waybill.gateway.peers import call
from waybill.gateway.schemas import error_responses
from waybill.v1 import channels_pb2

router = APIRouter(tags=["channels"], responses=error_responses())

# Headers a platform signs or proves itself with; nothing else is forwarded.
FORWARDED_PREFIXES = (
    "x-slack-",
    "x-telegram-",
    "x-waybill-signature",
    "x-waybill-timestamp",
    "content-type",
)


async def _forward(request: Request, platform: str, channel: str) -> Response:
    headers = [
        channels_pb2.Header(name=name, value=value)
        for name, value in request.headers.items()
        if name.lower().startswith(FORWARDED_PREFIXES)
    ]
    delivery = channels_pb2.InboundDelivery(
        platform=platform, channel=channel, body=await request.body(), headers=headers
    )
    reply = await call(request.app.state.peers.inbound.Receive(delivery))
    return Response(
        content=reply.body_json or b"{}",
        status_code=reply.http_status or 200,
        media_type="application/json",
    )


@router.post("/channels/telegram/{channel}/webhook")
async def telegram_webhook(request: Request, channel: str) -> Response:
    return await _forward(request, "telegram", channel)


@router.post("/channels/slack/{channel}/events")
async def slack_events(request: Request, channel: str) -> Response:
    return await _forward(request, "slack", channel)


@router.post("/channels/webhook/{channel}")
async def signed_webhook(request: Request, channel: str) -> Response:
    return await _forward(request, "webhook", channel)
