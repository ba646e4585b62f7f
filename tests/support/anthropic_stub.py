"""A tiny Anthropic Messages API server for tests: `POST /v1/messages`, streamed
as Anthropic streams it (SSE: `message_start`, `content_block_start|delta|stop`,
`message_delta` with the usage, `message_stop`) or answered whole.

Scripted like tests/support/openai_stub.py: it answers "Hello from claude: <last user
text>", one word per delta; `/tool NAME {"arg": 1}` is answered with a `tool_use`
block; after a `tool_result` it says "The tool said: <result>". A request with
`thinking` enabled gets a thinking block first (with its signature). Token counts
are words: every text of the request in (`input_tokens`, less the
`cache_read_input_tokens` when `cache_read_tokens` is set), the answer's deltas
out (`output_tokens`); `message_start` and the closing `message_delta` carry them.

It refuses, as Anthropic does, a request without the key it was given
(`x-api-key`, or `Authorization: Bearer` as the 2.x client sends it), and a
`budget_tokens` not below `max_tokens`. `requests` keeps every body, `reported`
the usage of each answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.support.openai_stub import serving

THOUGHT = "Let me think about it."


def _texts(content: Any) -> list[str]:
    """Every text in a message's content (a string, or blocks of any kind)."""
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("text", "thinking"):
            texts.append(str(block.get("text") or block.get("thinking") or ""))
        elif block.get("type") == "tool_result":
            texts.extend(_texts(block.get("content")))
        elif block.get("type") == "tool_use":
            texts.append(json.dumps(block.get("input")))
    return texts


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word + " " for word in words[:-1]] + [words[-1]]


def plan(body: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """(the answer's text deltas, the tool_use block to send instead) for a request."""
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content")
    results = [
        b for b in (content if isinstance(content, list) else []) if b.get("type") == "tool_result"
    ]
    if results:
        return _words("The tool said: " + "".join(_texts(results[-1].get("content")))), None
    text = "".join(_texts(content))
    if text.startswith("/tool "):
        name, _, raw_args = text[len("/tool ") :].strip().partition(" ")
        arguments = json.loads(raw_args) if raw_args.strip() else {}
        return [], {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:12]}",
            "name": name,
            "input": arguments,
        }
    return _words(f"Hello from claude: {text}"), None


def input_words(body: dict[str, Any]) -> int:
    system = body.get("system")
    texts = _texts(system) if system else []
    for message in body.get("messages") or []:
        texts.extend(_texts(message.get("content")))
    return sum(len(text.split()) for text in texts)


def event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


class AnthropicStub:
    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.reported: list[dict[str, int]] = []
        self.cache_read_tokens = 0  # this many of a prompt's words are reported as cache reads
        self.app = FastAPI()
        self.app.post("/v1/messages")(self.messages)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def _refusal(status: int, kind: str, message: str) -> JSONResponse:
        error = {"type": "error", "error": {"type": kind, "message": message}}
        return JSONResponse(error, status_code=status)

    async def messages(self, request: Request) -> Any:
        sent = {request.headers.get("x-api-key"), request.headers.get("authorization")}
        if not sent & {self.api_key, f"Bearer {self.api_key}"}:
            return self._refusal(401, "authentication_error", "invalid x-api-key")
        body = await request.json()
        self.requests.append(body)
        thinking = body.get("thinking") or {}
        if thinking.get("type") == "enabled" and thinking["budget_tokens"] >= body["max_tokens"]:
            return self._refusal(
                400, "invalid_request_error", "max_tokens must be greater than budget_tokens"
            )
        deltas, tool_use = plan(body)
        blocks: list[dict[str, Any]] = []
        if thinking.get("type") == "enabled":
            blocks.append({"type": "thinking", "thinking": THOUGHT, "signature": "c2lnbmVk"})
        if deltas:
            blocks.append({"type": "text", "text": "".join(deltas)})
        if tool_use is not None:
            blocks.append(tool_use)
        out = len(deltas) + (len(THOUGHT.split()) if thinking else 0) + (1 if tool_use else 0)
        words = input_words(body)
        cached = min(self.cache_read_tokens, words)
        usage = {
            "input_tokens": words - cached,  # as Anthropic counts: the uncached part
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": out,
        }
        self.reported.append(usage)
        message = {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "stop_reason": "tool_use" if tool_use else "end_turn",
            "stop_sequence": None,
        }
        if not body.get("stream"):
            return JSONResponse({**message, "content": blocks, "usage": usage})
        return StreamingResponse(
            self._sse(message, blocks, deltas, usage), media_type="text/event-stream"
        )

    @staticmethod
    def _sse(
        message: dict[str, Any],
        blocks: list[dict[str, Any]],
        deltas: list[str],
        usage: dict[str, int],
    ) -> Iterator[str]:
        start_usage = {**usage, "output_tokens": 1}
        started = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        yield event("message_start", message=started)
        yield event("ping")
        for index, block in enumerate(blocks):
            if block["type"] == "thinking":
                yield event(
                    "content_block_start",
                    index=index,
                    content_block={"type": "thinking", "thinking": "", "signature": ""},
                )
                for word in _words(block["thinking"]):
                    delta = {"type": "thinking_delta", "thinking": word}
                    yield event("content_block_delta", index=index, delta=delta)
                delta = {"type": "signature_delta", "signature": block["signature"]}
                yield event("content_block_delta", index=index, delta=delta)
            elif block["type"] == "text":
                yield event(
                    "content_block_start", index=index, content_block={"type": "text", "text": ""}
                )
                for word in deltas:
                    delta = {"type": "text_delta", "text": word}
                    yield event("content_block_delta", index=index, delta=delta)
            else:
                yield event(
                    "content_block_start", index=index, content_block={**block, "input": {}}
                )
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                yield event("content_block_delta", index=index, delta=delta)
            yield event("content_block_stop", index=index)
        stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        # As Anthropic does, the last usage is the whole call's (input included).
        yield event("message_delta", delta=stop, usage=usage)
        yield event("message_stop")


@contextmanager
def running_anthropic_stub(api_key: str) -> Iterator[AnthropicStub]:
    """Serve a fresh stub on a free loopback port, in a background thread."""
    stub = AnthropicStub(api_key)
    with serving(stub.app) as port:
        stub.port = port
        yield stub
