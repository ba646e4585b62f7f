"""The one interface every platform adapter implements.

An adapter knows its platform's wire: how a delivery is authenticated, what a
message looks like, how to post and edit a reply, and (for platforms that push
nothing over HTTP) how to hold the connection messages arrive on. Everything
else (dedupe, threads, commands, policies, streaming, retries, leases) is the
framework's, the same for all.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import grpc
import httpx

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid, refused
from waybill.common.settings import Settings
from waybill.services.delivery.channels.config import ChannelSpec
from waybill.services.delivery.channels.metrics import PLATFORM_RETRIES

log = logging.getLogger("waybill.channels")


@dataclass(frozen=True)
class Delivery:
    """One HTTP request a platform made to the gateway, as it came."""

    headers: Mapping[str, str]  # names in lower case
    body: bytes
    method: str = "POST"
    query: Mapping[str, str] = field(default_factory=dict)


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
    """A delivery answered without acting: a handshake, a bot's own message, an edit.
    `text` answers in plain text instead of JSON (WeCom's echostr)."""

    body: dict[str, Any] = field(default_factory=dict)
    text: str | None = None


# A listener hands each message over, with the position to resume after it; the
# answer is False when this replica no longer holds the channel's lease.
Deliver = Callable[[InboundMessage | None, str], Awaitable[bool]]
ReplyStyle = Literal["edit", "chunks", "final"]


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


def fresh(timestamp: float, max_skew: float, what: str) -> None:
    """A signed delivery from too long ago (or from the future) is a replay."""
    if abs(time.time() - timestamp) > max_skew:
        raise unauthenticated(f"{what} is too far from now.")


def cut(text: str, limit: int) -> str:
    text = text or "…"
    return text if len(text) <= limit else text[: limit - 1] + "…"


class PlatformCallFailed(Exception):
    """A platform API call failed. The message never carries the URL (Telegram's
    has the bot token in its path) nor the request."""


def retry_after_header(response: httpx.Response) -> float | None:
    """`Retry-After: <seconds>` or `<HTTP date>`, as seconds from now."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class CachedToken:
    """An app access token (Feishu, DingTalk, WeCom): fetched with the app's
    secret, kept until shortly before it expires, dropped when refused."""

    def __init__(self, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> None:
        self.fetch = fetch
        self.value = ""
        self.until = 0.0
        self.lock = asyncio.Lock()

    async def get(self) -> str:
        async with self.lock:
            if not self.value or time.monotonic() >= self.until:
                self.value, lifetime = await self.fetch()
                self.until = time.monotonic() + max(0.0, lifetime - 60)
            return self.value

    def drop(self) -> None:
        self.value = ""


async def fetch_app_token(
    adapter: ChannelAdapter,
    url: str,
    what: str,
    token_key: str,
    lifetime_key: str,
    *,
    failure: str,
    code_key: str | None = None,
    **call: Any,
) -> tuple[str, float]:
    """A CachedToken's fetch: the app token in `token_key` of what `url` answers, with
    its lifetime in seconds (`lifetime_key`, else the platforms' two hours). Without a
    token, or with a `code_key` other than 0, PlatformCallFailed says `failure`."""
    answer = await adapter._call(url, what, **call)
    if (code_key is not None and answer.get(code_key) != 0) or not answer.get(token_key):
        raise PlatformCallFailed(f"{failure}: {adapter.error_of(answer)}")
    return str(answer[token_key]), float(answer.get(lifetime_key) or 7200)


class ChannelAdapter(ABC):
    platform: str
    default_api_base: str = ""
    # Spec fields the platform needs (secrets included); checked at start-up.
    required: tuple[str, ...] = ()
    # How an answer is streamed: one post edited as it grows, new posts of at
    # most `max_text` characters (a platform without edits), or the final answer once.
    reply_style: ReplyStyle = "edit"
    max_text: int = 4000

    def __init__(self, spec: ChannelSpec, http: httpx.AsyncClient, settings: Settings) -> None:
        self.spec = spec
        self.http = http
        self.settings = settings
        self.base_url = (spec.api_base or self.default_api_base).rstrip("/")

    @classmethod
    def needs(cls, spec: ChannelSpec) -> tuple[str, ...]:
        """The spec fields this channel must have set."""
        return cls.required

    # ---- inbound -------------------------------------------------------------

    def verify(self, delivery: Delivery) -> None:
        """Raise UNAUTHENTICATED unless the platform (and only it) sent this."""
        raise refused(f"Channel {self.spec.name} takes no webhook deliveries.")

    def parse(self, delivery: Delivery) -> InboundMessage | Acknowledge:
        """The delivery's message, or what to answer when there is nothing to do."""
        raise refused(f"Channel {self.spec.name} takes no webhook deliveries.")

    def received(self, message: InboundMessage) -> Acknowledge:
        """What the platform is answered once its message was taken."""
        return Acknowledge({"ok": True})

    def listens(self) -> bool:
        """True when messages arrive on a connection this service holds (a long
        poll, a WebSocket, a sync loop): one replica of the cluster holds it."""
        return False

    async def listen(self, position: str, deliver: Deliver) -> None:
        """Hold the connection from `position` (empty: from now), handing over each
        message; return when `deliver` says the lease is lost. Raise
        PlatformCallFailed when the platform is away (the caller tries again)."""
        raise NotImplementedError

    # ---- outbound ------------------------------------------------------------

    @abstractmethod
    async def post(self, message: InboundMessage, text: str) -> str:
        """Post a reply to the message's chat; returns the reply's handle for edits."""

    async def edit(self, message: InboundMessage, handle: str, text: str) -> None:
        """Replace the text of a reply posted before (reply_style "edit")."""
        raise NotImplementedError

    @abstractmethod
    async def check(self) -> str:
        """Ask the platform who we are (credentials accepted); raise PlatformCallFailed."""

    def retry_after(self, response: httpx.Response, answer: dict[str, Any]) -> float | None:
        """The seconds the platform asks us to wait before trying again, when it
        refused the call for its rate; None when it did not. Adapters add the
        platform's own signals (an error code in a 200 answer)."""
        if response.status_code == 429:
            return retry_after_header(response) or 0.0
        return None

    def error_of(self, answer: dict[str, Any]) -> str:
        """The platform's error in an answer, for a log line (never a secret)."""
        for key in ("error", "msg", "message", "errmsg", "errcode", "code", "description"):
            if answer.get(key):
                return str(answer[key])[:200]
        return ""

    async def _call(
        self,
        url: str,
        what: str,
        *,
        method: str = "POST",
        attempts: int = 0,
        answer_errors: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One API call, tried again while the platform limits our rate or fails
        (5xx, no answer), waiting as it asks or backing off; 4xx fails at once
        (or, with `answer_errors`, its JSON answer is returned for the caller to read)."""
        attempts = attempts or self.settings.channel_retry_attempts
        for attempt in range(attempts):
            wait: float | None = None
            try:
                response = await self.http.request(method, url, **kwargs)
            except httpx.HTTPError as error:
                failure = type(error).__name__
            else:
                try:
                    found = response.json()
                except ValueError:
                    found = {}
                answer = found if isinstance(found, dict) else {}
                wait = self.retry_after(response, answer)
                if wait is None and response.status_code < 500:
                    if response.status_code >= 400 and not (answer_errors and answer):
                        detail = self.error_of(answer)
                        raise PlatformCallFailed(
                            f"{self.platform} {what}: HTTP {response.status_code} {detail}".strip()
                        )
                    return answer
                failure = "rate limited" if wait is not None else f"HTTP {response.status_code}"
            if attempt + 1 >= attempts:
                raise PlatformCallFailed(f"{self.platform} {what}: {failure} ({attempts} tries)")
            first = self.settings.channel_retry_first_seconds
            delay = min(self.settings.channel_retry_max_seconds, wait or first * 2**attempt)
            PLATFORM_RETRIES.labels(self.platform, failure).inc()
            log.info("%s %s: %s; again in %.2f s", self.platform, what, failure, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")
