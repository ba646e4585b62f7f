"""Frames: a token's message is encoded exactly as `model_dump()` would give it."""

from __future__ import annotations

import orjson
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.messages.tool import tool_call_chunk

from waybill.services.runner.reporting.frames import FrameEncoder, message_json

MESSAGES = [
    AIMessageChunk(
        content="a",
        id="m1",
        tool_call_chunks=[tool_call_chunk(name="f", args='{"a": 1}', id="c1", index=0)],
        usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        response_metadata={"model_name": "m"},
        chunk_position="last",
    ),
    AIMessage(
        content=[{"type": "text", "text": "hi"}],
        tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c1"}],
    ),
    ToolMessage(content="r", tool_call_id="c1", artifact={"k": 1}, status="error"),
    ToolMessageChunk(content="t", tool_call_id="c2"),
    HumanMessage(content="h", name="bob"),
    HumanMessage(content="with an extra field", shown_to="everyone"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_is_encoded_as_its_model_dump(message: BaseMessage) -> None:
    assert orjson.loads(message_json(message)) == orjson.loads(orjson.dumps(message.model_dump()))


def test_an_extra_field_is_kept() -> None:
    assert orjson.loads(message_json(MESSAGES[-1]))["shown_to"] == "everyone"


def test_messages_tuple_frame_is_the_message_and_its_metadata() -> None:
    encoder = FrameEncoder(["messages-tuple"])
    metadata = {"langgraph_node": "agent", "langgraph_step": 1}
    [(name, payload)] = encoder.encode("messages", (), (MESSAGES[0], metadata))
    assert name == "messages"
    assert orjson.loads(payload) == [MESSAGES[0].model_dump(), metadata]
