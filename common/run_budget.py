"""A run's own budget: the YAML `quotas.run` (`max_tokens`, `max_cost`), lowered
per request under `config.configurable.waybill_budget` (an assistant's config may
set it too: it is merged into the run's). Admission refuses a request above the
configured budget; the runner enforces the lower of the two (services/runner/run/budget.py).

Also what the run's owner may still spend today (`DayAllowance`): the runner stops
a run that takes its owner past `tokens_per_day` or `cost_per_day` as it stops one
past its own budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from waybill.common.config_file import QuotasSection, RunBudget

BUDGET_KEY = "waybill_budget"


def requested_budget(kwargs: dict[str, Any]) -> RunBudget:
    """The budget a run's request asks for (empty when it asks none); ValueError
    when `configurable.waybill_budget` is not one."""
    config = kwargs.get("config") if isinstance(kwargs.get("config"), dict) else {}
    configurable = config.get("configurable") if isinstance(config, dict) else None
    asked = (configurable or {}).get(BUDGET_KEY) if isinstance(configurable, dict) else None
    if asked is None:
        return RunBudget()
    try:
        return RunBudget.model_validate(asked)
    except ValidationError as error:
        raise ValueError(f"configurable.{BUDGET_KEY}: {error.errors()[0]['msg']}") from None


def above_configured(asked: RunBudget, configured: RunBudget) -> str | None:
    """Why `asked` is refused (it is above the configured budget), or None."""
    for name in ("max_tokens", "max_cost"):
        mine, allowed = getattr(asked, name), getattr(configured, name)
        if mine is not None and allowed is not None and mine > allowed:
            return (
                f"configurable.{BUDGET_KEY}.{name} is {mine}, above the configured "
                f"quotas.run.{name} of {allowed}: a run's budget may only be lowered."
            )
    return None


def lowered(configured: RunBudget, asked: RunBudget) -> RunBudget:
    """The budget a run runs under: per limit, the lower of the two that are set."""

    def lower(one: float | None, other: float | None) -> Any:
        return other if one is None else one if other is None else min(one, other)

    return RunBudget(
        max_tokens=lower(configured.max_tokens, asked.max_tokens),
        max_cost=lower(configured.max_cost, asked.max_cost),
    )


@dataclass(frozen=True)
class DayAllowance:
    """The owner's daily limits and the ledger's spend of the day when the run
    started (admission's `GetQuota`). Runs of one owner that overlap do not see
    each other's spend until each ends and reports it: together they may overshoot
    the day by what they spend at once."""

    tokens_per_day: int | None
    cost_per_day: float | None
    tokens_spent: int
    cost_spent: float

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> DayAllowance | None:
        """From a quota report (services/admission/runs/quotas.py); None: no daily limit."""
        limits, use = report.get("limits") or {}, report.get("use") or {}
        tokens, cost = limits.get("tokens_per_day"), limits.get("cost_per_day")
        if tokens is None and cost is None:
            return None
        return cls(
            tokens_per_day=None if tokens is None else int(tokens),
            cost_per_day=None if cost is None else float(cost),
            tokens_spent=int(use.get("tokens_today") or 0),
            cost_spent=float(use.get("cost_today") or 0.0),
        )


def limits_any_day(section: QuotasSection) -> bool:
    """Whether any owner has a daily limit (else no run asks for its allowance)."""
    sets = [section.default, *section.roles.values(), *section.principals.values()]
    return any(s.tokens_per_day is not None or s.cost_per_day is not None for s in sets)
