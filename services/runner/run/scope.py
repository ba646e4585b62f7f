"""What belongs to one attempt of one run, in one place: the `RunScope`.

`execution.py` builds a run's scope once per attempt and installs it twice, as
LangGraph installs its `Runtime` and Temporal its activity context:

- under one configurable key, where every node, tool and middleware of the run's
  graph finds it: `RunScope.of(config)`;
- in one context variable, for the one caller no config reaches, the model-call
  cache that LangChain consults (model_calls.py): `RunScope.current()`.

The key starts with `__`, so it never reaches a checkpoint: LangGraph copies no
such configurable key into a checkpoint's metadata (`get_checkpoint_metadata`),
a saved checkpoint's config holds only its thread, namespace and id, and the
checkpoint payloads Waybill streams drop `__waybill` keys (frames.py).

A scope holds what the run's code would otherwise look up in settings or in
module-level registries: its identity, its fence, its limits (copied once from
the settings), its sinks, its tool-call record, its workspace gate, its sandbox
and its subagent slots. The sinks, the record and the gate are Protocols: the
modules that use the scope (tools, middleware, the model-call cache) then do not
import the modules that fill it, and none of them imports another through it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import RunnableConfig

from waybill.common.auth_mode import sandbox_offered
from waybill.common.config_file import (
    MemorySection,
    RunBudget,
    SandboxSpec,
    SubagentSpec,
    SummarizationSection,
    TitlesSection,
)
from waybill.common.run_budget import DayAllowance, limits_any_day, lowered, requested_budget
from waybill.common.sealed import secrets_key
from waybill.common.settings import Settings
from waybill.common.usage import Price
from waybill.services.runner.graphs.chat_models import ModelCatalog
from waybill.services.runner.persistence.owned_store import StoreAccess
from waybill.services.runner.run.state_limits import largest_bytes

if TYPE_CHECKING:
    from langchain_core.outputs import Generation
    from langchain_core.tools import BaseTool

    from waybill.services.runner.persistence.fencing import RunFence
    from waybill.services.runner.sandbox.leases import RunSandbox

SCOPE_KEY = "__waybill_run_scope"


class NoRunScope(LookupError):
    """Code that belongs to a run was called outside one (a config without a scope)."""


@dataclass(frozen=True)
class RunLimits:
    """The settings a run runs under, read once when its scope is built."""

    lease_seconds: float
    run_timeout_seconds: float
    record_linger_seconds: float = 0.0
    cancel_grace_seconds: float = 10.0  # a tool executing when a cancel comes may finish
    workspaces: Path = Path("workspaces")
    models: ModelCatalog = ModelCatalog((), "")
    sandbox: SandboxSpec | None = None
    sandbox_offered: bool = False  # the `bash` and `python` tools (common/auth_mode.py)
    subagents: Sequence[SubagentSpec] = ()
    subagents_max_parallel: int = 3
    role_tools: Mapping[str, list[str]] = field(default_factory=dict)
    deferred_tools_threshold: int = 12
    history_limit: int = 200
    summarization: SummarizationSection = field(default_factory=SummarizationSection)
    memory: MemorySection = field(default_factory=MemorySection)
    titles: TitlesSection = field(default_factory=TitlesSection)
    prices: Mapping[str, Price] = field(default_factory=dict)
    record_model_calls: bool = True
    error_tracebacks: bool = False
    store_access: StoreAccess = StoreAccess(False, frozenset(), frozenset())
    # The key that opens a run's sealed secrets, read when a run has some (common/sealed.py).
    secrets_key: Callable[[], bytes] = field(default=lambda: b"", repr=False)
    largest_state_bytes: int = largest_bytes(64 * 1024 * 1024)  # a state or event, in a message
    # The run's own budget: `quotas.run`, or lower where its request asks (budget.py).
    budget: RunBudget = field(default_factory=RunBudget)
    # Some owner has a daily limit (`quotas` tokens_per_day / cost_per_day): a run
    # asks admission for its owner's allowance as it starts (budget.py).
    day_limited: bool = False
    day: DayAllowance | None = None  # the owner's, once asked; None: no daily limit

    @classmethod
    def from_settings(cls, settings: Settings) -> RunLimits:
        config = settings.config_file()
        return cls(
            lease_seconds=settings.lease_seconds,
            run_timeout_seconds=settings.run_timeout_seconds,
            record_linger_seconds=settings.record_linger_seconds,
            cancel_grace_seconds=settings.cancel_grace_seconds,
            workspaces=settings.workspaces_path(),
            models=ModelCatalog.from_settings(settings),
            sandbox=settings.sandbox(),
            sandbox_offered=sandbox_offered(settings),
            subagents=tuple(settings.subagents()),
            subagents_max_parallel=settings.subagents_max_parallel,
            role_tools=settings.role_tools(),
            deferred_tools_threshold=settings.deferred_tools_threshold,
            history_limit=settings.history_limit,
            summarization=config.summarization,
            memory=config.memory,
            titles=config.titles,
            prices=settings.prices(),
            record_model_calls=settings.record_model_calls,
            error_tracebacks=settings.error_tracebacks,
            store_access=StoreAccess.from_settings(settings),
            secrets_key=functools.partial(secrets_key, settings),
            largest_state_bytes=largest_bytes(settings.grpc_max_message_bytes),
            budget=settings.quotas().run,
            day_limited=limits_any_day(settings.quotas()),
        )

    def for_request(self, kwargs: dict[str, Any]) -> RunLimits:
        """These limits with the budget the run's request lowered (admission refused
        one above `quotas.run`; one malformed since is ignored: the configured stands)."""
        try:
            return replace(self, budget=lowered(self.budget, requested_budget(kwargs)))
        except ValueError:
            return self

    def subagent(self, name: Any) -> SubagentSpec | None:
        return next((agent for agent in self.subagents if agent.name == name), None)


class EmitsFrames(Protocol):
    """The run's frames on their way to its stream (reporting/frame_sink.py)."""

    def emit(self, event: str, data: bytes) -> None: ...


