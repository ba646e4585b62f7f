"""What channels keep in SQL: inbound dedupe, conversation -> thread, leader leases.

Every fact is shared by all delivery replicas through the database: an event
taken by one replica is a duplicate for every other, and a lease held by one is
held for the cluster.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import (
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common import codec

# This replica, as the holder of leases (polling, answers being streamed).
HOLDER = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

# Thread ids of channel conversations: uuid5(CHANNEL_THREADS, "<channel>:<conversation>").
CHANNEL_THREADS = uuid.UUID("0b5e3a52-63a4-5c1e-9d53-7a1f0c4e2b10")

metadata = MetaData()
channel_events = Table(
    "channel_events",
    metadata,
    Column("channel", String(64), primary_key=True),
    Column("event_id", String(255), primary_key=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("run_id", String(36), nullable=True),
)
channel_threads = Table(
    "channel_threads",
    metadata,
    Column("channel", String(64), primary_key=True),
    Column("conversation", String(255), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
channel_leases = Table(
    "channel_leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("position", Text, nullable=False),
)


channel_replies = Table(
    "channel_replies",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("thread_id", String(36), nullable=False),
    Column("channel", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("handle", String(128), nullable=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("channel_replies_expiry", "expires_at"),
)


@dataclass
class OwedReply:
    """An answer a chat is still owed: which run, for which message, and the
    platform's handle of the post once there is one."""

    run_id: str
    thread_id: str
    channel: str
    message: str  # the InboundMessage as JSON (ids and text; never a secret)
    handle: str | None


def thread_id_of(channel: str, conversation: str, generation: int) -> str:
    """The thread of a conversation: uuid5 of the platform's chat (and topic) id;
    each `/new` moves the conversation to the next generation's thread."""
    name = f"{channel}:{conversation}" + (f"#{generation}" if generation else "")
    return str(uuid.uuid5(CHANNEL_THREADS, name))


class ChannelStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    # ---- dedupe ----------------------------------------------------------------

    async def take_event(self, channel: str, event_id: str) -> bool:
        """True for the first delivery of an event, cluster-wide; False for a repeat."""
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    insert(channel_events).values(
                        channel=channel, event_id=event_id, received_at=codec.now_utc()
                    )
                )
        except IntegrityError:
            return False
        return True

    async def event_started(self, channel: str, event_id: str, run_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(channel_events)
                .where(channel_events.c.channel == channel, channel_events.c.event_id == event_id)
                .values(run_id=run_id)
            )

    async def release_event(self, channel: str, event_id: str) -> None:
        """Forget an event whose handling failed, so that the platform's retry is taken."""
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(channel_events).where(
                    channel_events.c.channel == channel, channel_events.c.event_id == event_id
                )
            )

    async def forget_events(self, older_than_seconds: float) -> int:
        """Forget the event ids taken before then; returns how many."""
        cutoff = codec.now_utc() - timedelta(seconds=older_than_seconds)
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(channel_events).where(channel_events.c.received_at < cutoff)
            )
        return int(gone.rowcount or 0)

    # ---- conversation -> thread ------------------------------------------------

    async def thread_of(self, channel: str, conversation: str) -> str:
        async with self.engine.connect() as conn:
            generation = (
                await conn.execute(
                    select(channel_threads.c.generation).where(
                        channel_threads.c.channel == channel,
                        channel_threads.c.conversation == conversation,
                    )
                )
            ).scalar()
        return thread_id_of(channel, conversation, int(generation or 0))

    async def next_thread(self, channel: str, conversation: str) -> str:
        """`/new`: the conversation moves on to a fresh thread."""
        match = and_(
            channel_threads.c.channel == channel, channel_threads.c.conversation == conversation
        )
        for _ in range(3):  # a concurrent first `/new` may insert the row under us
            async with self.engine.begin() as conn:
                moved = await conn.execute(
                    update(channel_threads)
                    .where(match)
                    .values(generation=channel_threads.c.generation + 1, updated_at=codec.now_utc())
                    .returning(channel_threads.c.generation)
                )
                generation = moved.scalar()
                if generation is not None:
                    return thread_id_of(channel, conversation, int(generation))
            try:
                async with self.engine.begin() as conn:
                    await conn.execute(
                        insert(channel_threads).values(
                            channel=channel,
                            conversation=conversation,
                            generation=1,
                            updated_at=codec.now_utc(),
                        )
                    )
                return thread_id_of(channel, conversation, 1)
            except IntegrityError:
                continue
        raise RuntimeError(f"could not move {channel}:{conversation} to a new thread")

    # ---- leader leases -----------------------------------------------------------

    async def hold_lease(self, name: str, holder: str, seconds: float) -> str | None:
        """Take or renew the lease `name` for `holder`; its position when held
        (empty at first), else None."""
        now = codec.now_utc()
        until = now + timedelta(seconds=seconds)
        mine_or_free = and_(
            channel_leases.c.name == name,
            or_(channel_leases.c.holder == holder, channel_leases.c.expires_at < now),
        )
        async with self.engine.begin() as conn:
            held = await conn.execute(
                update(channel_leases)
                .where(mine_or_free)
                .values(holder=holder, expires_at=until)
                .returning(channel_leases.c.position)
            )
            position = held.scalar()
        if position is not None:
            return str(position)
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    insert(channel_leases).values(
                        name=name, holder=holder, expires_at=until, position=""
                    )
                )
        except IntegrityError:
            return None  # someone else holds it
        return ""

    async def advance_lease(self, name: str, holder: str, position: str) -> bool:
        """Record progress; False when the lease was lost (write nothing more)."""
        async with self.engine.begin() as conn:
            moved = await conn.execute(
                update(channel_leases)
                .where(channel_leases.c.name == name, channel_leases.c.holder == holder)
                .values(position=position)
            )
        return bool(moved.rowcount)

    async def drop_lease(self, name: str, holder: str) -> None:
        """Let the lease go at once (a stopping leader); the position stays."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(channel_leases)
                .where(channel_leases.c.name == name, channel_leases.c.holder == holder)
                .values(expires_at=codec.now_utc())
            )

    # ---- answers owed --------------------------------------------------------------

    async def owe_reply(self, reply: OwedReply, holder: str, seconds: float) -> None:
        until = codec.now_utc() + timedelta(seconds=seconds)
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(channel_replies).values(**reply.__dict__, holder=holder, expires_at=until)
            )

    async def hold_reply(self, run_id: str, holder: str, seconds: float) -> bool:
        """Renew the lease on an answer being streamed; False when another replica took it."""
        until = codec.now_utc() + timedelta(seconds=seconds)
        async with self.engine.begin() as conn:
            held = await conn.execute(
                update(channel_replies)
                .where(channel_replies.c.run_id == run_id, channel_replies.c.holder == holder)
                .values(expires_at=until)
            )
        return bool(held.rowcount)

    async def reply_posted(self, run_id: str, holder: str, handle: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(channel_replies)
                .where(channel_replies.c.run_id == run_id, channel_replies.c.holder == holder)
                .values(handle=handle)
            )

    async def reply_done(self, run_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(channel_replies).where(channel_replies.c.run_id == run_id))

    async def adopt_replies(
        self, holder: str, seconds: float, limit: int = 20, skip: Collection[str] = ()
    ) -> list[OwedReply]:
        """Take over answers whose replica stopped renewing them (it died), but for
        the runs in `skip` (the caller is streaming them itself)."""
        now = codec.now_utc()
        lapsed = [channel_replies.c.expires_at < now]
        if skip:
            lapsed.append(channel_replies.c.run_id.not_in(list(skip)))
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(select(channel_replies.c.run_id).where(*lapsed).limit(limit))
            ).all()
        adopted = []
        for (run_id,) in rows:
            async with self.engine.begin() as conn:
                taken = await conn.execute(
                    update(channel_replies)
                    .where(channel_replies.c.run_id == run_id, channel_replies.c.expires_at < now)
                    .values(holder=holder, expires_at=now + timedelta(seconds=seconds))
                    .returning(*[channel_replies.c[f] for f in OwedReply.__dataclass_fields__])
                )
                row = taken.first()
            if row is not None:  # not adopted by another replica meanwhile
                adopted.append(OwedReply(**row._mapping))
        return adopted
