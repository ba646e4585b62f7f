"""A thread's stream (`GET /threads/{tid}/stream`): the events of every run on the
thread, merged as they come, for as long as the client stays.

As on LangGraph Platform: each run's events as its own stream sends them, then
`metadata` `{"status": "run_done", "run_id"}` when it ends; `state_update` events
(`{"state", "thread_id"}`) when the thread's state is written by `update_state`;
nothing but heartbeats while no run is going. The stream modes choose among them:
`run_modes` (the runs' events), `lifecycle` (each run's first `metadata` and its
`run_done`), `state_update`.

An event's id is `<ms>-<n>`: `ms` the creation time (epoch milliseconds) of what
sent it, a run or a state update, and `n` its place there (the run's sequence
number; 0 for a state update). `Last-Event-ID` resumes after that event: what
started later is replayed whole, what started in the same millisecond from
`n + 1`. `-` replays everything the journal keeps; no header follows what comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime

import grpc

from waybill.common import codec
from waybill.common.journal_reading import journal_batches
from waybill.gateway.sse import sse_frame
from waybill.gateway.thread_runs import ThreadRuns
from waybill.v1 import admission_pb2_grpc, common_pb2, journal_pb2, journal_pb2_grpc

THREAD_STREAM_MODES = ("run_modes", "lifecycle", "state_update")

ACTIVE = (common_pb2.RUN_STATUS_PENDING, common_pb2.RUN_STATUS_RUNNING)
EVENT_ID = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class ResumePoint:
    """Where a client left off: after event `n` of what started at `ms`."""

    ms: int
    n: int

    def first_of(self, started_ms: int) -> int | None:
        """The first sequence number to send of what started at `started_ms`; None: none."""
        if started_ms > self.ms:
            return 0
        if started_ms == self.ms:
            return self.n + 1
        return None


EVERYTHING = ResumePoint(-1, 0)


def parse_modes(raw: Sequence[str]) -> list[str]:
    """`stream_mode` values as the SDKs send them (repeated, or comma-separated)."""
    modes = [mode.strip() for value in raw for mode in value.split(",") if mode.strip()]
    for mode in modes:
        if mode not in THREAD_STREAM_MODES:
            raise ValueError(f"Invalid stream mode: {mode}")
    return modes or ["run_modes"]


def parse_last_event_id(value: str | None) -> ResumePoint | None:
    """None: follow live. `-`: from the beginning. Else `<ms>[-<n>]`."""
    if value is None or value.strip() == "":
        return None
    if value.strip() == "-":
        return EVERYTHING
    matched = EVENT_ID.match(value.strip())
    if matched is None:
        raise ValueError("Invalid last-event-id: must be <milliseconds>-<number> or '-'")
    return ResumePoint(int(matched.group(1)), int(matched.group(2) or 0))


def epoch_ms(moment: str) -> int:
    return int(datetime.fromisoformat(moment).timestamp() * 1000)


def passes(modes: Sequence[str], event: str, data: bytes) -> bool:
    """LangGraph Platform's filter of a thread stream's events by mode."""
    if event == "state_update":
        return "state_update" in modes
    if "run_modes" in modes:
        return True
    return "lifecycle" in modes and event == "metadata" and _is_lifecycle(data)


def _is_lifecycle(data: bytes) -> bool:
    payload = codec.loads(data, {})
    if not isinstance(payload, dict):
        return False
    return payload.get("status") == "run_done" or ("attempt" in payload and "run_id" in payload)


class ThreadStream:
    """One client's stream of one thread: a task per run it follows (and one on the
    thread's own log for state updates), all feeding one queue."""

    def __init__(
        self,
        admission: admission_pb2_grpc.AdmissionStub,
        journal: journal_pb2_grpc.JournalStub,
        thread_id: str,
        modes: Sequence[str],
        resume: ResumePoint | None,
        poll_seconds: float,
    ) -> None:
        self.runs = ThreadRuns(admission, thread_id, poll_seconds)
        self.journal = journal
        self.thread_id = thread_id
        self.modes = list(modes)
        self.resume = resume
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: the end
        self.tasks: set[asyncio.Task[None]] = set()

    async def frames(self) -> AsyncIterator[bytes]:
        """Everything the client should see, until it leaves."""
        self._start(self._watch_runs(), "runs")
        if "state_update" in self.modes:
            self._start(self._follow_state_updates(), "state-updates")
        try:
            while (first := await self.queue.get()) is not None:
                chunk: list[bytes | None] = [first]
                while not self.queue.empty():  # a burst goes out as one write
                    chunk.append(self.queue.get_nowait())
                yield b"".join(part for part in chunk if part is not None)
                if None in chunk:
                    return
        finally:
            for task in self.tasks:
                task.cancel()
            for task in list(self.tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _start(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(f"thread-stream-{name}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _put(self, event: str, data: bytes, event_id: str) -> None:
        if passes(self.modes, event, data):
            self.queue.put_nowait(sse_frame(event, data, event_id))

    # ---- runs ------------------------------------------------------------------------

    async def _watch_runs(self) -> None:
        """Follow each run as it is found: the thread's runs now (every page of them
        when replaying), then new ones. The stream ends when admission cannot say."""
        first = True
        async for runs in self.runs.as_they_come(
            every_page_first=self.resume is not None, every_page_later=False
        ):
            for run in runs:
                from_seq = self._first_seq(run, at_start=first)
                if from_seq is not None:
                    self._start(self._follow_run(run, from_seq), run.run_id)
            first = False
        self.queue.put_nowait(None)

    def _first_seq(self, run: common_pb2.Run, at_start: bool) -> int | None:
        """Where to start a run's events, or None to leave it out."""
        if self.resume is not None:
            return self.resume.first_of(epoch_ms(run.created_at))
        if at_start and run.status not in ACTIVE:
            return None  # ended before the client came, and it asked for nothing past
        return 0

    async def _follow_run(self, run: common_pb2.Run, from_seq: int) -> None:
        """The run's events from `from_seq`, then its `run_done` (id: one past its last
        event). The log is read from the event before: if that one is not there, the
        client's last event was this `run_done`, and it is not sent again."""
        started = epoch_ms(run.created_at)
        last, reached = from_seq - 1, from_seq == 0
        try:
            async for batch in journal_batches(self.journal, run.run_id, max(0, from_seq - 1)):
                for event in batch:
                    reached = True
                    if event.seq >= from_seq:
                        self._put(event.event, event.data, f"{started}-{event.seq}")
                        last = event.seq
        except grpc.aio.AioRpcError:
            return  # deleted, or its events expired: nothing more to tell of it
        if reached:
            done = codec.dumps({"status": "run_done", "run_id": run.run_id})
            self._put("metadata", done, f"{started}-{last + 1}")

    # ---- state updates ---------------------------------------------------------------

    async def _follow_state_updates(self) -> None:
        """The thread's own log in the journal, where the runner writes each update."""
        log_id = codec.thread_log_id(self.thread_id)
        live_only = self.resume is None
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for batch in journal_batches(self.journal, log_id, 0, live_only):
                for event in batch:
                    self._state_update(event)

    def _state_update(self, event: journal_pb2.RunEvent) -> None:
        """An update is known by its new checkpoint's time: its id, and what a
        resuming client has seen (a first sequence number past 0 means this one)."""
        payload = codec.loads(event.data, {})
        created_at = ((payload or {}).get("state") or {}).get("created_at")
        started = epoch_ms(created_at) if created_at else 0
        if self.resume is not None and self.resume.first_of(started) != 0:
            return
        self._put(event.event, event.data, f"{started}-0")


def thread_stream(
    admission: admission_pb2_grpc.AdmissionStub,
    journal: journal_pb2_grpc.JournalStub,
    thread_id: str,
    modes: Sequence[str],
    resume: ResumePoint | None,
    poll_seconds: float,
) -> AsyncIterator[bytes]:
    return ThreadStream(admission, journal, thread_id, modes, resume, poll_seconds).frames()
