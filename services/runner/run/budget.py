"""A run's own budget, enforced: `quotas.run` (`max_tokens`, `max_cost`), or the
lower one its request set (common/run_budget.py), in its scope's limits.

`BudgetWatch` is one of the run's callbacks, after its journal: when a model call
ends, the journal's ledger has counted it (once, a replayed call at no cost), and
the watch compares the run's tokens and cost so far with its budget. At 80 % of a
limit it warns, once: a `budget` record in the run's journal and, when the run
streams `custom`, a `custom` event `{"type": "budget_warning", "limit", "value",
"used"}` (LangGraph Platform's mode for what an app tells its UI). Past a limit it
tells the run's execution, which stops the run as a cancel does (execution.py):
no model or tool call starts, a tool executing gets the cancel grace; the run
ends `error` with `BudgetExceeded` (on its stream `{"error": "BudgetExceeded",
"message", "limit", "value", "used"}`, in its record and its receipt).

The owner's day is watched the same way: `tokens_per_day` and `cost_per_day`,
where `used` is the day's spend when the run started (`with_day_allowance`) plus
the run's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from waybill.common import codec
from waybill.common.config_file import RunBudget
from waybill.common.run_budget import DayAllowance
from waybill.common.usage import TokenCount
from waybill.services.runner.ending.outcome import Outcome
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.reporting.frames import requested_names
from waybill.services.runner.run.outages import patiently
from waybill.services.runner.run.scope import EmitsFrames, EmitsRecords, RunLimits, RunScope
from waybill.v1 import admission_pb2, common_pb2

log = logging.getLogger("waybill.runner.budget")

WARN_AT = 0.8  # of a limit: the warning a UI shows
DAY_LIMITS = ("tokens_per_day", "cost_per_day")


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:.6f}".rstrip("0")


class BudgetExceeded(RuntimeError):
    """The run spent more than a limit allows (`limit`: `max_tokens` or `max_cost`,
    its own; `tokens_per_day` or `cost_per_day`, its owner's day)."""

    def __init__(self, limit: str, value: float, used: float) -> None:
        whose = "the owner's day" if limit in DAY_LIMITS else "the run's budget"
        super().__init__(f"{whose} {limit} of {_shown(value)} is exceeded: {_shown(used)} spent")
        self.limit, self.value, self.used = limit, value, used

    @property
    def stream_fields(self) -> dict[str, Any]:
        """What its error event says beside `error` and `message` (frames.py)."""
        return {"limit": self.limit, "value": self.value, "used": self.used}

    def outcome(self) -> Outcome:
        return Outcome(common_pb2.RUN_STATUS_ERROR, self, f"BudgetExceeded: {self}")


def spent(counts: list[TokenCount]) -> dict[str, float]:
    """The run's spend so far, by what it is counted in."""
    return {
        "tokens": sum(count.total_tokens for count in counts),
        "cost": round(sum(count.cost or 0.0 for count in counts), 10),
    }


class Limit(NamedTuple):
    """One limit the watch holds a run to."""

    name: str  # max_tokens, max_cost, tokens_per_day or cost_per_day
    value: float
    counted_in: str  # "tokens" or "cost"
    spent_before: float = 0.0  # the owner's spend of the day when the run started


def limits_of(budget: RunBudget, day: DayAllowance | None) -> list[Limit]:
    """The run's own budget, then its owner's day: each that is set."""
    found = [
        Limit("max_tokens", budget.max_tokens, "tokens") if budget.max_tokens else None,
        Limit("max_cost", budget.max_cost, "cost") if budget.max_cost else None,
    ]
    if day is not None:
        if day.tokens_per_day is not None:
            tokens = Limit("tokens_per_day", day.tokens_per_day, "tokens", day.tokens_spent)
            found.append(tokens)
        if day.cost_per_day is not None:
            found.append(Limit("cost_per_day", day.cost_per_day, "cost", day.cost_spent))
    return [limit for limit in found if limit is not None]


class BudgetWatch(BaseCallbackHandler):
    """Compares a run's spend with its budget after each model call."""

    run_inline = True  # in the run's task, right after its journal counted the call
    raise_error = False

    def __init__(
        self,
        limits: list[Limit],
        counts: Callable[[], list[TokenCount]],
        frames: EmitsFrames | None,  # None: the run does not stream `custom`
        records: EmitsRecords,
        exceeded: Callable[[BudgetExceeded], None],
    ) -> None:
        self.limits = limits
        self.counts = counts
        self.frames = frames
        self.records = records
        self.exceeded = exceeded
        self.warned: set[str] = set()
        self.crossed: BudgetExceeded | None = None

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        if not self.limits or self.crossed is not None:
            return
        run_spent = spent(self.counts())
        for limit in self.limits:
            used = limit.spent_before + run_spent[limit.counted_in]
            if limit.counted_in == "cost":
                used = round(used, 10)
            if used >= WARN_AT * limit.value and limit.name not in self.warned:
                self.warned.add(limit.name)  # before the stop, when one call crosses both
                self._note("warning", limit.name, limit.value, used)
            if used > limit.value and self.crossed is None:
                self.crossed = BudgetExceeded(limit.name, limit.value, used)
                self._note("exceeded", limit.name, limit.value, used)
                self.exceeded(self.crossed)

    def _note(self, event: str, limit: str, value: float, used: float) -> None:
        fields = {"limit": limit, "value": value, "used": used}
        self.records.emit("budget", {"event": event, **fields})
        if event == "warning" and self.frames is not None:
            self.frames.emit("custom", codec.dumps({"type": "budget_warning", **fields}))


def budget_watch(
    scope: RunScope | None,
    kwargs: dict[str, Any],
    counts: Callable[[], list[TokenCount]],
    exceeded: Callable[[BudgetExceeded], None],
) -> BudgetWatch | None:
    """The watch of a run with a budget or an owner with a daily limit (None: neither)."""
    if scope is None:
        return None
    limits = limits_of(scope.limits.budget, scope.limits.day)
    if not limits:
        return None
    streams_custom = "custom" in requested_names(kwargs.get("stream_mode"))
    frames = scope.frames if streams_custom else None
    return BudgetWatch(limits, counts, frames, scope.records, exceeded)


async def with_day_allowance(limits: RunLimits, peers: RunnerPeers, owner_id: str) -> RunLimits:
    """`limits` with the owner's daily allowance, asked of admission as the run
    starts (only where some owner has a daily limit). Admission checked the day
    when it admitted the run; if it cannot answer now, the run goes on without
    the day's watch, and the log says so."""
    if not limits.day_limited:
        return limits
    request = admission_pb2.GetQuotaRequest(principal_id=owner_id)
    try:
        report = await patiently(
            lambda deadline: peers.admission.GetQuota(request, timeout=deadline),
            "GetQuota",
            rpc_timeout=peers.rpc_timeout,
            window=peers.outage_seconds,
        )
    except Exception as error:
        log.warning("the day's allowance of %s is unknown, not watched: %s", owner_id, error)
        return limits
    return replace(limits, day=DayAllowance.from_report(codec.loads(report.report_json, {})))
