"""The verdict of a run's delivery, from files and tool calls only (never from
what the model wrote). The rules, first match wins:

| how the run ended / what it did                       | verdict            | run     |
|-------------------------------------------------------|--------------------|---------|
| agent without workspace tools                         | not_applicable     | as ended|
| graph raised or timed out                             | error (its error)  | error   |
| cancelled                                             | cancelled          | as ended|
| paused on an interrupt                                | paused             | success |
| a presented file does not exist                       | error              | error   |
| a presented file was not produced by this run         | error              | error   |
| files produced, none presented                        | error ("delivery incomplete") | error |
| presented files, all produced                         | delivered          | success |
| nothing produced, nothing presented                   | nothing_to_deliver | success |
"""

from __future__ import annotations

from dataclasses import dataclass, field

from waybill.services.delivery.workspace_files import Change, FileEntry, normalized


@dataclass
class Verdict:
    verdict: str
    reason: str = ""
    presented: list[str] = field(default_factory=list)
    produced: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)


@dataclass
class RunEnding:
    outcome: str  # success | error | timeout | interrupted (how the graph ended)
    error_message: str
    verify_workspace: bool
    paused: bool
    presented: list[str]


def _listed(paths: list[str]) -> str:
    return ", ".join(paths)


def judge(ending: RunEnding, changed: list[Change], after: list[FileEntry]) -> Verdict:
    presented = sorted({normalized(p) for p in ending.presented if normalized(p)})
    produced = sorted(c.path for c in changed if c.change in ("created", "modified"))
    existing = {entry.path for entry in after}
    matched = [p for p in presented if p in produced]
    base = {"presented": presented, "produced": produced, "matched": matched}
    if not ending.verify_workspace:
        return Verdict("not_applicable", "the agent has no workspace tools", **base)
    if ending.outcome in ("error", "timeout"):
        return Verdict("error", ending.error_message or f"the run ended {ending.outcome}", **base)
    if ending.outcome == "interrupted":
        return Verdict("cancelled", "the run was cancelled before it finished", **base)
    if ending.paused:
        return Verdict("paused", "the run is waiting for a human (interrupt)", **base)
    missing = [p for p in presented if p not in existing]
    if missing:
        return Verdict("error", f"presented files do not exist: {_listed(missing)}", **base)
    stale = [p for p in presented if p not in produced]
    if stale:
        return Verdict(
            "error", f"presented files were not produced by this run: {_listed(stale)}", **base
        )
    if produced and not presented:
        return Verdict(
            "error",
            f"delivery incomplete: the run produced {_listed(produced)} but presented none "
            "(call present_files with the deliverables)",
            **base,
        )
    if presented:
        return Verdict("delivered", f"delivered {_listed(presented)}", **base)
    return Verdict("nothing_to_deliver", "the run produced and presented no files", **base)
