"""Any model provider: the lead agent runs the real Anthropic and OpenAI clients
against local stubs of their wire formats (tests/support/anthropic_stub.py streams SSE as
the Messages API does), with `provider:model` names from the YAML config, an
assistant's and a run's overrides (model, sampling parameters, reasoning effort
mapped per provider), and the per-model filter of parameters a provider refuses.
What each stub reports as usage reaches the run record. Embedded and on Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import BadRequestError

from tests.support.anthropic_stub import THOUGHT, AnthropicStub, running_anthropic_stub
from tests.support.helpers import says
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.stacks import stack_in_mode
from waybill.common.config_file import ConfigError, read_config_file
from waybill.common.launch import Stack

KEY_ENV = "WAYBILL_TEST_ANTHROPIC_KEY"
KEY = "sk-ant-stub-key"
CACHED = 2  # the Anthropic stub reports this many prompt tokens as cache reads


def write_config(path: Path, claude: AnthropicStub, gpt: OpenAIStub) -> Path:
    anthropic = {"base_url": claude.base_url, "api_key_env": KEY_ENV}
    openai = {"base_url": gpt.base_url}
    models = [
        {"name": "scripted", "provider": "scripted"},
        {"name": "claude", "model": "anthropic:claude-stub", **anthropic},
        {
            "name": "claude-thinking",
            "model": "anthropic:claude-stub",
            "reasoning_effort": "medium",
            **anthropic,
        },
        # o-series models refuse `temperature`: configured, yet never sent.
        {
            "name": "gpt",
            "model": "openai:gpt-stub",
            **openai,
            "options": {"temperature": 0.3, "top_p": 0.5},
            "drop_params": ["temperature"],
        },
        # A server refusing a field the client itself adds (`stream_options`).
        {
            "name": "gpt-plain",
            "model": "openai:gpt-stub",
            **openai,
            "drop_params": ["stream_options"],
        },
    ]
    path.write_text(yaml.safe_dump({"models": models}))
    return path


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicStub]:
    with running_anthropic_stub(KEY) as served:
        served.cache_read_tokens = CACHED
        yield served


@pytest.fixture(scope="module")
def gpt() -> Iterator[OpenAIStub]:
    with running_openai_stub() as served:
        yield served


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest,
    claude: AnthropicStub,
    gpt: OpenAIStub,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-providers-{request.param}")
    config = write_config(data_dir / "waybill.yaml", claude, gpt)
    env = {"WAYBILL_CONFIG": str(config), KEY_ENV: KEY}
    with stack_in_mode(request.param, data_dir, **env) as running:
        yield running


async def streamed(client: LangGraphClient, thread_id: str, text: str, **run: Any) -> str:
    tokens = []
    async for part in client.runs.stream(
        thread_id,
        run.pop("assistant", "lead_agent"),
        input=says(text),
        stream_mode="messages-tuple",
        **run,
    ):
        if part.event == "messages" and part.data[0]["type"] in ("ai", "AIMessageChunk"):
            chunk, _metadata = part.data
            content = chunk["content"]
            if isinstance(content, list):  # Anthropic's blocks: the text ones
                content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
            tokens.append(content)
    return "".join(tokens)


async def last_run(client: LangGraphClient, thread_id: str) -> dict[str, Any]:
    [run] = await client.runs.list(thread_id, limit=1)
    return dict(run)


async def test_the_anthropic_client_streams_and_its_usage_reaches_the_run(
    client: LangGraphClient, claude: AnthropicStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(claude.requests)
    answer = await streamed(client, thread_id, "hi there", context={"model_name": "claude"})
    assert answer == "Hello from claude: hi there"

    [request] = claude.requests[seen:]
    assert request["model"] == "claude-stub"  # `anthropic:` chose the provider
    assert request["stream"] is True
    assert "thinking" not in request  # no reasoning effort configured for this one
    sent = request["messages"][-1]["content"]
    assert sent in ("hi there", [{"type": "text", "text": "hi there"}])
    assert "add" in {tool["name"] for tool in request["tools"]}
    assert request["system"]  # the lead agent's prompt, where Anthropic takes it

    [reported] = claude.reported[seen:]
    run = await last_run(client, thread_id)
    assert run["status"] == "success"
    prompt = reported["input_tokens"] + reported["cache_read_input_tokens"]
    assert run["usage"]["by_model"]["claude"] == {
        "input_tokens": prompt,
        "output_tokens": reported["output_tokens"],
        "total_tokens": prompt + reported["output_tokens"],
        "cache_read_tokens": CACHED,
        "llm_calls": 1,
        "cost": None,
    }


async def test_an_anthropic_tool_call_round_trips(
    client: LangGraphClient, claude: AnthropicStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(claude.requests)
    call = '/tool add {"a": 2, "b": 3}'
    answer = await streamed(client, thread_id, call, context={"model_name": "claude"})
    assert answer == "The tool said: 5.0"
    first, second = claude.requests[seen:]
    [tool_use] = [b for b in second["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert (tool_use["name"], tool_use["input"]) == ("add", {"a": 2, "b": 3})
    [result] = second["messages"][-1]["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", tool_use["id"])
    run = await last_run(client, thread_id)
    assert run["usage"]["llm_calls"] == 2
    assert run["usage"]["output_tokens"] == sum(r["output_tokens"] for r in claude.reported[seen:])


async def test_reasoning_effort_is_a_thinking_budget_for_anthropic(
    client: LangGraphClient, claude: AnthropicStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(claude.requests)
    answer = await streamed(client, thread_id, "ponder", context={"model_name": "claude-thinking"})
    assert answer == "Hello from claude: ponder"
    [request] = claude.requests[seen:]
    # The configured effort; max_tokens leaves room for the answer beyond the budget.
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert request["max_tokens"] == 8192 + 4096
    state = await client.threads.get_state(thread_id)
    content = state["values"]["messages"][-1]["content"]
    assert [b["type"] for b in content] == ["thinking", "text"]
    assert content[0]["thinking"] == THOUGHT

    # A run asks for another effort: a smaller budget.
    seen = len(claude.requests)
    context = {"model_name": "claude-thinking", "reasoning_effort": "low"}
    await streamed(client, thread_id, "again", context=context)
    [request] = claude.requests[seen:]
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # ... and the thinking of the turn before goes back with its signature.
    earlier = request["messages"][1]["content"]
    assert earlier[0] == {"type": "thinking", "thinking": THOUGHT, "signature": "c2lnbmVk"}

    seen = len(claude.requests)
    off = {"model_name": "claude-thinking", "reasoning_effort": "none"}
    await streamed(client, thread_id, "quickly", context=off)
    assert "thinking" not in claude.requests[seen]


async def test_an_assistant_chooses_the_model_and_its_parameters(
    client: LangGraphClient, gpt: OpenAIStub
) -> None:
    chosen = {
        "model_name": "gpt",
        "reasoning_effort": "medium",
        "model_params": {"top_p": 0.9, "max_tokens": 77},
    }
    assistant = await client.assistants.create("lead_agent", context=chosen)
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(gpt.requests)
    answer = await streamed(client, thread_id, "hello", assistant=assistant["assistant_id"])
    assert answer == "Hello from the stub: hello"
    [request] = gpt.requests[seen:]
    assert request["model"] == "gpt-stub"
    assert (request["top_p"], request["max_completion_tokens"]) == (0.9, 77)
    assert request["reasoning_effort"] == "medium"  # OpenAI's own field
    run = await last_run(client, thread_id)
    assert run["usage"]["by_model"]["gpt"]["llm_calls"] == 1

    # The run's context wins over its assistant's.
    seen = len(gpt.requests)
    mine = {**chosen, "reasoning_effort": "high", "model_params": {"top_p": 0.1}}
    await streamed(client, thread_id, "again", assistant=assistant["assistant_id"], context=mine)
    [request] = gpt.requests[seen:]
    assert (request["reasoning_effort"], request["top_p"]) == ("high", 0.1)
    assert "max_completion_tokens" not in request


async def test_the_parameters_a_provider_refuses_are_never_sent(
    client: LangGraphClient, gpt: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(gpt.requests)
    # `temperature` is configured and asked for by the run, but the model drops it.
    context = {"model_name": "gpt", "model_params": {"temperature": 0.9}}
    await streamed(client, thread_id, "warm", context=context)
    [request] = gpt.requests[seen:]
    assert "temperature" not in request
    assert request["top_p"] == 0.5  # the rest of the options go

    # A field the client adds by itself is filtered from the request it builds.
    seen = len(gpt.requests)
    answer = await streamed(client, thread_id, "plain", context={"model_name": "gpt-plain"})
    assert answer == "Hello from the stub: plain"
    [request] = gpt.requests[seen:]
    assert "stream_options" not in request
    assert request["stream"] is True


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"model_name": "gpt", "model_params": {"base_url": "http://127.0.0.1:9"}}, "base_url"),
        ({"model_name": "gpt", "model_params": {"temperature": "hot"}}, "temperature"),
        ({"model_name": "claude", "reasoning_effort": "extreme"}, "extreme"),
    ],
)
async def test_overrides_outside_the_rules_are_refused_before_any_run(
    client: LangGraphClient, gpt: OpenAIStub, context: dict[str, Any], named: str
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen = len(gpt.requests)
    with pytest.raises(BadRequestError) as refusal:
        await client.runs.create(thread_id, "lead_agent", input=says("hi"), context=context)
    assert refusal.value.status_code == 400
    assert named in refusal.value.message
    assert await client.runs.list(thread_id) == []
    assert len(gpt.requests) == seen


# ---- the config's shape, checked at start-up ------------------------------------------


def test_provider_model_names_the_provider_and_a_bad_effort_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "waybill.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "c", "model": "anthropic:claude-x"}]}))
    [spec] = read_config_file(path).models
    assert (spec.provider, spec.model) == ("anthropic", "claude-x")

    path.write_text(yaml.safe_dump({"models": [{"name": "c", "reasoning_effort": "max"}]}))
    with pytest.raises(ConfigError, match="models.0: Value error, reasoning_effort must be"):
        read_config_file(path)
