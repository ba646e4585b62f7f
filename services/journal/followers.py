"""Live fan-out from Redis on one journal replica: per run that local subscribers
follow, one task doing blocking `XREAD`s on the run's stream and offering each
entry to their (bounded, never blocking) buffers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from waybill.services.journal.redis_log import END_ID, UNREACHABLE, RedisLog, entry_id, event_of
from waybill.services.journal.stats import STATS
from waybill.services.journal.subscriber import Subscriber

log = logging.getLogger("waybill.journal")


@dataclass(eq=False)
class Follower:
    run_id: str
    cursor: bytes  # the last entry read
    subscribers: set[Subscriber] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class Followers:
    def __init__(self, redis_log: RedisLog, batch_max: int) -> None:
        self.redis_log = redis_log
        self.batch_max = batch_max
        self.runs: dict[str, Follower] = {}
        self.redis_down = False  # the last read failed (logged once, not per reader)

    def attach(self, run_id: str, subscriber: Subscriber, from_seq: int) -> None:
        """Deliver the run's entries from `from_seq` on (or wherever the run's
        follower already is: the subscriber reads any hole from the log)."""
        follower = self.runs.get(run_id)
        if follower is None:
            follower = Follower(run_id, entry_id(from_seq - 1).encode())
            self.runs[run_id] = follower
            follower.task = asyncio.create_task(self._follow(follower), name=f"follow-{run_id}")
        follower.subscribers.add(subscriber)

    def detach(self, run_id: str, subscriber: Subscriber) -> None:
        follower = self.runs.get(run_id)
        if follower is None:
            return
        follower.subscribers.discard(subscriber)
        if not follower.subscribers:
            self._retire(follower)
            if follower.task is not None:
                follower.task.cancel()

    async def stop(self) -> None:
        tasks = [f.task for f in self.runs.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _retire(self, follower: Follower) -> None:
        if self.runs.get(follower.run_id) is follower:
            del self.runs[follower.run_id]

    async def _follow(self, follower: Follower) -> None:
        try:
            while True:
                entries = await self.redis_log.read_live(
                    follower.run_id, follower.cursor, self.batch_max
                )
                if self.redis_down:
                    log.info("Redis is back: live readers follow it again")
                    self.redis_down = False
                events, ended = [], False
                for entry, fields in entries:
                    if entry == END_ID:
                        ended = True
                        break
                    events.append(event_of(follower.run_id, entry, fields))
                    follower.cursor = entry
                for subscriber in list(follower.subscribers):
                    if events:
                        subscriber.offer(events)
                    if ended:
                        subscriber.end()
                if ended:
                    return
        except UNREACHABLE as error:
            STATS.redis_errors += 1
            if not self.redis_down:
                log.warning("lost Redis (%s): live readers fall back to SQL", error)
                self.redis_down = True
            for subscriber in list(follower.subscribers):
                subscriber.lose()
        except Exception:
            log.exception("run %s: following Redis failed", follower.run_id)
            for subscriber in list(follower.subscribers):
                subscriber.lose()
        finally:
            self._retire(follower)
