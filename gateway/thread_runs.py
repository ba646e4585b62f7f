"""The one follower of a thread's runs, for the thread's two streams
(`thread_stream.py`, LangGraph Platform's `GET /threads/{tid}/stream`, and
`thread_protocol_stream.py`, its protocol stream `POST /threads/{tid}/stream/events`):
which runs a stream has not taken yet, found by asking admission, each run once,
oldest first. Reading a run's events is the journal's (`journal_batches`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2

# Runs asked for at a time (newest first) when looking for new ones.
RUN_PAGE = 100


def never(_run: common_pb2.Run) -> bool:
    return False


@dataclass
class ThreadRuns:
    """One stream's view of a thread's runs: those it took, and how to find the rest."""

    admission: admission_pb2_grpc.AdmissionStub
    thread_id: str
    poll_seconds: float
    leave_out: Callable[[common_pb2.Run], bool] = never  # runs never to take
    taken: set[str] = field(default_factory=set)

    async def as_they_come(
        self, every_page_first: bool, every_page_later: bool
    ) -> AsyncIterator[list[common_pb2.Run]]:
        """Each poll's runs not taken yet, oldest first: the first poll's even when
        there are none (what was there when the stream came), later ones when there
        are; a poll's pause after one that found nothing. Every page of the runs, or
        only the newest (where a run that just started is). Ends when admission
        cannot list the thread's runs (the thread deleted, admission away): the
        client comes back later."""
        every_page, first = every_page_first, True
        while True:
            try:
                runs = await self.untaken(every_page)
            except grpc.aio.AioRpcError:
                return
            if runs or first:
                yield runs
            if not runs:
                await asyncio.sleep(self.poll_seconds)
            every_page, first = every_page_later, False

    async def untaken(self, every_page: bool) -> list[common_pb2.Run]:
        """The runs not taken yet (now taken), oldest first."""
        found: list[common_pb2.Run] = []
        offset = 0
        while True:
            reply = await self.admission.ListRuns(
                admission_pb2.ListRunsRequest(
                    thread_id=self.thread_id, limit=RUN_PAGE, offset=offset
                )
            )
            found.extend(run for run in reply.runs if not self._taken_or_left_out(run))
            if not every_page or len(reply.runs) < RUN_PAGE:
                break
            offset += RUN_PAGE
        self.taken.update(run.run_id for run in found)
        return sorted(found, key=lambda run: (run.created_at, run.run_id))

    def _taken_or_left_out(self, run: common_pb2.Run) -> bool:
        return run.run_id in self.taken or self.leave_out(run)
