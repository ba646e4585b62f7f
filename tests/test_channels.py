"""IM channels end to end: real stack processes, local fakes of Telegram's and
Slack's APIs and of a webhook receiver. A chat message starts a run on behalf
of the channel's owner and its answer is streamed back to the chat."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from common.launch import Stack
from services.delivery.channels.store import thread_id_of
from tests.conftest import MODES
from tests.fake_platforms import FakePlatforms
from tests.stacks import (
    fresh_postgres_database,
    running_stack,
    stack_env,
    start_second,
    start_second_gateway,
)

pytestmark = pytest.mark.timeout(120)

TELEGRAM_TOKEN = f"7{uuid.uuid4().int % 10**9}:AAtelegram-{uuid.uuid4().hex}"
TELEGRAM_SECRET = f"tg-secret-{uuid.uuid4().hex}"
SLACK_TOKEN = f"xoxb-{uuid.uuid4().hex}"
SLACK_SIGNING = f"slack-signing-{uuid.uuid4().hex}"
HOOK_SECRET = f"hook-secret-{uuid.uuid4().hex}"
SECRETS = (TELEGRAM_TOKEN, TELEGRAM_SECRET, SLACK_TOKEN, SLACK_SIGNING, HOOK_SECRET)

TOKENS = 300
LONG_ANSWER = "".join(f"t{i} " for i in range(TOKENS))
BUSY = "I'm still working on your previous message"
ids = itertools.count(int(time.time()))


def telegram_channel(name: str, busy: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "platform": "telegram",
        "busy": busy,
        "bot_token_env": "TEST_TG_TOKEN",
        "secret_token_env": "TEST_TG_SECRET",
        **extra,
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakePlatforms]:
    platforms = FakePlatforms(TELEGRAM_TOKEN, SLACK_TOKEN).start()
    yield platforms
    platforms.stop()


@pytest.fixture(scope="module", params=MODES)
def channel_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake: FakePlatforms
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"channels-{request.param}")
    tg = f"{fake.url}/tg"
    config = {
        "channels": [
            telegram_channel("tg", "reject", api_base=tg),
            telegram_channel("tg-queue", "enqueue", api_base=tg),
            telegram_channel("tg-interrupt", "interrupt", api_base=tg),
            telegram_channel("tg-poll", "reject", api_base=tg, mode="polling"),
            {
                "name": "team",
                "platform": "slack",
                "threads": "conversation",
                "bot_token_env": "TEST_SLACK_TOKEN",
                "signing_secret_env": "TEST_SLACK_SIGNING",
                "api_base": f"{fake.url}/slack",
            },
            {
                "name": "hook",
                "platform": "webhook",
                "secret_env": "TEST_HOOK_SECRET",
                "reply_url": f"{fake.url}/hook",
            },
        ]
    }
    config_path = data_dir / "waybill.yaml"
    config_path.write_text(yaml.safe_dump(config))
    extra = {
        "WAYBILL_CONFIG": str(config_path),
        "WAYBILL_CHANNEL_EDIT_SECONDS": "0.05",
        "WAYBILL_CHANNEL_POLL_SECONDS": "1",
        "WAYBILL_CHANNEL_POLL_RETRY_SECONDS": "0.2",
        "WAYBILL_CHANNEL_LEADER_SECONDS": "4",
        "TEST_TG_TOKEN": TELEGRAM_TOKEN,
        "TEST_TG_SECRET": TELEGRAM_SECRET,
        "TEST_SLACK_TOKEN": SLACK_TOKEN,
        "TEST_SLACK_SIGNING": SLACK_SIGNING,
        "TEST_HOOK_SECRET": HOOK_SECRET,
    }
    if request.param == "postgres":
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url, **extra), data_dir) as stack,
        ):
            yield stack
    else:
        with running_stack(stack_env(data_dir, **extra), data_dir) as stack:
            yield stack


@pytest.fixture
async def http(channel_stack: Stack) -> Any:
    async with httpx.AsyncClient(base_url=channel_stack.url, timeout=30) as client:
        yield client


# ---- what the platforms send -----------------------------------------------------------


def telegram_update(chat: str, text: str, user: int = 4242) -> dict[str, Any]:
    update_id = next(ids)
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id % 100000,
            "from": {"id": user, "is_bot": False, "first_name": "Ada"},
            "chat": {"id": int(chat), "type": "private"},
            "date": int(time.time()),
            "text": text,
        },
    }


async def to_telegram(
    http: httpx.AsyncClient, channel: str, update: dict[str, Any], secret: str = TELEGRAM_SECRET
) -> httpx.Response:
    return await http.post(
        f"/channels/telegram/{channel}/webhook",
        json=update,
        headers={"X-Telegram-Bot-Api-Secret-Token": secret},
    )


def slack_headers(body: bytes, secret: str = SLACK_SIGNING) -> dict[str, str]:
    timestamp = str(int(time.time()))
    signed = b"v0:" + timestamp.encode() + b":" + body
    signature = "v0=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return {
        "content-type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature,
    }


def slack_event(channel: str, text: str, thread_ts: str | None = None) -> bytes:
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "user": "U0ADA",
        "text": text,
        "ts": f"{next(ids)}.000100",
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    delivery = {"type": "event_callback", "event_id": f"Ev{uuid.uuid4().hex[:10]}", "event": event}
    return json.dumps(delivery).encode()


def new_chat() -> str:
    return str(uuid.uuid4().int % 10**12)


async def thread_runs(http: httpx.AsyncClient, thread_id: str) -> list[dict[str, Any]]:
    response = await http.get(f"/threads/{thread_id}/runs")
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return list(response.json())


async def wait_runs(
    http: httpx.AsyncClient, thread_id: str, check: Any, what: str
) -> list[dict[str, Any]]:
    for _ in range(600):
        runs = await thread_runs(http, thread_id)
        if check(runs):
            return runs
        await asyncio.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}: {runs}")


def texts(fake: FakePlatforms, service: str, chat: str) -> list[str]:
    return [str(call.body.get("text")) for call in fake.calls_to(service, chat)]


def said(fake: FakePlatforms, service: str, chat: str, fragment: str) -> Any:
    return lambda: [t for t in texts(fake, service, chat) if fragment in t]


# ---- Telegram --------------------------------------------------------------------------


async def test_telegram_message_streams_the_answer_through_edits(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    update = telegram_update(chat, f"/tokens {TOKENS}")
    response = await to_telegram(http, "tg", update)
    assert response.status_code == 200, response.text

    fake.wait_for("the whole answer", said(fake, "telegram", chat, LONG_ANSWER.strip()))
    calls = fake.calls_to("telegram", chat)
    first, *edits = calls
    assert first.method == "sendMessage"
    assert first.body["reply_to_message_id"] == update["message"]["message_id"]
    assert edits and all(call.method == "editMessageText" for call in edits)
    assert all(call.body["message_id"] == edits[0].body["message_id"] for call in edits)
    shown = [str(call.body["text"]) for call in calls]
    # Each edit shows more of the answer; the first post showed only its start.
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(shown))
    assert len(shown[0]) < len(shown[-1])
    assert shown[-1] == LONG_ANSWER.strip()

    # The run acts for the channel's owner, with the Telegram user in its context.
    thread_id = thread_id_of("tg", chat, 0)
    (run,) = await thread_runs(http, thread_id)
    assert run["status"] == "success"
    channel = run["kwargs"]["context"]["channel"]
    assert channel == {"platform": "telegram", "channel": "tg", "user": "4242", "chat": chat}


async def test_telegram_webhook_without_its_secret_token_is_refused(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    for secret in ("wrong", ""):
        refused = await to_telegram(http, "tg", telegram_update(chat, "hello"), secret)
        assert refused.status_code == 401, refused.text
        assert "secret-token" in refused.json()["detail"]
    unknown = await to_telegram(http, "nope", telegram_update(chat, "hello"))
    assert unknown.status_code == 404
    await asyncio.sleep(0.5)
    assert await thread_runs(http, thread_id_of("tg", chat, 0)) == []
    assert fake.calls_to("telegram", chat) == []


@pytest.fixture(scope="module")
def second_gateway(channel_stack: Stack) -> str:
    """A second gateway in front of a second delivery replica: two whole paths."""
    delivery_2 = start_second(channel_stack, "delivery")
    return start_second_gateway(channel_stack, WAYBILL_DELIVERY_ADDR=delivery_2)


async def test_the_same_update_to_two_gateways_and_two_deliveries_runs_once(
    second_gateway: str, http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    update = telegram_update(chat, "only once please")
    async with httpx.AsyncClient(base_url=second_gateway, timeout=30) as other:
        answers = await asyncio.gather(
            *[to_telegram(client, "tg", update) for client in (http, other, http, other)]
        )
    assert [a.status_code for a in answers] == [200] * 4
    fake.wait_for("the answer", said(fake, "telegram", chat, "You said: only once please"))
    await asyncio.sleep(1.0)  # a second run, were there one, would have answered by now
    runs = await thread_runs(http, thread_id_of("tg", chat, 0))
    assert len(runs) == 1
    assert len([c for c in fake.calls_to("telegram", chat) if c.method == "sendMessage"]) == 1
