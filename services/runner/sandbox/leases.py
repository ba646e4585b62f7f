"""A run's sandbox: leased at its first command, released when the run ends.

One registry per runner process, keyed by (run, epoch): a run taken over by
another runner (or again by this one) gets a fresh sandbox, and the execution
releases its own in its finalization whatever the ending (success, error,
cancel, a lost lease). Each lease, release and limit hit is a `sandbox`
record in the run's journal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waybill.common.settings import get_settings
from waybill.services.runner.sandbox.provider import (
    ExecResult,
    LeaseRequest,
    Sandbox,
    SandboxProvider,
    SandboxUnavailable,
    provider_for,
)

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


def _configured_provider() -> SandboxProvider | None:
    spec = get_settings().sandbox()
    if spec is None:
        return None
    if _PROVIDERS.get("spec") is not spec:
        _PROVIDERS.clear()
        _PROVIDERS.update(spec=spec, provider=provider_for(spec))
    provider: SandboxProvider = _PROVIDERS["provider"]
    return provider


_PROVIDERS: dict[str, Any] = {}

SANDBOXES = RunSandboxes(_configured_provider)
