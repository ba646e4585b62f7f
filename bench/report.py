"""Medians, ratios, the plain-text tables and the JSON documents."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.timing import RunTiming

Metric = Callable[[RunTiming], float]

METRICS: dict[str, Metric] = {
    "events": lambda run: run.events,
    "seconds": lambda run: run.seconds,
    "events_per_second": lambda run: run.events_per_second,
    "first_token_seconds": lambda run: run.first_token_seconds,
    "delivery_seconds": lambda run: run.delivery_seconds,
    "tail_seconds": lambda run: run.tail_seconds,
}

# (label, metric, scale for display, whether the (b)/(a) ratio means something)
ROWS: list[tuple[str, str, float, bool]] = [
    ("events", "events", 1.0, False),
    ("stream time, ms (sent -> closed)", "seconds", 1000.0, True),
    ("events/s", "events_per_second", 1.0, True),
    ("first-token latency, ms", "first_token_seconds", 1000.0, True),
    ("first token -> last event, ms", "delivery_seconds", 1000.0, False),
    ("last event -> stream closed, ms", "tail_seconds", 1000.0, False),
]
RATIO_METRICS = ["events_per_second", "first_token_seconds", "seconds"]


@dataclass
class SideResult:
    """Every measured run of one side, by token count, and its CPU per run."""

    name: str
    runs: dict[int, list[RunTiming]] = field(default_factory=dict)
    cpu_seconds_per_run: dict[int, dict[str, float]] = field(default_factory=dict)

    def median(self, tokens: int, metric: str) -> float:
        return statistics.median(METRICS[metric](run) for run in self.runs[tokens])


def number(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def table(baseline: SideResult, gateway: SideResult, sizes: list[int]) -> str:
    width = 36
    lines = [f"{'':{width}}{'(a) in-process':>16}{'(b) gateway':>14}{'(b)/(a)':>10}"]
    for tokens in sorted(sizes, reverse=True):
        lines.append(f"{tokens:,}-token run")
        for label, metric, scale, with_ratio in ROWS:
            a = baseline.median(tokens, metric)
            b = gateway.median(tokens, metric)
            ratio = f"{b / a:.2f}x" if with_ratio and a else ""
            lines.append(
                f"  {label:{width - 2}}{number(a * scale):>16}{number(b * scale):>14}{ratio:>10}"
            )
    return "\n".join(lines)


def cpu_table(sides: list[SideResult], tokens: int) -> str:
    lines = [f"CPU per {tokens:,}-token run, ms (mean of the measured runs)"]
    for side in sides:
        spent = side.cpu_seconds_per_run.get(tokens, {})
        parts = [f"{name} {seconds * 1000:,.0f}" for name, seconds in spent.items()]
        total = sum(spent.values()) * 1000
        lines.append(f"  {side.name}: {', '.join(parts)}  (total {total:,.0f})")
    return "\n".join(lines)


def side_document(side: SideResult) -> dict[str, Any]:
    return {
        "medians": {
            str(tokens): {metric: side.median(tokens, metric) for metric in METRICS}
            for tokens in side.runs
        },
        "cpu_seconds_per_run": {str(t): cpu for t, cpu in side.cpu_seconds_per_run.items()},
        "runs": {
            str(tokens): [run.as_dict() for run in runs] for tokens, runs in side.runs.items()
        },
    }


def ratios(baseline: SideResult, gateway: SideResult) -> dict[str, dict[str, float]]:
    return {
        str(tokens): {
            metric: gateway.median(tokens, metric) / baseline.median(tokens, metric)
            for metric in RATIO_METRICS
        }
        for tokens in baseline.runs
    }


@dataclass
class Latencies:
    """Durations of one measurement, in seconds, one entry per repetition for each figure."""

    name: str
    labels: dict[str, str]  # figure -> how the table names it
    parameters: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, figures: dict[str, float]) -> None:
        for figure, seconds in figures.items():
            self.samples.setdefault(figure, []).append(seconds)

    def median(self, figure: str) -> float:
        return statistics.median(self.samples[figure])


def latency_table(result: Latencies) -> str:
    width = 52
    lines = [f"{'':{width}}{'median':>10}{'min':>10}{'max':>10}"]
    for figure, label in result.labels.items():
        samples = result.samples.get(figure)
        if not samples:
            continue
        shown = [result.median(figure), min(samples), max(samples)]
        cells = "".join(f"{number(seconds * 1000):>10}" for seconds in shown)
        lines.append(f"  {label:{width - 2}}{cells}")
    return "\n".join(lines)


def latency_document(result: Latencies) -> dict[str, Any]:
    return {
        "parameters": result.parameters,
        "medians": {figure: result.median(figure) for figure in result.samples},
        "runs": result.samples,
    }
