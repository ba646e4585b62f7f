"""A tiny OpenAI-compatible server for tests: `POST /v1/chat/completions`.

It answers "Hello from the stub: <last user message>", one word per token,
streamed (SSE, with the usage chunk when asked) or not, and records every
request body it receives. Token counts are words: the prompt's words in,
the reply's tokens out.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

MODEL_FALLBACK = "gpt-stub"


def text_of(content: Any) -> str:
    """A message's text, whether `content` is a string or a list of parts."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def reply_tokens(messages: list[dict[str, Any]]) -> list[str]:
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    words = f"Hello from the stub: {text_of(last_user.get('content'))}".split(" ")
    return [word + " " for word in words[:-1]] + [words[-1]]


def usage_for(messages: list[dict[str, Any]], tokens: list[str]) -> dict[str, int]:
    prompt = sum(len(text_of(m.get("content")).split()) for m in messages)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": len(tokens),
        "total_tokens": prompt + len(tokens),
    }


class OpenAIStub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat_completions)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def chat_completions(self, request: Request) -> Any:
        body = await request.json()
        self.requests.append(body)
        messages = body.get("messages") or []
        tokens = reply_tokens(messages)
        usage = usage_for(messages, tokens)
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_FALLBACK,
            "system_fingerprint": None,
        }
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(tokens), "refusal": None}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
            return JSONResponse(
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._sse(base, tokens, usage if with_usage else None),
            media_type="text/event-stream",
        )

    @staticmethod
    def _sse(
        base: dict[str, Any], tokens: list[str], usage: dict[str, int] | None
    ) -> Iterator[str]:
        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            payload = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            if usage is not None:
                payload.setdefault("usage", None)  # as OpenAI: null on every chunk but the last
            return f"data: {json.dumps(payload)}\n\n"

        def delta(content: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": content, "logprobs": None, "finish_reason": finish_reason}

        yield chunk([delta({"role": "assistant", "content": ""})])
        for token in tokens:
            yield chunk([delta({"content": token})])
        yield chunk([delta({}, "stop")])
        if usage is not None:
            yield chunk([], usage=usage)
        yield "data: [DONE]\n\n"


@contextmanager
def running_openai_stub() -> Iterator[OpenAIStub]:
    """Serve a fresh stub on a free loopback port, in a background thread."""
    stub = OpenAIStub()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    stub.port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(stub.app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the OpenAI stub did not start")
        time.sleep(0.01)
    try:
        yield stub
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
