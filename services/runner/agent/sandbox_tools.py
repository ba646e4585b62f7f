"""`bash` and `python`: commands run in the run's sandbox (services/runner/sandbox/).

The sandbox is leased at the first call and released when the run ends. A
command that fails answers with its exit code and output; one that runs into
a limit (CPU, memory, processes, disk, output, time) answers with a tool error that
names the limit, so the model can do something smaller.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException, tool

from waybill.common.config_file import SandboxSpec
from waybill.services.runner.agent.workspace import wait_for_snapshot
from waybill.services.runner.run.scope import RunScope
from waybill.services.runner.sandbox.provider import ExecResult, SandboxUnavailable

LIMIT_WORDS = {
    "cpu": "its CPU time limit ({cpu_seconds} s)",
    "memory": "its memory limit ({memory_mb} MiB)",
    "processes": "its process limit ({processes})",
    "disk": "its disk limit ({disk_mb} MiB)",
    "timeout": "its time limit ({timeout_seconds:g} s) and was killed",
}


def _answer(result: ExecResult, spec: SandboxSpec | None) -> str:
    limits: dict[str, Any] = spec.model_dump() if spec is not None else {}
    if result.limit_hit in LIMIT_WORDS:
        said = LIMIT_WORDS[result.limit_hit].format(**limits)
        raise ToolException(
            f"the command ran into {said} (exit code {result.exit_code}); "
            f"stderr: {result.stderr[-1000:]}"
        )
    parts = [f"exit code {result.exit_code}"]
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr}")
    if result.output_dropped:
        parts.append(f"[output truncated: {result.output_dropped} more bytes not kept]")
    return "\n".join(parts)


async def _run(config: RunnableConfig, argv: list[str]) -> str:
    scope = RunScope.of(config)
    if not scope.thread_id:
        raise ToolException("the sandbox needs a thread (its workspace)")
    await _snapshot_taken(config)
    try:
        result = await scope.sandbox.execute(argv)
    except SandboxUnavailable as error:
        raise ToolException(f"no sandbox: {error}") from None
    return _answer(result, scope.limits.sandbox)


async def _snapshot_taken(config: RunnableConfig) -> None:
    """A command may change the workspace: its before-snapshot comes first."""
    await asyncio.to_thread(wait_for_snapshot, config)


@tool
async def bash(command: str, config: RunnableConfig) -> str:
    """Run a shell command in this run's sandbox; the thread's workspace is the
    current directory (/workspace). No network unless the server allows it."""
    return await _run(config, ["/bin/bash", "-c", command])


@tool
async def python(code: str, config: RunnableConfig) -> str:
    """Run a Python program in this run's sandbox (working directory /workspace);
    print what you want to see."""
    return await _run(config, ["python3", "-c", code])


SANDBOX_TOOLS = [bash, python]
