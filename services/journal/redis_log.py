"""A run's live log in Redis: a hash of its numbering state and a stream of its
events, changed only through the Lua scripts below (each runs atomically).

Keys (the `{run_id}` hash tag keeps a run's two on one Redis Cluster slot):
    <prefix>:{<run_id>}:meta    next, epoch, closed, forgotten, token, first, last
    <prefix>:{<run_id>}:events  entry `0-<seq+1>` = event <seq> (fields e, d);
                                entry `1-0` = the end marker (field end)
    <prefix>:incarnation        a random token made by the first replica to find it
                                missing: a new one means Redis lost its state (see
                                replicas.py); a seed checks it, so it is read beside a
                                run's keys (one Redis, not a Cluster)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from redis import asyncio as aioredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from waybill.services.journal.store import StoredEvent

END_ID = b"1-0"
# Failures worth retrying or falling back from: Redis is unreachable or restarting.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

# ARGV: epoch, token, then event name and data for each event.
APPEND = """
local meta, stream = KEYS[1], KEYS[2]
local m = redis.call('HMGET', meta,
  'next', 'epoch', 'closed', 'forgotten', 'token', 'first', 'last')
if m[1] == false then return {'seed'} end
if m[4] == '1' then return {'forgotten'} end
local epoch = tonumber(ARGV[1])
if m[2] and epoch < tonumber(m[2]) then return {'stale', m[2]} end
if m[5] == ARGV[2] then return {'ok', m[6], m[7]} end
if m[3] == '1' then return {'closed'} end
local next_seq = tonumber(m[1])
local first = next_seq
for i = 3, #ARGV, 2 do
  local id = '0-' .. string.format('%d', next_seq + 1)
  redis.call('XADD', stream, id, 'e', ARGV[i], 'd', ARGV[i + 1])
  next_seq = next_seq + 1
end
local last = next_seq - 1
redis.call('HSET', meta, 'next', string.format('%d', next_seq), 'epoch', ARGV[1],
  'token', ARGV[2], 'first', string.format('%d', first), 'last', string.format('%d', last))
return {'ok', string.format('%d', first), string.format('%d', last)}
"""

# Start a run's numbering at ARGV[1] (epoch floor ARGV[2]) unless it has already
# started; past whatever the stream still holds. Returns 1 when it started it, -1
# when Redis is no longer incarnation ARGV[3] (it lost its state again meanwhile).
SEED = """
local meta, stream = KEYS[1], KEYS[2]
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
if redis.call('HEXISTS', meta, 'next') == 1 then return 0 end
local next_seq = tonumber(ARGV[1])
local closed = '0'
local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
if #last > 0 then
  if last[1][1] == '1-0' then
    closed = '1'
  else
    local held = tonumber(string.match(last[1][1], '^0%-(%d+)$'))
    if held and held > next_seq then next_seq = held end
  end
end
redis.call('HSET', meta, 'next', string.format('%d', next_seq), 'closed', closed)
if redis.call('HEXISTS', meta, 'epoch') == 0 then redis.call('HSET', meta, 'epoch', ARGV[2]) end
return 1
"""

# This Redis's incarnation, made (ARGV[1]) if it has none: a Redis without it has
# lost (or never had) the state of every run.
INCARNATION = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

# ARGV: epoch, milliseconds to keep the keys, whether to end it ('1') or only
# fence it ('0'). Fencing refuses later appends; ending adds the end marker (live
# readers stop there) and lets both keys expire. A close fences, stores the
# close in SQL, then ends: a reader told the end finds the log closed in SQL.
# 'again' when it was closed (fenced) already.
CLOSE = """
local meta, stream = KEYS[1], KEYS[2]
local m = redis.call('HMGET', meta, 'epoch', 'forgotten', 'closed')
if m[2] == '1' then return 'forgotten' end
if m[1] and tonumber(ARGV[1]) < tonumber(m[1]) then return 'stale' end
redis.call('HSET', meta, 'closed', '1', 'epoch', ARGV[1])
if ARGV[3] == '1' then
  local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if #last == 0 or last[1][1] ~= '1-0' then redis.call('XADD', stream, '1-0', 'end', 'closed') end
  redis.call('PEXPIRE', meta, ARGV[2])
  redis.call('PEXPIRE', stream, ARGV[2])
