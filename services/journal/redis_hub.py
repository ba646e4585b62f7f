"""The journal on Redis: any number of replicas, any of them serving any run.

See the design in `hub.py`. Numbering lives in Redis (`redis_log.py`), the live
fan-out too (`followers.py`); each replica writes what it numbered to SQL right
behind (`writer.py`), and reads fall back to SQL whenever Redis cannot answer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from waybill.common.errors import ServiceError, busy
from waybill.services.journal.followers import Followers
from waybill.services.journal.hub import HubConfig, gone_error
from waybill.services.journal.redis_log import UNREACHABLE, Appended, RedisLog
from waybill.services.journal.replica_store import ReplicaStore
from waybill.services.journal.replicas import Replicas
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import JournalStore, StoredEvent
from waybill.services.journal.subscriber import Page, Subscriber, subscription
from waybill.services.journal.writer import WriteBehind

log = logging.getLogger("waybill.journal")
T = TypeVar("T")


@dataclass(frozen=True)
class RedisConfig:
    url: str
    prefix: str = "waybill:journal"
    ttl_seconds: float = 600.0  # an ended run's Redis copy is kept this long
    retry_seconds: float = 15.0  # appends and closes retry an unreachable Redis this long
    block_seconds: float = 5.0
    connections: int = 1000  # per pool, at most (see redis_log.py)
    heartbeat_seconds: float = 1.0  # each replica's beat in `journal_replicas`
    dead_seconds: float = 5.0  # a replica whose beat stopped this long is evicted


@dataclass
class LocalRun:
    """What this replica knows of a run it appended to: enough to re-seed Redis."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    epoch: int = 0
    next_seq: int = 0  # one past the last number this replica was given
    idle_since: float = 0.0


