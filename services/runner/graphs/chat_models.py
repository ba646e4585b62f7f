"""`create_chat_model(name)` is the only way a model is built.

The configured names (YAML `models`) are the allowlist. `scripted` (deterministic,
streams tokens, no network; the default) is built here; every other provider
(`openai` against any OpenAI-compatible `base_url`, `anthropic`, any LangChain
chat model) in model_providers.py.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from waybill.common.config_file import ModelSpec
from waybill.common.model_overrides import ModelOverrides
from waybill.common.settings import Settings
from waybill.services.runner.graphs.model_providers import ProviderError, build_provider_model
from waybill.services.runner.stats import STATS


class UnknownModelError(ValueError):
    pass


@dataclass(frozen=True)
class ModelCatalog:
    """The configured models (YAML `models`, the allowlist) and the default one."""

    specs: tuple[ModelSpec, ...]
    default: str

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelCatalog:
        return cls(tuple(settings.models()), settings.default_model())


class ScriptedChatModel(BaseChatModel):
    """A deterministic model scripted by the last human message.

    - `/tool NAME {"arg": 1}` answers with a call of tool NAME;
    - `/tools [{"name": NAME, "args": {...}}, ...]` calls those tools one per
      turn, in order, then reports what the last one returned;
    - `/tokens N` streams N tokens (`t0 t1 …`), for benchmarks;
    - `/system` answers with the system prompt it was shown (what the agent told it);
    - asked for facts as JSON (a system prompt holding `{"facts":`, as memory
      extraction's does), it answers `{"facts": [...]}` with what follows each
      `remember:` in the last human message, one fact per line;
    - anything else is echoed back as `You said: …`, one token per word.
    After a tool result it reports what the tool returned.
    """

    reply: str | None = None
    model_name: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _plan(self, messages: list[BaseMessage]) -> tuple[list[str], list[dict[str, Any]]]:
        """(tokens to stream, tool calls to make) for this turn."""
        last = messages[-1] if messages else None
        script = _tool_script(messages)
        if script is not None:
            done = _turns_since_human(messages)
            if done < len(script):
                step = script[done]  # one call, or a list of calls made in one turn
                return [], [_call(one) for one in (step if isinstance(step, list) else [step])]
        if isinstance(last, ToolMessage):
            return _words(f"Tool {last.name} returned: {last.content}"), []
        text = str(last.content) if isinstance(last, HumanMessage) else ""
        system = _system_prompt(messages)
        if FACTS_REQUEST in system:
            return [json.dumps({"facts": _remembered(text)})], []
        if text.strip() == "/system":
            return _words(system), []
        if text.startswith("/tool "):
            name, _, raw_args = text[len("/tool ") :].strip().partition(" ")
            args = json.loads(raw_args) if raw_args.strip() else {}
            return [], [{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}"}]
        if text.startswith("/tokens "):
            count = int(text.split()[1])
            return [f"t{i} " for i in range(count)], []
        return _words(self.reply or f"You said: {text}"), []

    def _usage(self, messages: list[BaseMessage], tokens: list[str]) -> dict[str, int]:
        prompt = sum(len(str(m.content).split()) for m in messages)
        return {
            "input_tokens": prompt,
            "output_tokens": len(tokens),
            "total_tokens": prompt + len(tokens),
        }

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tokens, tool_calls = self._plan(messages)
        message = AIMessage(
            content="".join(tokens),  # the same text the streamed chunks add up to
            tool_calls=tool_calls,
            usage_metadata=self._usage(messages, tokens),  # type: ignore[arg-type]
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from self._chunks(messages)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            yield chunk

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        tokens, tool_calls = self._plan(messages)
        for token in tokens:
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_call_chunks=[
                    tool_call_chunk(
                        name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=i
                    )
                    for i, call in enumerate(tool_calls)
                ],
                usage_metadata=self._usage(messages, tokens),  # type: ignore[arg-type]
                chunk_position="last",
            )
        )


FACTS_REQUEST = '{"facts":'
REMEMBER = re.compile(r"remember:\s*(.+)")


def _system_prompt(messages: list[BaseMessage]) -> str:
    first = messages[0] if messages else None
    return str(first.content) if isinstance(first, SystemMessage) else ""


def _remembered(text: str) -> list[str]:
    """What follows each `remember:` in `text`, once each, in order."""
    found = (match.group(1).strip() for match in REMEMBER.finditer(text))
    return list(dict.fromkeys(fact for fact in found if fact))


def _last_human(messages: list[BaseMessage]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return index
    return -1


def _tool_script(messages: list[BaseMessage]) -> list[Any] | None:
    """The steps of a `/tools [...]` message, when the last human message is one."""
    index = _last_human(messages)
    text = str(messages[index].content) if index >= 0 else ""
    if not text.startswith("/tools "):
        return None
    steps = json.loads(text[len("/tools ") :])
    return [[dict(one) for one in step] if isinstance(step, list) else dict(step) for step in steps]


def _call(step: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": step["name"],
        "args": step.get("args") or {},
        "id": f"call_{uuid.uuid4().hex[:12]}",
    }


def _turns_since_human(messages: list[BaseMessage]) -> int:
    """Model turns taken since the last human message."""
    index = _last_human(messages)
    return sum(1 for m in messages[index + 1 :] if isinstance(m, AIMessage))


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word + " " for word in words[:-1]] + [words[-1]]


def _build(spec: ModelSpec, overrides: ModelOverrides) -> BaseChatModel:
    STATS.models_built += 1
    if spec.provider == "scripted":
        return ScriptedChatModel(model_name=spec.name, **spec.options)
    effort = overrides.reasoning_effort or spec.reasoning_effort
    try:
        return build_provider_model(spec, effort, overrides.params)
    except ProviderError as error:
        raise UnknownModelError(f"model '{spec.name}': {error}") from None


def create_chat_model(
    name: str | None,
    models: ModelCatalog,
    overrides: ModelOverrides | None = None,
) -> BaseChatModel:
    """The configured model `name` (else the default), with a run's `overrides`
    (reasoning effort, sampling parameters: see common/model_overrides.py)."""
    wanted = name or models.default
    for spec in models.specs:
        if spec.name == wanted:
            model = _build(spec, overrides or ModelOverrides())
            # The run journal counts tokens under the configured name (see run_journal.py).
            model.metadata = {**(model.metadata or {}), "waybill_model": spec.name}
            return model
    allowed = ", ".join(spec.name for spec in models.specs)
    raise UnknownModelError(f"model '{wanted}' is not configured; allowed models: {allowed}")
