"""The typed records a run's journal keeps beside its stream events.

The runner makes them from LangChain callbacks and its own steps; the journal
stores them apart from the SSE frames (they never reach a run's stream); the
gateway lists them at `GET /threads/{tid}/runs/{rid}/events`.
"""

from __future__ import annotations

RECORD_TYPES = (
    "chain_start",  # the run's graph started (the root runnable only)
    "chain_end",  # ... and ended, with its duration
    "chain_error",  # ... or raised (a cancel included)
    "llm_start",  # a model call: model, source (lead_agent | subagents | middleware)
    "llm_end",  # ... its token usage and latency
    "llm_error",  # ... or its error and latency
    "tool_start",  # a tool call: tool name and call id
    "tool_end",  # ... its duration and status
    "tool_error",  # ... or its error and duration
    "middleware",  # a middleware changed a model call (e.g. trimmed the history)
    "delivery",  # what the run delivered: its status and final answer
    "usage",  # the run's token usage, as reported to admission
    "sandbox",  # the run's sandbox: leased (provider, confinement), limit_hit, released
    "subagent",  # a `task` call: its subagent started, ended (answer, status)
    # The tool-call record (services/runner/effects/tool_calls.py), on a later attempt:
    "tool_replayed",  # a call finished before: answered from its record, not run
    "tool_ambiguous",  # started, never finished, not idempotent: the model is told
    "tool_rerun",  # started, never finished, idempotent: run again
    "llm_replayed",  # a model call whose whole response was recorded: not paid again
    "cancel",  # a cancel took the graph down: what it cut, what finished in its grace
    "budget",  # the run's budget (services/runner/run/budget.py): 80 % warning, exceeded
)

MAX_PAGE = 1000
