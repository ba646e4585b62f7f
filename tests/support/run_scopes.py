"""A run's scope for the runner's tools called outside a run (unit tests): what
execution.py installs in a run's config, with sinks that keep what they are told
and a tool-call record that runs every call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.outputs import Generation
from langchain_core.tools import BaseTool

from waybill.services.runner.agent.workspace import workspace_root
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.run.scope import RunLimits, RunScope, WorkspaceGate
from waybill.services.runner.sandbox.leases import RunSandbox, RunSandboxes
from waybill.services.runner.sandbox.provider import SandboxProvider


class Kept:
    """A sink that keeps what it is told: (type, data)."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, Any]] = []

    def emit(self, kind: str, data: Any) -> None:
        self.emitted.append((kind, data))


class NoModelMemo:
    async def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        return None

    def update(self, prompt: str, llm_string: str, generations: Sequence[Generation]) -> None:
        return None


class RunsEveryCall:
    """A tool-call record that records nothing: each call runs."""

    models = NoModelMemo()

    async def arun(
        self, call: dict[str, Any], tool: BaseTool | None, execute: Callable[[], Awaitable[Any]]
    ) -> Any:
        return await execute()

    def run(self, call: dict[str, Any], tool: BaseTool | None, execute: Callable[[], Any]) -> Any:
        return execute()


def tool_scope(
    workspaces: Path,
    *,
    run_id: str = "run-1",
    thread_id: str = "thread-1",
    epoch: int = 1,
    gate: WorkspaceGate | None = None,
    provider: SandboxProvider | None = None,
    limits: RunLimits | None = None,
) -> RunScope:
    limits = limits or RunLimits(lease_seconds=60, run_timeout_seconds=60, workspaces=workspaces)
    records = Kept()
    sandbox = RunSandbox(
        RunSandboxes(lambda: provider),
        run_id,
        epoch,
        thread_id,
        lambda: workspace_root(workspaces, thread_id),
        lambda record: records.emit("sandbox", record),
    )
    return RunScope(
        run_id=run_id,
        thread_id=thread_id,
        epoch=epoch,
        attempt=1,
        owner_id="owner",
        fence=RunFence(run_id, epoch, 60),
        limits=limits,
        frames=Kept(),
        records=records,
        tool_calls=RunsEveryCall(),
        sandbox=sandbox,
        snapshot_gate=gate,
    )


def tool_config(scope: RunScope) -> dict[str, Any]:
    """A tool's config inside the scope's run, as LangGraph passes it."""
    configurable = {"thread_id": scope.thread_id, "run_id": scope.run_id}
    config = {"configurable": configurable, "metadata": {"run_epoch": scope.epoch}}
    return dict(scope.installed_in(config))  # type: ignore[arg-type]
