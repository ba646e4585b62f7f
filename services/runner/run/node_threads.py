"""The threads a runner lends to sync nodes and tools, bounded and counted.

LangGraph runs a sync node in the event loop's default executor. A thread cannot
be stopped from outside: when a run times out its sync node may go on forever,
holding its thread. Here that executor is bounded (`WAYBILL_RUNNER_NODE_THREADS`),
each call remembers the run it serves, and a thread still busy for a run that
has ended is counted as stuck (`node_threads_stuck` in the runner's stats). Once
every thread is stuck, a new run would wait forever for one: it is refused
instead, with `NodeThreadsExhausted` as its error, until the runner restarts.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from waybill.services.runner.reporting.frames import RunRefusal
from waybill.services.runner.stats import STATS

T = TypeVar("T")

# The run whose task is executing; a call submitted from it is that run's.
RUN_OF_TASK: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "waybill_run_of_task", default=None
)


class NodeThreadsExhausted(RunRefusal):
    """Every node thread is held by a run that has ended: no run can be served."""


class NodeThreads(ThreadPoolExecutor):
    """A bounded executor that knows which run each busy thread serves."""

    def __init__(self, size: int) -> None:
        super().__init__(max_workers=size, thread_name_prefix="waybill-node")
        self.size = size
        self._busy: Counter[str] = Counter()  # run id -> its calls executing
        self._ended: set[str] = set()  # runs that ended while calls of theirs ran
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        run_id = RUN_OF_TASK.get() or ""

        def counted() -> T:
            self._count(run_id, +1)
            try:
                return fn(*args, **kwargs)
            finally:
                self._count(run_id, -1)

        return super().submit(counted)

    def _count(self, run_id: str, change: int) -> None:
        with self._lock:
            self._busy[run_id] += change
            if self._busy[run_id] <= 0:
                del self._busy[run_id]
                self._ended.discard(run_id)
            self._publish()

    def run_ended(self, run_id: str) -> None:
        """A run's end: any of its calls still executing now holds a thread for nothing."""
        with self._lock:
            if self._busy.get(run_id):
                self._ended.add(run_id)
            self._publish()

    @property
    def stuck(self) -> int:
        with self._lock:
            return sum(self._busy[run_id] for run_id in self._ended)

    def require_free(self) -> None:
        """Refuse a new run when no thread can ever serve it."""
        stuck = self.stuck
        if stuck >= self.size:
            raise NodeThreadsExhausted(
                f"all {self.size} node threads of this runner are held by sync nodes of "
                "runs that ended (timed out) and never returned; the runner takes no "
                "run needing them until it restarts (WAYBILL_RUNNER_NODE_THREADS)"
            )

    def _publish(self) -> None:
        STATS.node_threads_busy = sum(self._busy.values())
        STATS.node_threads_stuck = sum(self._busy[run_id] for run_id in self._ended)


NODE_THREADS: NodeThreads | None = None


def install(size: int) -> NodeThreads:
    """The running loop's default executor becomes a bounded, counted one."""
    global NODE_THREADS
    NODE_THREADS = NodeThreads(size)
    STATS.node_threads = size
    asyncio.get_running_loop().set_default_executor(NODE_THREADS)
    return NODE_THREADS


def require_free_thread() -> None:
    if NODE_THREADS is not None:
        NODE_THREADS.require_free()


def run_ended(run_id: str) -> None:
    if NODE_THREADS is not None:
        NODE_THREADS.run_ended(run_id)
