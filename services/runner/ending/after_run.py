"""The runner's work after a run of the lead agent ended: the user's memory and the
thread's title, in the background (the run's end is not delayed by them).

Fenced like every durable write: the model calls come first, then their tokens go
to admission's ledger (`RecordRunUsage`), which accepts them only from the epoch
whose terminal status it accepted. Only then are the facts stored and the title
set; a stale epoch (a zombie runner) writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import grpc
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.store.base import BaseStore

from waybill.common import codec
from waybill.common.config_file import MemorySection, TitlesSection
from waybill.common.settings import Settings
from waybill.common.usage import TokenCount
from waybill.services.runner.agent import memory, titles
from waybill.services.runner.graphs.chat_models import ModelCatalog, create_chat_model
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.reporting.token_ledger import token_count_proto
from waybill.services.runner.stats import STATS
from waybill.v1 import admission_pb2

log = logging.getLogger("waybill.runner.after_run")

GRAPHS_WITH_HARNESS = {"lead_agent"}


@dataclass
class AfterRun:
    """What one ended run leaves to do, and what it spent doing it."""

    run_id: str
    epoch: int
    thread_id: str
    user_id: str
    messages: list[BaseMessage]
    counts: dict[tuple[str, str], TokenCount] = field(default_factory=dict)

    def count(self, model: str, source: str, answer: AIMessage) -> None:
        usage: Any = answer.usage_metadata or {}
        found = self.counts.setdefault((model, source), TokenCount(model, source))
        found.llm_calls += 1
        found.input_tokens += int(usage.get("input_tokens") or 0)
        found.output_tokens += int(usage.get("output_tokens") or 0)
        found.total_tokens += int(usage.get("total_tokens") or 0)
        details = usage.get("input_token_details") or {}
        found.cache_read_tokens += int(details.get("cache_read") or 0)


def wanted(graph_id: str, memory: MemorySection, titles: TitlesSection) -> bool:
    return graph_id in GRAPHS_WITH_HARNESS and (memory.enabled or titles.enabled)


async def after_run(
    work: AfterRun, store: BaseStore, peers: RunnerPeers, settings: Settings
) -> bool:
    """Extract, make the title, record their tokens, then write both if admission
    accepted this epoch. False (nothing written) when it refused."""
    config = settings.config_file()
    facts = await _facts(work, store, settings) if config.memory.enabled else []
    title = await _title(work, peers, settings) if config.titles.enabled else ""
    prices = settings.prices()
    report = admission_pb2.RunUsageReport(
        run_id=work.run_id,
        epoch=work.epoch,
        token_counts=[token_count_proto(c.priced(prices)) for c in work.counts.values()],
    )
    reply = await peers.admission.RecordRunUsage(report, timeout=peers.rpc_timeout)
    if not reply.accepted:
        STATS.stale_writes_refused += 1
        log.warning("run %s: epoch %d is stale; no memory, no title", work.run_id, work.epoch)
        return False
    if title:
        try:
            await peers.admission.PatchThread(
                admission_pb2.PatchThreadRequest(
                    thread_id=work.thread_id,
                    metadata_if_absent_json=codec.dumps({titles.TITLE_KEY: title}),
                ),
                timeout=peers.rpc_timeout,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:  # deleted meanwhile: no title
                raise
    if facts:  # last: once they are there, the title is too
        max_facts = config.memory.max_facts
        await memory.remember(store, work.user_id, facts, max_facts, work.thread_id, work.run_id)
    return True


async def _facts(work: AfterRun, store: BaseStore, settings: Settings) -> list[str]:
    section = settings.config_file().memory
    name = section.model or settings.default_model()
    known = await memory.recall(store, work.user_id, section.max_facts)
    model = create_chat_model(name, ModelCatalog.from_settings(settings))
    facts, answer = await memory.extract_facts(model, work.messages, known)
    work.count(name, "memory", answer)
    return facts


async def _title(work: AfterRun, peers: RunnerPeers, settings: Settings) -> str:
    try:
        thread = await peers.admission.GetThread(
            admission_pb2.GetThreadRequest(thread_id=work.thread_id), timeout=peers.rpc_timeout
        )
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:  # a stateless run's thread, gone
            return ""
        raise
    if not titles.wants_title(work.messages, codec.loads(thread.metadata_json, {})):
        return ""
    section = settings.config_file().titles
    name = section.model or settings.default_model()
    title, answer = await titles.make_title(
        create_chat_model(name, ModelCatalog.from_settings(settings)),
        work.messages,
        section.max_chars,
    )
    work.count(name, "title", answer)
    return title  # empty when the model answered no text (a tool call...)


async def after_run_logged(
    work: AfterRun, store: BaseStore, peers: RunnerPeers, settings: Settings
) -> None:
    """`after_run` in the background: a failure is logged, never raised (the run has ended)."""
    try:
        await after_run(work, store, peers, settings)
    except Exception:
        log.exception("run %s: memory or title failed", work.run_id)
