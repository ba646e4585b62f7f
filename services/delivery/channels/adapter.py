"""The one interface every platform adapter implements.

An adapter knows its platform's wire: how a delivery is authenticated, what a
message looks like, and how to post and edit a reply. Everything else (dedupe,
threads, commands, policies, streaming) is the framework's, the same for all.
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid
from waybill.services.delivery.channels.config import ChannelSpec


@dataclass(frozen=True)
class InboundMessage:
    """A user's message, as every adapter reports it."""

    event_id: str  # the platform's id of this delivery: the dedupe key
    conversation: str  # the thread mapping key (a chat, or a topic/thread in it)
    chat: str  # where replies go (the platform's chat or channel id)
    user: str  # the platform's id of the author
    text: str
    reply_to: str = ""  # platform-specific anchor: message id, Slack thread_ts, ...
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Acknowledge:
    """A delivery answered without acting: a handshake, a bot's own message, an edit."""

    body: dict[str, Any] = field(default_factory=dict)


def unauthenticated(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.UNAUTHENTICATED, message)


def equal_secrets(given: str | None, expected: str | None) -> bool:
    return bool(given and expected) and hmac.compare_digest(str(given), str(expected))


def json_body(body: bytes) -> dict[str, Any]:
    try:
        found = codec.loads(body)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise invalid("The body must be a JSON object.")
    return found


class PlatformCallFailed(Exception):
    """A platform API call failed. The message never carries the URL (Telegram's
    has the bot token in its path) nor the request."""


class ChannelAdapter(ABC):
    platform: str
    # False: the platform gets the final answer once (no edits while streaming).
    streams_edits: bool = True

    def __init__(self, spec: ChannelSpec, http: httpx.AsyncClient) -> None:
        self.spec = spec
        self.http = http

    @abstractmethod
    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Raise UNAUTHENTICATED unless the platform (and only it) sent this."""

    @abstractmethod
    def parse(self, body: bytes) -> InboundMessage | Acknowledge:
        """The delivery's message, or what to answer when there is nothing to do."""

    @abstractmethod
    async def post(self, message: InboundMessage, text: str) -> str:
        """Post a reply to the message's chat; returns the reply's handle for edits."""

    @abstractmethod
    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        """Replace the text of a reply posted before."""

    async def _call(self, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self.http.post(url, **kwargs)
        except httpx.HTTPError as error:
            raise PlatformCallFailed(f"{self.platform} {what}: {type(error).__name__}") from None
        if response.status_code >= 400:
            raise PlatformCallFailed(f"{self.platform} {what}: HTTP {response.status_code}")
        try:
            found = response.json()
        except ValueError:
            found = {}
        return found if isinstance(found, dict) else {}