end
if m[3] == '1' then return 'again' end
return 'ok'
"""

# ARGV: milliseconds to keep the tombstone. Deletes the events, ends live readers.
FORGET = """
local meta, stream = KEYS[1], KEYS[2]
redis.call('HSET', meta, 'forgotten', '1', 'closed', '1')
redis.call('XTRIM', stream, 'MINID', '1-0')
local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
if #last == 0 or last[1][1] ~= '1-0' then redis.call('XADD', stream, '1-0', 'end', 'forgotten') end
redis.call('PEXPIRE', meta, ARGV[1])
redis.call('PEXPIRE', stream, ARGV[1])
return 'ok'
"""


def entry_id(seq: int) -> str:
    return f"0-{seq + 1}"


def seq_of(entry: bytes) -> int:
    return int(entry.partition(b"-")[2]) - 1


@dataclass(frozen=True)
class Appended:
    status: str  # ok | seed | stale | closed | forgotten
    first: int = -1
    last: int = -1
    current_epoch: int = 0  # with `stale`


@dataclass(frozen=True)
class RedisPage:
    known: bool  # Redis holds the run's numbering state
    next_seq: int | None
    closed: bool
    forgotten: bool
    events: list[StoredEvent]
    ended: bool  # the end marker was read


def _client(url: str, connections: int, socket_timeout: float) -> aioredis.Redis:
    """A client whose pool, when all `connections` are in use, makes the next
    caller wait for one (up to `socket_timeout`). redis-py's default pool raises
    "Too many connections" at once instead: the hub took that for Redis being
    down, and sent every live reader to poll SQL, exhausting its pool in turn."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=connections,
        timeout=socket_timeout,
        socket_connect_timeout=2,
        socket_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis.from_pool(pool)  # closed with the client


class RedisLog:
    def __init__(
        self, url: str, prefix: str, block_seconds: float, connections: int = 1000
    ) -> None:
        self.prefix = prefix
        # Commands give up after a few seconds; blocking reads wait longer than they
        # block. The hub decides about retries (an append's token makes them safe).
        self.client = _client(url, connections, socket_timeout=5)
        self.blocking = _client(url, connections, socket_timeout=block_seconds + 5)
        self.block_ms = max(1, int(block_seconds * 1000))
        self._append = self.client.register_script(APPEND)
        self._seed = self.client.register_script(SEED)
        self._close = self.client.register_script(CLOSE)
        self._forget = self.client.register_script(FORGET)
        self._incarnation = self.client.register_script(INCARNATION)
        self.incarnation_key = f"{prefix}:incarnation"

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.blocking.aclose()

    def keys(self, run_id: str) -> list[str]:
        return [f"{self.prefix}:{{{run_id}}}:meta", f"{self.prefix}:{{{run_id}}}:events"]

    async def append(
        self, run_id: str, epoch: int, token: str, items: list[tuple[str, bytes]]
    ) -> Appended:
        args: list[Any] = [epoch, token]
        for name, data in items:
            args += [name, data]
        reply = await self._append(keys=self.keys(run_id), args=args)
        status = reply[0].decode()
        if status == "ok":
            return Appended(status, int(reply[1]), int(reply[2]))
        if status == "stale":
            return Appended(status, current_epoch=int(reply[1]))
        return Appended(status)

    async def incarnation(self) -> str:
        reply = await self._incarnation(keys=[self.incarnation_key], args=[uuid.uuid4().hex])
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    async def seed(self, run_id: str, next_seq: int, epoch: int, incarnation: str) -> int:
        """1: seeded; 0: seeded already; -1: Redis is no longer `incarnation`."""
        keys = [*self.keys(run_id), self.incarnation_key]
        return int(await self._seed(keys=keys, args=[next_seq, epoch, incarnation]))

    async def close(self, run_id: str, epoch: int, keep_seconds: float, end: bool = True) -> str:
        """Fence the run's log (no append gets in) and, with `end`, end it."""
        args = [epoch, _ms(keep_seconds), "1" if end else "0"]
        reply = await self._close(keys=self.keys(run_id), args=args)
        return str(reply.decode() if isinstance(reply, bytes) else reply)

    async def forget(self, run_id: str, keep_seconds: float) -> None:
        await self._forget(keys=self.keys(run_id), args=[_ms(keep_seconds)])

    async def delete(self, run_ids: list[str]) -> None:
        if run_ids:
            await self.client.delete(*[key for run_id in run_ids for key in self.keys(run_id)])

    async def next_seq(self, run_id: str) -> int | None:
        value = await self.client.hget(self.keys(run_id)[0], "next")
        return None if value is None else int(value)

    async def page(self, run_id: str, from_seq: int, limit: int) -> RedisPage:
        meta, stream = self.keys(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(meta, ["next", "closed", "forgotten"])
            pipe.xrange(stream, min=entry_id(from_seq), max="+", count=limit + 1)
            (next_seq, closed, forgotten), entries = await pipe.execute()
        events = [_event(run_id, entry, fields) for entry, fields in entries if entry != END_ID]
        return RedisPage(
            known=next_seq is not None or closed is not None,
            next_seq=None if next_seq is None else int(next_seq),
            closed=closed == b"1",
            forgotten=forgotten == b"1",
            events=events[:limit],
            ended=any(entry == END_ID for entry, _ in entries) and len(events) <= limit,
        )

    async def read_live(
        self, run_id: str, after: bytes, count: int
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Entries after `after`, waiting up to the block time for some to come."""
        stream = self.keys(run_id)[1]
        reply: Any = await self.blocking.xread({stream: after}, count=count, block=self.block_ms)
        return [entry for _, entries in reply or [] for entry in entries]


def event_of(run_id: str, entry: bytes, fields: dict[bytes, bytes]) -> StoredEvent:
    return _event(run_id, entry, fields)


def _event(run_id: str, entry: bytes, fields: dict[bytes, bytes]) -> StoredEvent:
    return StoredEvent(run_id, seq_of(entry), fields[b"e"].decode(), fields[b"d"])


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
