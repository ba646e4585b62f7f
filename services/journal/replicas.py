"""The journal replicas on one Redis know each other (SQL `journal_replicas`), so that
a run's numbering cannot fork when Redis loses its state.

The fork it prevents: replica A numbered events 10..19 of a run (Redis holds them,
subscribers saw them) and has not stored them in SQL yet (its write-behind); Redis
restarts; the run's takeover appends through replica C, which finds no numbering
state and would re-seed it from the SQL maximum, 10: two events numbered 10.

So a re-seed waits behind a barrier. Redis carries an *incarnation* (a random
token, made afresh when missing: a Redis that lost its state has none). Each
replica heartbeats into its `journal_replicas` row; when it sees a new incarnation
it first stores everything it numbered before (its write-behind settled), then
records the incarnation in its row. A replica may seed a run's numbering under an
incarnation only once every member has recorded it: then SQL holds every number
handed out before Redis lost them, and the seed continues after the highest.

A member whose heartbeat count has not moved for `dead_seconds` (watched by the
replica waiting) is evicted. Its batch writes carry its id as a fence
(`JournalStore.write`), so whatever it still held is never stored over numbers
handed out since; it drops it, forgets what it numbered and joins again. What a
dead replica held unstored while Redis lost its state too is lost (a double
failure: neither copy survived).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import grpc

from waybill.common.errors import ServiceError
from waybill.services.journal.redis_log import UNREACHABLE, RedisLog
from waybill.services.journal.replica_store import Member, ReplicaStore
from waybill.services.journal.stats import STATS

log = logging.getLogger("waybill.journal")


class Replicas:
    def __init__(
        self,
        store: ReplicaStore,
        redis_log: RedisLog,
        settle: Callable[[], Awaitable[None]],
        heartbeat_seconds: float,
        dead_seconds: float,
        wait_seconds: float,
    ) -> None:
        self.replica_id = str(uuid.uuid4())
        self.store = store
        self.redis_log = redis_log
        self.settle_writes = settle  # waits until everything this replica numbered is stored
        self.heartbeat_seconds = heartbeat_seconds
        self.dead_seconds = dead_seconds
        self.wait_seconds = wait_seconds  # how long a seed waits for the others
        self.joined = False
        self.settled_for: str | None = None  # all numbered before this incarnation is stored
        self.safe_for: str | None = None  # every member settled for it: seeding is safe
        self._settling = asyncio.Lock()
        self._beating = asyncio.Lock()

    async def heartbeat_forever(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception as error:  # SQL or Redis restarting: beat again soon
                log.warning("journal heartbeat failed: %s", error)
            await asyncio.sleep(self.heartbeat_seconds)

    async def beat(self) -> None:
        async with self._beating:
            await self._beat()

    async def _beat(self) -> None:
        if not self.joined:
            await self.store.join(self.replica_id)
            self.joined = True
        try:
            await self.settle(await self.redis_log.incarnation())
        except UNREACHABLE:
            STATS.redis_errors += 1  # still alive: the beat below says so
        if not await self.store.heartbeat(self.replica_id, self.settled_for):
            self.evicted()

    def evicted(self) -> None:
        """Another replica took this one for dead; it joins again on the next beat."""
        if self.joined:
            log.error("journal replica %s was evicted: it joins again", self.replica_id)
        self.joined = False
        self.settled_for = self.safe_for = None

    async def settle(self, incarnation: str) -> None:
        """Store everything numbered under earlier incarnations, then say so."""
        if incarnation == self.settled_for:
            return
        async with self._settling:
            if incarnation == self.settled_for:
                return
            await self.settle_writes()
            if self.joined and not await self.store.heartbeat(self.replica_id, incarnation):
                self.evicted()
                return
            if self.settled_for is not None:
                log.warning("Redis lost its state: this replica's events are all stored")
            self.settled_for = incarnation

    async def safe_to_seed(self, incarnation: str) -> None:
        """Return once every live member stored what it numbered before `incarnation`;
        UNAVAILABLE if that takes longer than `wait_seconds`."""
        if incarnation == self.safe_for:
            return
        if not self.joined:
            await self.beat()
        await self.settle(incarnation)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        watched: dict[str, tuple[int, float]] = {}  # member -> (beats, since when)
        while True:
            behind = [
                member
                for member in await self.store.members()
                if member.replica_id != self.replica_id and member.incarnation != incarnation
            ]
            if not behind:
                self.safe_for = incarnation
                return
            for member in behind:
                await self._evict_if_dead(member, watched, loop.time())
            if loop.time() > deadline:
                raise ServiceError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"journal numbering: {len(behind)} journal replica(s) have not stored "
                    "their events since Redis lost its state",
                )
            await asyncio.sleep(min(self.heartbeat_seconds, 0.1))

    async def _evict_if_dead(
        self, member: Member, watched: dict[str, tuple[int, float]], now: float
    ) -> None:
        beats, since = watched.get(member.replica_id, (-1, now))
        if beats != member.beats:
            watched[member.replica_id] = (member.beats, now)
        elif now - since >= self.dead_seconds and await self.store.evict(
            member.replica_id, member.beats
        ):
            STATS.replicas_evicted += 1
            log.warning(
                "journal replica %s did not beat for %.1fs: evicted",
                member.replica_id,
                self.dead_seconds,
            )

    async def leave(self) -> None:
        if self.joined:
            await self.store.leave(self.replica_id)