class RedisJournalHub:
    def __init__(self, store: JournalStore, config: HubConfig, redis: RedisConfig) -> None:
        self.store = store
        self.config = config
        self.redis = redis
        self.redis_log = RedisLog(redis.url, redis.prefix, redis.block_seconds, redis.connections)
        self.followers = Followers(self.redis_log, config.batch_max)
        self.writer = WriteBehind(store, config.batch_max, linger_seconds=config.write_linger)
        self.local: dict[str, LocalRun] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.replicas = Replicas(
            ReplicaStore(store.engine),
            self.redis_log,
            self.writer.wait_all_durable,
            heartbeat_seconds=redis.heartbeat_seconds,
            dead_seconds=redis.dead_seconds,
            wait_seconds=max(redis.retry_seconds, 2 * redis.dead_seconds),
        )
        self.writer.fence = self.replicas.replica_id
        self.writer.on_fenced = self._evicted

    def start(self) -> None:
        self.writer.start()
        self._spawn(self._evict_idle_forever())
        self._spawn(self.replicas.heartbeat_forever())

    async def stop(self) -> None:
        for run_id in list(self.local):
            await self.writer.wait_durable(run_id)
        self.writer.stop()
        try:
            await self.replicas.leave()
        except Exception as error:  # its row stays; a later seed evicts it
            log.warning("journal replica could not leave: %s", error)
        for task in list(self._background):
            task.cancel()
        await self.followers.stop()
        await self.redis_log.aclose()

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- writing ---------------------------------------------------------------

    async def append(self, run_id: str, epoch: int, items: list[tuple[str, bytes]]) -> int:
        local = self._local(run_id)
        async with local.lock:  # one batch at a time: a retry must find its own token
            token = uuid.uuid4().hex
            while True:
                reply = await self._retrying(
                    "append", lambda: self.redis_log.append(run_id, epoch, token, items)
                )
                if reply.status != "seed":
                    break
                await self._seed(run_id, local)
            self._refuse(run_id, epoch, reply)
            fresh = [
                StoredEvent(run_id, reply.first + i, name, data)
                for i, (name, data) in enumerate(items)
            ]
            local.epoch = max(local.epoch, epoch)
            local.next_seq = max(local.next_seq, reply.last + 1)
            self.writer.put(fresh, epoch)
            STATS.events_appended += len(fresh)
            return reply.last

    def _refuse(self, run_id: str, epoch: int, reply: Appended) -> None:
        if reply.status == "stale":
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {reply.current_epoch})")
        if reply.status == "closed":
            raise busy(f"run {run_id}: the log is closed")
        if reply.status == "forgotten":
            raise busy(f"run {run_id} was deleted with its thread")

    def _evicted(self) -> None:
        """This replica's writes were fenced: what it numbered is not its to go on from."""
        for local in self.local.values():
            local.next_seq = 0  # its numbers may be lost: SQL says where runs stand
        self.replicas.evicted()

    async def _seed(self, run_id: str, local: LocalRun) -> None:
        """Start the run's numbering in Redis: a new run, or Redis lost its state.
        It continues after the SQL log, once every replica's pending writes from
        before Redis lost its state are in it (replicas.py)."""
        incarnation = await self._retrying("seed", self.redis_log.incarnation)
        await self.replicas.safe_to_seed(incarnation)
        await self.writer.wait_durable(run_id)
        if await self.store.gone(run_id) is not None:
            raise busy(f"run {run_id} was deleted with its thread")
        head = await self.store.head(run_id)
        if head is not None and head.closed:
            raise busy(f"run {run_id}: the log is closed")
        next_seq = max(head.next_seq if head else 0, local.next_seq)
        epoch = max(head.epoch if head else 0, local.epoch)
        seeded = await self._retrying(
            "seed", lambda: self.redis_log.seed(run_id, next_seq, epoch, incarnation)
        )
        if seeded == 1:
            STATS.redis_seeds += 1
            if next_seq > 0:
                log.warning("run %s: Redis had lost it; numbering resumes at %d", run_id, next_seq)

    async def flush(self, run_id: str) -> int:
        durable = await self.writer.wait_durable(run_id)
        local = self.local.get(run_id)
        try:
            next_seq = await self.redis_log.next_seq(run_id)
        except UNREACHABLE:
            STATS.redis_errors += 1
            next_seq = None
        target = (local.next_seq if local else 0) - 1 if next_seq is None else next_seq - 1
        first_here = self.writer.run(run_id).first
        if target <= durable and first_here == 0:
            return durable
        # Some of the run's events came through other replicas: wait for SQL to
        # hold them, copying them from Redis if their replica's write never came
        # (it crashed before its write-behind).
        repaired = False
        while await self.store.stored_through(run_id, target) < target + 1:
            if await self.store.gone(run_id) is not None:
                return target
            await asyncio.sleep(self.config.poll_seconds)
            if not repaired:
                repaired = await self._copy_from_redis(run_id, target)
        return target

    async def _copy_from_redis(self, run_id: str, target: int) -> bool:
        """Write the run's events 0..target that Redis holds to SQL (rows already
        there are left alone). False when Redis could not be read."""
        epoch = self.local[run_id].epoch if run_id in self.local else 0
        next_seq = 0
        try:
            while next_seq <= target:
                page = await self.redis_log.page(run_id, next_seq, self.config.batch_max)
                events = [e for e in page.events if e.seq <= target]
                if not events:
                    break
                await self.store.write(events, {run_id: epoch})
                next_seq = events[-1].seq + 1
        except UNREACHABLE:
            STATS.redis_errors += 1
            return False
        STATS.events_repaired += next_seq
        log.warning("run %s: copied events 0..%d from Redis to SQL", run_id, next_seq - 1)
        return True

    async def close(self, run_id: str, epoch: int) -> bool:
        """Close the run's log; False when SQL had it closed already (or deleted).
        Redis is told again either way (a close whose Redis half never came)."""
        keep = min(self.redis.ttl_seconds, self.config.retention_seconds)
        try:  # fenced first: no append gets in behind the flush
            status = await self._retrying(
                "close", lambda: self.redis_log.close(run_id, epoch, keep, end=False)
            )
        except ServiceError:
            # SQL is the truth: close it there; Redis learns when it is back.
            status = "unreachable"
            self._spawn(self._close_in_redis_later(run_id, epoch, keep))
        if status == "stale":
            raise busy(f"run {run_id}: epoch {epoch} is stale")
        if status == "forgotten":
            return False
        if status == "again" and await self.store.is_closed(run_id):
            await self._end_in_redis(run_id, epoch, keep)  # a close cut short after SQL
            return False  # closed before (the runner, then admission making sure)
        await self.flush(run_id)
        if await self.store.gone(run_id) is not None:
            return False  # deleted (after its run ended) before its runner closed it
        # SQL before the readers: whoever saw the end (a `join`) finds the log
        # closed everywhere, e.g. a late record refused.
        closed = await self.store.mark_closed(run_id, epoch)
        if status != "unreachable":
            await self._end_in_redis(run_id, epoch, keep)
        self._idle(run_id)
        return closed

    async def _end_in_redis(self, run_id: str, epoch: int, keep: float) -> None:
        """The end marker, for live readers (a lost Redis gets it when it is back)."""
        try:
            await self._retrying("close", lambda: self.redis_log.close(run_id, epoch, keep))
        except ServiceError:
            self._spawn(self._close_in_redis_later(run_id, epoch, keep))

    async def _close_in_redis_later(self, run_id: str, epoch: int, keep: float) -> None:
        while True:
            await asyncio.sleep(self.redis.retry_seconds)
            try:
                await self.redis_log.close(run_id, epoch, keep)
                return
            except UNREACHABLE:
                STATS.redis_errors += 1

    async def forget(self, run_ids: list[str]) -> int:
        count = await self.store.forget(run_ids)
        for run_id in run_ids:
            await self.writer.drop(run_id)
            try:
                await self.redis_log.forget(run_id, self.redis.ttl_seconds)
            except UNREACHABLE:  # the SQL tombstone still ends readers and refuses appends
                STATS.redis_errors += 1
                log.warning("run %s forgotten in SQL only: Redis unreachable", run_id)
        return count

    async def expired(self, run_ids: list[str]) -> None:
        try:
            await self.redis_log.delete(run_ids)
        except UNREACHABLE:
            STATS.redis_errors += 1  # their keys expire on their own
        for run_id in run_ids:
            self.writer.release(run_id)

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Retry while Redis is unreachable (a restart), up to `retry_seconds`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.redis.retry_seconds
        delay = 0.05
        while True:
            try:
                return await attempt()
            except UNREACHABLE as error:
                STATS.redis_errors += 1
                if loop.time() + delay > deadline:
                    log.warning("journal %s: Redis unreachable: %s", what, error)
                    # The client hears what failed; Redis's address stays in the log.
                    raise ServiceError(
                        grpc.StatusCode.UNAVAILABLE, f"journal {what}: Redis unreachable"
                    ) from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    # ---- local bookkeeping -----------------------------------------------------

    def _local(self, run_id: str) -> LocalRun:
        local = self.local.get(run_id)
        if local is None:
            local = self.local[run_id] = LocalRun()
        local.idle_since = asyncio.get_running_loop().time()
        return local

    def _idle(self, run_id: str) -> None:
        local = self.local.get(run_id)
        if local is not None:
            local.idle_since = 0.0  # ended here: evicted at the next pass

    async def _evict_idle_forever(self) -> None:
        """Drop what this replica remembers of runs it no longer appends to, once
        their writes are stored (SQL then knows everything a re-seed needs)."""
        while True:
            await asyncio.sleep(self.config.evict_after)
            cutoff = asyncio.get_running_loop().time() - self.config.evict_after
            for run_id, local in list(self.local.items()):
                pending = self.writer.runs.get(run_id)
                settled = pending is None or pending.settled
                if local.idle_since < cutoff and settled and not local.lock.locked():
                    del self.local[run_id]
                    self.writer.release(run_id)

    # ---- reading ---------------------------------------------------------------

    async def readable(self, run_id: str) -> None:
        gone = await self.store.gone(run_id)
        if gone is not None:
            raise gone_error(run_id, gone, self.config.retention_seconds)

    def subscribe(
        self, run_id: str, from_seq: int, live_only: bool
    ) -> AsyncIterator[list[StoredEvent] | None]:
        """Yield batches of events from `from_seq`, then live ones, then END once closed."""
        return subscription(self, run_id, from_seq, live_only, self.config.following())

    # LogSource: what `follow` reads and attaches to.

    async def read(self, run_id: str, from_seq: int, limit: int) -> Page:
        try:
            found = await self.redis_log.page(run_id, from_seq, limit)
        except UNREACHABLE:
            STATS.redis_errors += 1
            return await self._sql_page(run_id, from_seq, limit)
        if found.forgotten:
            return Page([], closed=True)
        if (
            not found.known
            or found.next_seq is None
            or (found.closed and not found.ended and not found.events)
        ):
            # Lost (a restart) or expired in Redis, or not started yet: SQL has it. (A
            # close after Redis lost the run leaves its end marker and no numbering:
            # Redis holds none of its events then.)
            return await self._sql_page(run_id, from_seq, limit)
        if found.events and found.events[0].seq > from_seq:
            # Redis starts later (re-seeded after a restart): the rest is in SQL.
            page = await self._sql_page(run_id, from_seq, found.events[0].seq - from_seq)
            return Page(page.events, behind=not page.events)
        return Page(found.events, closed=found.ended)

    async def _sql_page(self, run_id: str, from_seq: int, limit: int) -> Page:
        page = await self.store.page(run_id, from_seq, limit)
        return Page(page.events, closed=page.closed)

    async def head(self, run_id: str) -> int:
        try:
            next_seq = await self.redis_log.next_seq(run_id)
        except UNREACHABLE:
            STATS.redis_errors += 1
            next_seq = None
        if next_seq is not None:
            return next_seq
        head = await self.store.head(run_id)
        return head.next_seq if head is not None else 0

    async def attach(self, run_id: str, subscriber: Subscriber, from_seq: int) -> None:
        self.followers.attach(run_id, subscriber, from_seq)

    def detach(self, run_id: str, subscriber: Subscriber) -> None:
        self.followers.detach(run_id, subscriber)