class EmitsRecords(Protocol):
    """The run's typed records on their way to the journal (record_sink.py)."""

    def emit(self, record_type: str, data: dict[str, Any]) -> None: ...


class WorkspaceGate(Protocol):
    """Shut until the workspace's before-snapshot is taken (agent/workspace.py)."""

    def wait(self) -> None: ...


class ModelCallMemo(Protocol):
    """The run's model responses, recorded and replayed (model_calls.py)."""

    async def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None: ...

    def update(self, prompt: str, llm_string: str, generations: Sequence[Generation]) -> None: ...


class ToolCallLedger(Protocol):
    """The run's record of its tool calls (tool_calls.py)."""

    @property
    def models(self) -> ModelCallMemo: ...

    async def arun(
        self,
        call: dict[str, Any],
        tool: BaseTool | None,
        execute: Callable[[], Awaitable[Any]],
    ) -> Any: ...

    def run(
        self, call: dict[str, Any], tool: BaseTool | None, execute: Callable[[], Any]
    ) -> Any: ...


_CURRENT: ContextVar[RunScope | None] = ContextVar("waybill_run_scope", default=None)


@dataclass(frozen=True, eq=False)  # one scope is one attempt: compared by identity
class RunScope:
    """One attempt of one run, as its graph's code sees it (built by execution.py)."""

    run_id: str
    thread_id: str
    epoch: int
    attempt: int
    owner_id: str
    fence: RunFence
    limits: RunLimits
    frames: EmitsFrames
    records: EmitsRecords
    tool_calls: ToolCallLedger
    sandbox: RunSandbox
    # None when delivery does not verify the workspace: a file tool then writes at once.
    snapshot_gate: WorkspaceGate | None = None
    # At most `subagents_max_parallel` subagents of this attempt work at once.
    subagent_slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        slots = asyncio.Semaphore(self.limits.subagents_max_parallel)
        object.__setattr__(self, "subagent_slots", slots)

    # ---- where it is installed ----------------------------------------------------

    def installed_in(self, config: RunnableConfig) -> RunnableConfig:
        """`config` with this scope under its configurable key."""
        configurable = {**(config.get("configurable") or {}), SCOPE_KEY: self}
        return {**config, "configurable": configurable}

    def enter(self) -> None:
        """This scope is the current one for the calling task and what it starts (the
        run's graph task calls it: the model-call cache has no config to look in)."""
        _CURRENT.set(self)

    # ---- where it is found ----------------------------------------------------------

    @staticmethod
    def find(config: RunnableConfig | None) -> RunScope | None:
        """The run's scope in a node's or a tool's config; None outside a Waybill run
        (a graph read, a graph run by a test)."""
        found = ((config or {}).get("configurable") or {}).get(SCOPE_KEY)
        return found if isinstance(found, RunScope) else None

    @staticmethod
    def of(config: RunnableConfig | None) -> RunScope:
        """The run's scope in a node's or a tool's config; raises outside a run."""
        found = RunScope.find(config)
        if found is None:
            raise NoRunScope(
                f"no run scope in this config (configurable[{SCOPE_KEY!r}]): this code "
                "runs inside a Waybill run, with the config LangGraph passes its node or tool"
            )
        return found

    @staticmethod
    def current() -> RunScope | None:
        """The scope of the run whose graph task this is; None outside a run."""
        return _CURRENT.get()
