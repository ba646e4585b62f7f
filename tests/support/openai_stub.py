"""A tiny OpenAI-compatible server for tests: `POST /v1/chat/completions` and
`POST /v1/embeddings` (a bag of words hashed into `EMBEDDING_DIMS` counts, so that
texts sharing words are similar; as floats or base64 float32, as asked).

It answers "Hello from the stub: <last user message>", one word per token,
streamed (SSE, with the usage chunk when asked) or not, and records every
request body it receives. Token counts are words: the prompt's words in,
the reply's tokens out. It is scripted by the last message, too:

- a user message `/tool NAME {"arg": 1}` is answered with a call of tool NAME
  (its output tokens: the words of the call's arguments, plus one);
- after a tool's answer it says "The tool said: <answer>";
- a user message `/fail` is refused with a 400, as OpenAI refuses a bad request.

`reported` keeps the usage it reported for each answered request, in order;
set `cached_tokens` to report that many prompt tokens as cache reads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import struct
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
EMBEDDING_DIMS = 256


def bag_of_words(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    vector = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):  # JSON's quotes and braces are not words
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % dims] += 1.0
    return vector


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


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The last message's text when it is the user's (else empty)."""
    last = messages[-1] if messages else {}
    return text_of(last.get("content")) if last.get("role") == "user" else ""


def tool_call_for(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    text = last_user_text(messages)
    if not text.startswith("/tool "):
        return None
    name, _, raw_args = text[len("/tool ") :].strip().partition(" ")
    arguments = json.dumps(json.loads(raw_args) if raw_args.strip() else {})
    return {
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def answer_tokens(messages: list[dict[str, Any]], call: dict[str, Any] | None) -> list[str]:
    """What the usage counts as output: the reply's tokens, or the call's argument words."""
    if call is not None:
        return ["call", *call["function"]["arguments"].split()]
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        words = f"The tool said: {text_of(last.get('content'))}".split(" ")
        return [word + " " for word in words[:-1]] + [words[-1]]
    return reply_tokens(messages)


class OpenAIStub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reported: list[dict[str, Any]] = []
        self.cached_tokens = 0
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat_completions)
        self.app.post("/v1/embeddings")(self.embeddings)
        self.embedded: list[str] = []  # every text it was asked to embed
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def embeddings(self, request: Request) -> Any:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.embedded.extend(texts)
        data = []
        for n, text in enumerate(texts):
            vector = bag_of_words(text)
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": n, "embedding": encoded})
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "data": data, "model": body.get("model"), "usage": usage}

    async def chat_completions(self, request: Request) -> Any:
        body = await request.json()
        self.requests.append(body)
        messages = body.get("messages") or []
        if last_user_text(messages).startswith("/fail"):
            refusal = {"message": "The stub refuses /fail.", "type": "invalid_request_error"}
            return JSONResponse({"error": refusal}, status_code=400)
        call = tool_call_for(messages)
        tokens = answer_tokens(messages, call)
        usage: dict[str, Any] = usage_for(messages, tokens)
        if self.cached_tokens:
            cached = min(self.cached_tokens, usage["prompt_tokens"])
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        self.reported.append(usage)
        text_tokens = [] if call is not None else tokens
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_FALLBACK,
            "system_fingerprint": None,
        }
        if not body.get("stream"):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(text_tokens) if call is None else None,
                "refusal": None,
            }
            if call is not None:
                message["tool_calls"] = [call]
            finish = "stop" if call is None else "tool_calls"
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            return JSONResponse(
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._sse(base, text_tokens, usage if with_usage else None, call),
            media_type="text/event-stream",
        )

    @staticmethod
    def _sse(
        base: dict[str, Any],
        tokens: list[str],
        usage: dict[str, Any] | None,
        call: dict[str, Any] | None = None,
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
        if call is not None:
            yield chunk([delta({"tool_calls": [{"index": 0, **call}]})])
        yield chunk([delta({}, "stop" if call is None else "tool_calls")])
        if usage is not None:
            yield chunk([], usage=usage)
        yield "data: [DONE]\n\n"


@contextmanager
def serving(app: FastAPI) -> Iterator[int]:
    """Serve `app` on a free loopback port, in a background thread; yields the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stub did not start")
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()


@contextmanager
def running_openai_stub() -> Iterator[OpenAIStub]:
    """Serve a fresh stub on a free loopback port, in a background thread."""
    stub = OpenAIStub()
    with serving(stub.app) as port:
        stub.port = port
        yield stub
