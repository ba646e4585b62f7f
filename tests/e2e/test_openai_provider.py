"""The `openai` provider end to end: lead_agent streams from an OpenAI-compatible
server (a local stub), and a model outside the configured list is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import BadRequestError

from tests.support.helpers import says
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.stacks import running_stack, stack_env
from waybill.common.launch import Stack

STUB_REPLY = "Hello from the stub: hi there"
# The stub counts words: "hi there" in, six reply tokens out.
LEAD_AGENT_TOOLS = {
    "add",
    "echo",
    "wait",
    "ask_clarification",
    "write_file",
    "read_file",
    "list_files",
    "edit_file",
    "present_files",
}


def write_config(path: Path, stub: OpenAIStub) -> Path:
    models = [
        {"name": "scripted", "provider": "scripted"},
        {"name": "stub-gpt", "provider": "openai", "model": "gpt-stub", "base_url": stub.base_url},
    ]
    path.write_text(yaml.safe_dump({"models": models}))
    return path


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as served:
        yield served


@pytest.fixture(scope="module")
def stack(stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An embedded stack whose YAML config names the scripted model and the stub."""
    data_dir = tmp_path_factory.mktemp("stack-openai")
    config = write_config(data_dir / "waybill.yaml", stub)
    with running_stack(stack_env(data_dir, WAYBILL_CONFIG=str(config)), data_dir) as running:
        yield running


async def test_lead_agent_streams_tokens_from_the_openai_model(
    client: LangGraphClient, stub: OpenAIStub
) -> None:
    thread = await client.threads.create()
    seen = len(stub.requests)

    tokens: list[str] = []
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input=says("hi there"),
        context={"model_name": "stub-gpt"},
        stream_mode="messages-tuple",
    ):
        if part.event == "messages":
            chunk, _metadata = part.data
            tokens.append(chunk["content"])
    assert "".join(tokens) == STUB_REPLY
    assert len([t for t in tokens if t]) == len(STUB_REPLY.split(" "))  # token by token

    [request] = stub.requests[seen:]
    assert request["model"] == "gpt-stub"
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert request["messages"][0]["role"] == "system"  # the lead agent's prompt
    assert request["messages"][-1] == {"role": "user", "content": "hi there"}
    assert {tool["function"]["name"] for tool in request["tools"]} == LEAD_AGENT_TOOLS

    # The usage the stub reported (it counts the words it was sent) reaches the state.
    prompt_words = sum(len(str(m["content"]).split()) for m in request["messages"])
    state = await client.threads.get_state(thread["thread_id"])
    answer = state["values"]["messages"][-1]
    assert (answer["type"], answer["content"]) == ("ai", STUB_REPLY)
    reply_words = len(STUB_REPLY.split(" "))
    assert answer["usage_metadata"]["input_tokens"] == prompt_words
    assert answer["usage_metadata"]["output_tokens"] == reply_words
    assert answer["usage_metadata"]["total_tokens"] == prompt_words + reply_words


async def test_a_model_that_is_not_configured_is_refused_before_any_run(
    client: LangGraphClient, stub: OpenAIStub
) -> None:
    thread = await client.threads.create()
    seen = len(stub.requests)

    with pytest.raises(BadRequestError) as refusal:
        await client.runs.create(
            thread["thread_id"], "lead_agent", input=says("hi"), context={"model_name": "nope"}
        )
    assert refusal.value.status_code == 400
    message = refusal.value.message
    assert "'nope'" in message
    assert "allowed models: scripted, stub-gpt" in message

    with pytest.raises(BadRequestError):  # streaming is refused the same way, up front
        async for _ in client.runs.stream(
            thread["thread_id"], "lead_agent", input=says("hi"), context={"model_name": "nope"}
        ):
            pass

    assert await client.runs.list(thread["thread_id"]) == []
    assert len(stub.requests) == seen
