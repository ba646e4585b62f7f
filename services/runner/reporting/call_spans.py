"""A span per model call and per tool call, in the run's trace (tracing on).

Named and tagged by OpenTelemetry's GenAI semantic conventions, which tracing
backends (Langfuse, Jaeger, Grafana Tempo, Phoenix) read: `chat <model>` with
`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens` and
`gen_ai.response.finish_reasons`; `execute_tool <name>` with `gen_ai.tool.name`
and `gen_ai.tool.call.id`. A span's duration is the call's latency. Prompts,
answers and tool arguments are left out unless the standard
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` asks for them.

A LangChain callback handler, beside the run's journal: it touches nothing else.
"""

from __future__ import annotations

import json
import os
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from waybill.common.tracing import tracing_on
from waybill.services.runner.reporting.run_journal import model_of, provider_model_of
from waybill.services.runner.reporting.token_ledger import usage_of

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_MAX = 16_000  # characters of one captured attribute


def call_spans() -> CallSpans | None:
    """The handler for one run (made inside its span), or None with tracing off."""
    if not tracing_on():
        return None
    return CallSpans(os.environ.get(CAPTURE_CONTENT, "").lower() == "true")


class CallSpans(BaseCallbackHandler):
    run_inline = True  # in the run's own task: spans open and close in call order

    def __init__(self, capture_content: bool) -> None:
        self.capture_content = capture_content
        self.parent = context.get_current()  # the run's span, and its baggage (run ids)
        self.tracer = trace.get_tracer("waybill.runner")
        self.spans: dict[UUID, Span] = {}
        self.requested: dict[UUID, str] = {}  # a model call's requested model

    # ---- model calls -------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        span = self._model_started("chat", serialized, run_id, parent_run_id, metadata or {})
        if self.capture_content and messages:
            span.set_attribute("gen_ai.input.messages", _json([_message(m) for m in messages[0]]))

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        operation = "text_completion"
        span = self._model_started(operation, serialized, run_id, parent_run_id, metadata or {})
        if self.capture_content:
            span.set_attribute(
                "gen_ai.input.messages", _json([{"role": "user", "content": p} for p in prompts])
            )

    def _model_started(
        self,
        operation: str,
        serialized: dict[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any],
    ) -> Span:
        model = model_of(serialized, metadata)
        requested = str(metadata.get("ls_model_name") or model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": requested,
            "waybill.model": model,
        }
        provider = metadata.get("ls_provider")
        if provider:
            attributes["gen_ai.provider.name"] = str(provider)
            attributes["gen_ai.system"] = str(provider)  # the older conventions' name
        for source, name in (
            ("ls_temperature", "gen_ai.request.temperature"),
            ("ls_max_tokens", "gen_ai.request.max_tokens"),
        ):
            if metadata.get(source) is not None:
                attributes[name] = metadata[source]
        self.requested[run_id] = requested
        return self._start(f"{operation} {requested}", run_id, parent_run_id, attributes)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        span = self.spans.pop(run_id, None)
        if span is None:
            return
        requested = self.requested.pop(run_id, "")
        span.set_attribute("gen_ai.response.model", provider_model_of(response, requested))
        usage = usage_of(response)
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        reasons = _finish_reasons(response)
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if self.capture_content:
            answers = [
                _message(getattr(g, "message", None) or {"role": "assistant", "content": g.text})
                for generations in response.generations
                for g in generations
            ]
            span.set_attribute("gen_ai.output.messages", _json(answers))
        span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.requested.pop(run_id, None)
        self._failed(run_id, error)

    # ---- tool calls --------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        if kwargs.get("tool_call_id"):
            attributes["gen_ai.tool.call.id"] = str(kwargs["tool_call_id"])
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = input_str[:CONTENT_MAX]
        self._start(f"execute_tool {name}", run_id, parent_run_id, attributes)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        span = self.spans.pop(run_id, None)
        if span is None:
            return
        if str(getattr(output, "status", None) or "success") == "error":
            span.set_status(Status(StatusCode.ERROR, "the tool answered with an error"))
        if self.capture_content:
            result = getattr(output, "content", output)
            span.set_attribute("gen_ai.tool.call.result", str(result)[:CONTENT_MAX])
        span.end()

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._failed(run_id, error)

    # ---- spans -------------------------------------------------------------------

    def _start(
        self, name: str, run_id: UUID, parent_run_id: UUID | None, attributes: dict[str, Any]
    ) -> Span:
        """A model call made by a tool (a subagent) nests under the tool's span."""
        outer = self.spans.get(parent_run_id) if parent_run_id else None
        parent = trace.set_span_in_context(outer, self.parent) if outer else self.parent
        span = self.tracer.start_span(name, parent, kind=SpanKind.CLIENT, attributes=attributes)
        self.spans[run_id] = span
        return span

    def _failed(self, run_id: UUID, error: BaseException) -> None:
        span = self.spans.pop(run_id, None)
        if span is None:
            return
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()


def _message(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        return {"role": message.get("role", ""), "content": str(message.get("content", ""))}
    role = {"human": "user", "ai": "assistant"}.get(getattr(message, "type", ""), "")
    return {"role": role or getattr(message, "type", ""), "content": str(message.content)}


def _finish_reasons(response: LLMResult) -> list[str]:
    reasons = []
    for generations in response.generations:
        for generation in generations:
            info = generation.generation_info or {}
            metadata = getattr(getattr(generation, "message", None), "response_metadata", {})
            reason = info.get("finish_reason") or (metadata or {}).get("finish_reason")
            if reason:
                reasons.append(str(reason))
    return reasons


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:CONTENT_MAX]
