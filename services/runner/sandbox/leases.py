"""A run's sandbox: leased at its first command, released when the run ends.

One registry per runner process, keyed by (run, epoch): a run taken over by
another runner (or again by this one) gets a fresh sandbox, and the execution
releases its own in its finalization whatever the ending (success, error,
cancel, a lost lease). A run reaches the registry only through its
`RunSandbox`, the handle in its scope (scope.py), bound to its own key. Each
lease, release and limit hit is a `sandbox` record in the run's journal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waybill.common.config_file import SandboxSpec
from waybill.common.settings import get_settings
from waybill.services.runner.reporting.record_sink import RecordSink
from waybill.services.runner.sandbox.provider import (
    ExecResult,
    LeaseRequest,
    Limits,
    Sandbox,
    SandboxProvider,
    SandboxUnavailable,
)
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.runner.sandbox")

# Told each lifecycle record: (what happened, its fields). A run's journal, or nothing.
Note = Callable[[dict[str, Any]], None]


@dataclass
class Held:
    sandbox: Sandbox
    note: Note
    provider: str


class RunSandboxes:
    def __init__(self, provider: Callable[[], SandboxProvider | None]) -> None:
        self._provider = provider
        self._held: dict[tuple[str, int], Held] = {}
        self._leasing: dict[tuple[str, int], asyncio.Lock] = {}

    async def execute(self, request: LeaseRequest, argv: list[str], note: Note) -> ExecResult:
        held = await self._lease(request, note)
        result = await held.sandbox.execute(argv)
        if result.limit_hit is not None:
            note(
                {
                    "action": "limit_hit",
                    "sandbox_id": held.sandbox.sandbox_id,
                    "limit": result.limit_hit,
                    "exit_code": result.exit_code,
                }
            )
        return result

    async def _lease(self, request: LeaseRequest, note: Note) -> Held:
        key = (request.run_id, request.epoch)
        lock = self._leasing.setdefault(key, asyncio.Lock())
        async with lock:
            held = self._held.get(key)
            if held is not None:
                return held
            provider = self._provider()
            if provider is None:
                raise SandboxUnavailable("no sandbox is configured (the `sandbox` section)")
            sandbox = await provider.lease(request)
            held = Held(sandbox, note, provider.name)
            self._held[key] = held
        note(
            {
                "action": "leased",
                "sandbox_id": sandbox.sandbox_id,
                "provider": provider.name,
                "confinement": sandbox.confinement,
                **sandbox.lease_details,
            }
        )
        log.info(
            "run %s: sandbox %s leased (%s)", request.run_id, sandbox.sandbox_id, provider.name
        )
        return held

    async def release(self, run_id: str, epoch: int, reason: str) -> None:
        """Release the run's sandbox, if it leased one (every ending calls this)."""
        key = (run_id, epoch)
        lock = self._leasing.setdefault(key, asyncio.Lock())
        async with lock:  # a lease under way ends first
            held = self._held.pop(key, None)
        self._leasing.pop(key, None)
        if held is None:
            return
        sandbox_id = held.sandbox.sandbox_id
        try:
            await held.sandbox.close()
        except Exception as error:
            said = f"{type(error).__name__}: {error}"[:1000]
            held.note({"action": "release_failed", "sandbox_id": sandbox_id, "error": said})
            raise
        held.note({"action": "released", "sandbox_id": sandbox_id, "reason": reason})
        log.info("run %s: sandbox %s released (%s)", run_id, sandbox_id, reason)

    def holding(self) -> int:
        return len(self._held)


@dataclass(frozen=True)
class RunSandbox:
    """One attempt's handle on the registry: its sandbox, leased at its first command."""

    sandboxes: RunSandboxes
    run_id: str
    epoch: int
    thread_id: str
    workspace: Callable[[], Path]  # the thread's workspace, made when first leased
    note: Note

    @classmethod
    def of_thread(
        cls, run: common_pb2.Run, workspace: Callable[[], Path], records: RecordSink
    ) -> RunSandbox:
        """One attempt's handle on the runner's sandboxes; its records go to the journal."""

        def note(record: dict[str, Any]) -> None:
            records.emit("sandbox", record)

        return cls(SANDBOXES, run.run_id, run.epoch, run.thread_id, workspace, note)

    async def execute(self, argv: list[str]) -> ExecResult:
        request = LeaseRequest(self.run_id, self.epoch, self.thread_id, self.workspace())
        return await self.sandboxes.execute(request, argv, self.note)

    async def release(self, reason: str) -> None:
        await self.sandboxes.release(self.run_id, self.epoch, reason)

    async def release_quietly(self, reason: str) -> None:
        """`release` (a no-op the second time); one that fails is logged: it must
        not change how the run ends."""
        try:
            await self.release(reason)
        except Exception:
            log.exception("run %s: its sandbox could not be released", self.run_id)


def provider_for(spec: SandboxSpec, run_timeout_seconds: float) -> SandboxProvider:
    """The provider the `sandbox` section names (each imported only when named)."""
    limits = Limits.of(spec)
    if spec.provider == "kubernetes":
        from waybill.services.runner.sandbox.kubernetes import KubernetesProvider

        return KubernetesProvider(spec.kubernetes, limits, run_timeout_seconds)
    from waybill.services.runner.sandbox.local import LocalProvider

    return LocalProvider(limits)


def _configured_provider() -> SandboxProvider | None:
    """The process's provider, made once from its settings' `sandbox` section."""
    settings = get_settings()
    spec = settings.sandbox()
    if spec is None:
        return None
    if _PROVIDERS.get("spec") is not spec:
        _PROVIDERS.clear()
        _PROVIDERS.update(spec=spec, provider=provider_for(spec, settings.run_timeout_seconds))
    provider: SandboxProvider = _PROVIDERS["provider"]
    return provider


_PROVIDERS: dict[str, Any] = {}

SANDBOXES = RunSandboxes(_configured_provider)
