"""Streaming a run's answer back to the chat it came from.

The reply follows the run's journal (the same log its SSE stream is served
from): the first text is posted, later text edits that post at most every
`WAYBILL_CHANNEL_EDIT_SECONDS`, and the last edit carries the whole answer and
how the run ended. Platforms that take no edits get the final answer once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from waybill.common import codec
from waybill.common.journal_reading import journal_batches
from waybill.services.delivery.channels.adapter import ChannelAdapter, InboundMessage, cut
from waybill.v1 import common_pb2, journal_pb2, journal_pb2_grpc

log = logging.getLogger("waybill.channels")

ENDINGS: dict[int, str] = {
    common_pb2.RUN_STATUS_INTERRUPTED: "(stopped)",
    common_pb2.RUN_STATUS_TIMEOUT: "(took too long and was stopped)",
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


@dataclass
class AnswerText:
    """The model's answer so far: the text of its latest message."""

    by_message: dict[str, str] = field(default_factory=dict)
    latest: str = ""
    error: str = ""

    def take(self, event: journal_pb2.RunEvent) -> None:
        if event.event == "error":
            found = codec.loads(event.data, {})
            self.error = str(found.get("message") or found.get("error") or "error")
            return
        if event.event != "messages":  # `messages-tuple` frames of the root graph
            return
        found = codec.loads(event.data, [])
        chunk = found[0] if isinstance(found, list) and found else {}
        if not isinstance(chunk, dict) or chunk.get("type") not in ("AIMessageChunk", "ai"):
            return
        text = _text_of(chunk.get("content"))
        if not text:
            return
        message_id = str(chunk.get("id") or "")
        self.by_message[message_id] = self.by_message.get(message_id, "") + text
        self.latest = message_id

    @property
    def text(self) -> str:
        return self.by_message.get(self.latest, "")

    def final(self, status: int) -> str:
        if self.error:
            return f"{self.text}\n\nSorry, that failed: {self.error}".strip()
        ending = ENDINGS.get(status)
        if ending:
            return f"{self.text} {ending}".strip()
        return self.text.strip() or "(no answer)"


@dataclass
class StreamedReply:
    """One post in the chat, edited as the answer grows."""

    adapter: ChannelAdapter
    message: InboundMessage
    edit_seconds: float
    handle: str | None = None  # set when resuming an answer another replica posted
    on_posted: Callable[[str], Awaitable[None]] | None = None
    shown: str = ""
    shown_at: float = -math.inf

    async def show(self, text: str, final: bool = False) -> None:
        text = text.rstrip()  # platforms trim it anyway; an edit must change something
        if text == self.shown or not text:
            return  # Telegram refuses an edit that changes nothing
        if not final and time.monotonic() - self.shown_at < self.edit_seconds:
            return
        if self.handle is None:
            self.handle = await self.adapter.post(self.message, text)
            if self.on_posted is not None:
                await self.on_posted(self.handle)
        elif self.adapter.reply_style == "final":
            return  # posted once already (by a replica that died before noting it done)
        else:
            await self.adapter.edit(self.message, self.handle, text)
        self.shown, self.shown_at = text, time.monotonic()


@dataclass
class ChunkedReply:
    """New posts as the answer grows, each at most the platform's message size and
    cut between words; the handle says how far the current message was posted
    ("<message id>:<characters>"), so a resumed answer skips what was shown."""

    adapter: ChannelAdapter
    message: InboundMessage
    handle: str | None = None
    on_posted: Callable[[str], Awaitable[None]] | None = None

    async def show(self, text: str, part: str, final: bool = False) -> None:
        shown_part, _, count = (self.handle or "").rpartition(":")
        sent = int(count) if shown_part == part and count.isdigit() else 0
        limit = self.adapter.max_text
        while len(text) - sent > (0 if final else limit):
            piece = text[sent : sent + limit]
            if len(text) - sent > limit and " " in piece.strip():
                piece = piece[: piece.rstrip().rindex(" ") + 1]  # whole words only
            if piece.strip():
                await self.adapter.post(self.message, cut(piece.strip(), limit))
            sent += len(piece)
            self.handle = f"{part}:{sent}"
            if self.on_posted is not None:
                await self.on_posted(self.handle)


async def stream_reply(
    adapter: ChannelAdapter,
    message: InboundMessage,
    run_id: str,
    journal: journal_pb2_grpc.JournalStub,
    run_status: Callable[[], Awaitable[int]],
    edit_seconds: float,
    handle: str | None = None,
    on_posted: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """Follow the run to its end, showing its answer in the chat as it grows.
    `run_status()` reads the run's status once its log is complete. A resumed
    answer replays the run's log from the start and edits its earlier post."""
    answer = AnswerText()
    if adapter.reply_style == "chunks":
        chunks = ChunkedReply(adapter, message, handle, on_posted)
        async for batch in journal_batches(journal, run_id):
            for event in batch:
                answer.take(event)
            await chunks.show(answer.text, answer.latest)
        await chunks.show(answer.final(await run_status()), answer.latest, final=True)
        return
    reply = StreamedReply(adapter, message, edit_seconds, handle, on_posted)
    async for batch in journal_batches(journal, run_id):
        for event in batch:
            answer.take(event)
            # Event by event: the first words are posted as soon as they exist,
            # even when the rest arrived with them; the throttle spaces the edits.
            if adapter.reply_style == "edit":
                await reply.show(answer.text)
    await reply.show(answer.final(await run_status()), final=True)
