"""The life of one run on a runner: metadata, astream, journal, receipt, status.

Order at the end matters: events flushed durably -> receipt written -> terminal
status reported -> journal closed. A client whose stream ends therefore always
finds the run's final status.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from common import codec
from services.runner.frames import (
    error_event,
    event_name,
    frame_bytes,
    metadata_event,
    requested_modes,
)
from services.runner.graphs import GraphRegistry
from services.runner.journal_sink import JournalSink
from waybill.v1 import (
    admission_pb2,
    admission_pb2_grpc,
    common_pb2,
    delivery_pb2,
    delivery_pb2_grpc,
    journal_pb2_grpc,
)

log = logging.getLogger("waybill.runner")


@dataclass
class Peers:
    admission: admission_pb2_grpc.AdmissionStub
    journal: journal_pb2_grpc.JournalStub
    delivery: delivery_pb2_grpc.DeliveryStub


@dataclass
class Outcome:
    status: common_pb2.RunStatus
    error: BaseException | None = None


def run_config(run: common_pb2.Run, kwargs: dict[str, Any]) -> RunnableConfig:
    config: dict[str, Any] = dict(kwargs.get("config") or {})
    configurable = dict(config.get("configurable") or {})
    configurable.update(
        thread_id=run.thread_id,
        run_id=run.run_id,
        assistant_id=run.assistant_id,
        graph_id=run.graph_id,
    )
    if kwargs.get("checkpoint_id"):
        configurable["checkpoint_id"] = kwargs["checkpoint_id"]
    config["configurable"] = configurable
    config.setdefault("metadata", {}).update(run_id=run.run_id, thread_id=run.thread_id)
    return config  # type: ignore[return-value]


def graph_input(kwargs: dict[str, Any]) -> Any:
    command = kwargs.get("command")
    if command:
        return Command(
            resume=command.get("resume"),
            update=command.get("update"),
            goto=command.get("goto") or (),
        )
    return kwargs.get("input")


class RunExecution:
    def __init__(self, run: common_pb2.Run, runner_id: str, graphs: GraphRegistry, peers: Peers):
        self.run = run
        self.runner_id = runner_id
        self.graphs = graphs
        self.peers = peers
        self.kwargs: dict[str, Any] = codec.loads(run.kwargs_json, {})
        self.sink = JournalSink(peers.journal, run.run_id, run.epoch)

    async def execute(self) -> None:
        self.sink.emit(*metadata_event(self.run.run_id, self.run.attempt))
        outcome = await self._drive_graph()
        if outcome.error is not None:
            self.sink.emit(*error_event(outcome.error))
        await self.sink.flush()
        final_output = await self._final_output()
        await self._write_receipt(outcome, final_output)
        accepted = await self._report(outcome)
        if accepted:
            await self.sink.close()

    async def _drive_graph(self) -> Outcome:
        config = run_config(self.run, self.kwargs)
        try:
            graph = self.graphs.build(self.run.graph_id, config)
            modes = requested_modes(self.kwargs.get("stream_mode"))
            stream = graph.astream(
                graph_input(self.kwargs),
                config,
                context=self.kwargs.get("context") or None,
                stream_mode=modes,  # type: ignore[arg-type]
                subgraphs=bool(self.kwargs.get("stream_subgraphs")),
                interrupt_before=self.kwargs.get("interrupt_before"),
                interrupt_after=self.kwargs.get("interrupt_after"),
            )
            subgraphs = bool(self.kwargs.get("stream_subgraphs"))
            async for chunk in stream:
                parts: tuple[Any, ...] = chunk if subgraphs else ((), *chunk)  # type: ignore[assignment]
                namespace, mode, data = parts
                self.sink.emit(event_name(mode, namespace), frame_bytes(mode, data))
        except Exception as error:  # the graph's failure ends the run, not the runner
            log.info("run %s failed: %s: %s", self.run.run_id, type(error).__name__, error)
            return Outcome(common_pb2.RUN_STATUS_ERROR, error)
        return Outcome(common_pb2.RUN_STATUS_SUCCESS)

    async def _final_output(self) -> bytes:
        try:
            graph = self.graphs.build(self.run.graph_id, run_config(self.run, self.kwargs))
            snapshot = await graph.aget_state({"configurable": {"thread_id": self.run.thread_id}})
        except Exception:
            return b"null"
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        messages = values.get("messages") or []
        last = messages[-1] if messages else None
        return codec.dumps(
            {
                "state_keys": sorted(values),
                "last_message": getattr(last, "content", None),
                "next": list(snapshot.next),
            }
        )

    async def _write_receipt(self, outcome: Outcome, final_output: bytes) -> None:
        error = outcome.error
        await self.peers.delivery.WriteReceipt(
            delivery_pb2.WriteReceiptRequest(
                run_id=self.run.run_id,
                thread_id=self.run.thread_id,
                epoch=self.run.epoch,
                outcome=outcome.status,
                final_output_json=final_output,
                error=common_pb2.RunError(
                    error=type(error).__name__ if error else "",
                    message=str(error) if error else "",
                ),
            )
        )

    async def _report(self, outcome: Outcome) -> bool:
        error = outcome.error
        reply = await self.peers.admission.FinishRun(
            admission_pb2.RunFinished(
                run_id=self.run.run_id,
                runner_id=self.runner_id,
                epoch=self.run.epoch,
                status=outcome.status,
                stop_reason=f"{type(error).__name__}: {error}" if error else "",
            )
        )
        if not reply.accepted:
            log.warning("admission refused the end of run %s: it was taken over", self.run.run_id)
        return bool(reply.accepted)
