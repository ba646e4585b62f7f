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
)

MAX_PAGE = 1000
