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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import MODES
from tests.support.fake_platforms import FakePlatforms
from tests.support.helpers import chat_writer
from tests.support.stacks import (
    fresh_postgres_database,
    running_stack,
    stack_env,
    start_second,
    start_second_gateway,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving
from waybill.services.delivery.channels.store import thread_id_of

pytestmark = pytest.mark.timeout(120)

TELEGRAM_TOKEN = f"7{uuid.uuid4().int % 10**9}:AAtelegram-{uuid.uuid4().hex}"
TELEGRAM_SECRET = f"tg-secret-{uuid.uuid4().hex}"
SLACK_TOKEN = f"xoxb-{uuid.uuid4().hex}"
SLACK_SIGNING = f"slack-signing-{uuid.uuid4().hex}"
HOOK_SECRET = f"hook-secret-{uuid.uuid4().hex}"
# Auth is on: the channels act for alice; bob is someone else; carol's quota
# admits no run at all (her channel `tg-quota` is refused, with a reply saying why).
KEYS = {
    "alice": f"alice-{uuid.uuid4().hex}",
    "bob": f"bob-{uuid.uuid4().hex}",
    "carol": f"carol-{uuid.uuid4().hex}",
}
SECRETS = (TELEGRAM_TOKEN, TELEGRAM_SECRET, SLACK_TOKEN, SLACK_SIGNING, HOOK_SECRET, *KEYS.values())

TOKENS = 300
LONG_ANSWER = "".join(f"t{i} " for i in range(TOKENS))
BUSY = "I'm still working on your previous message"
ids = itertools.count(int(time.time()))


def telegram_channel(name: str, busy: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "platform": "telegram",
        "owner": "alice",
        "busy": busy,
        "bot_token_env": "TEST_TG_TOKEN",
        "secret_token_env": "TEST_TG_SECRET",
        **extra,
    }


@dataclass
class ChannelWorld:
    """A stack and the fake platforms it talks to (one of each per storage mode)."""

    stack: Stack
    fake: FakePlatforms


@pytest.fixture(scope="module", params=MODES)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChannelWorld]:
    fake = FakePlatforms(TELEGRAM_TOKEN, SLACK_TOKEN).start()
    try:
        for stack in _channel_stack(request.param, tmp_path_factory, fake):
            yield ChannelWorld(stack, fake)
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def channel_stack(world: ChannelWorld) -> Stack:
    return world.stack


@pytest.fixture(scope="module")
def fake(world: ChannelWorld) -> FakePlatforms:
    return world.fake


def _channel_stack(
    mode: str, tmp_path_factory: pytest.TempPathFactory, fake: FakePlatforms
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"channels-{mode}")
    tg = f"{fake.url}/tg"
    config = {
        "auth": {
            "principals": [
                {"user_id": user, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
                for user, key in KEYS.items()
            ]
        },
        "channels": [
            telegram_channel("tg", "reject", api_base=tg),
            telegram_channel("tg-queue", "enqueue", api_base=tg),
            telegram_channel("tg-interrupt", "interrupt", api_base=tg),
            telegram_channel("tg-poll", "reject", api_base=tg, mode="polling"),
            {**telegram_channel("tg-quota", "reject", api_base=tg), "owner": "carol"},
            {
                "name": "team",
                "platform": "slack",
                "owner": "alice",
                "threads": "conversation",
                "bot_token_env": "TEST_SLACK_TOKEN",
                "signing_secret_env": "TEST_SLACK_SIGNING",
                "api_base": f"{fake.url}/slack",
            },
            {
                "name": "hook",
                "platform": "webhook",
                "owner": "alice",
                "secret_env": "TEST_HOOK_SECRET",
                "reply_url": f"{fake.url}/hook",
            },
        ],
        "quotas": {"principals": {"carol": {"max_active_runs": 0}}},
    }
    config_path = data_dir / "waybill.yaml"
    config_path.write_text(yaml.safe_dump(config))
    extra = {
        "WAYBILL_CONFIG": str(config_path),
        "WAYBILL_CHANNEL_EDIT_SECONDS": "0.05",
        "WAYBILL_CHANNEL_POLL_SECONDS": "1",
        "WAYBILL_CHANNEL_POLL_RETRY_SECONDS": "0.2",
        "WAYBILL_CHANNEL_LEADER_SECONDS": "4",
        "WAYBILL_CHANNEL_REPLY_LEASE_SECONDS": "1.5",
        "WAYBILL_CHANNEL_REPLY_SWEEP_SECONDS": "0.3",
        "TEST_TG_TOKEN": TELEGRAM_TOKEN,
        "TEST_TG_SECRET": TELEGRAM_SECRET,
        "TEST_SLACK_TOKEN": SLACK_TOKEN,
        "TEST_SLACK_SIGNING": SLACK_SIGNING,
        "TEST_HOOK_SECRET": HOOK_SECRET,
    }
    if mode == "postgres":
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
    """Alice's client: the platforms' routes need no key, her threads need hers."""
    headers = {"x-api-key": KEYS["alice"]}
    async with httpx.AsyncClient(base_url=channel_stack.url, timeout=30, headers=headers) as client:
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

    # The run acts for the channel's owner, with the Telegram user in its caller
    # (`langgraph_auth_user`, the graph's `runtime.server_info.user`).
    thread_id = thread_id_of("tg", chat, 0)
    (run,) = await thread_runs(http, thread_id)
    assert run["status"] == "success"
    caller = run["kwargs"]["config"]["configurable"]["langgraph_auth_user"]
    assert caller["identity"] == "alice"
    channel = caller["channel"]
    assert channel == {"platform": "telegram", "channel": "tg", "user": "4242", "chat": chat}
    thread = (await http.get(f"/threads/{thread_id}")).json()
    assert {"channel": "tg", "platform": "telegram", "chat": chat}.items() <= thread[
        "metadata"
    ].items()
    found = await http.post("/threads/search", json={"metadata": {"channel": "tg", "chat": chat}})
    assert [t["thread_id"] for t in found.json()] == [thread_id]
    async with httpx.AsyncClient(base_url=str(http.base_url)) as bob:
        bobs = await bob.get(f"/threads/{thread_id}", headers={"x-api-key": KEYS["bob"]})
        assert bobs.status_code == 404  # alice's thread, invisible to others


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


# ---- Slack ---------------------------------------------------------------------------


async def to_slack(http: httpx.AsyncClient, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return await http.post("/channels/slack/team/events", content=body, headers=headers)


async def test_slack_event_with_a_bad_signature_is_refused(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    channel = f"C{uuid.uuid4().hex[:8].upper()}"
    body = slack_event(channel, "hello from slack")
    forged = slack_headers(body, secret="not-the-signing-secret")
    refused = await to_slack(http, body, forged)
    assert refused.status_code == 401, refused.text
    assert "x-slack-signature" in refused.json()["detail"]
    # Signed right, but for another body (tampered in flight).
    tampered = await to_slack(http, body.replace(b"hello", b"HELLO"), slack_headers(body))
    assert tampered.status_code == 401
    stale = slack_headers(body) | {"X-Slack-Request-Timestamp": str(int(time.time()) - 3600)}
    assert (await to_slack(http, body, stale)).status_code == 401
    await asyncio.sleep(0.5)
    assert fake.calls_to("slack", channel) == []


async def test_slack_answers_in_the_thread_through_updates(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    challenge = json.dumps({"type": "url_verification", "challenge": "abc123"}).encode()
    handshake = await to_slack(http, challenge, slack_headers(challenge))
    assert handshake.status_code == 200 and handshake.json() == {"challenge": "abc123"}

    channel = f"C{uuid.uuid4().hex[:8].upper()}"
    body = slack_event(channel, f"<@UBOT> /tokens {TOKENS}")
    assert (await to_slack(http, body, slack_headers(body))).status_code == 200
    fake.wait_for("the answer", said(fake, "slack", channel, LONG_ANSWER.strip()))
    first, *updates = fake.calls_to("slack", channel)
    message_ts = json.loads(body)["event"]["ts"]
    assert first.method == "chat.postMessage" and first.body["thread_ts"] == message_ts
    assert updates and {call.method for call in updates} == {"chat.update"}
    assert str(updates[-1].body["text"]) == LONG_ANSWER.strip()

    # Threads per conversation: the reply thread is its own LangGraph thread.
    (run,) = await thread_runs(http, thread_id_of("team", f"{channel}:{message_ts}", 0))
    assert chat_writer(run)["user"] == "U0ADA"


# ---- the generic signed webhook -------------------------------------------------------


def hook_headers(body: bytes, secret: str = HOOK_SECRET) -> dict[str, str]:
    timestamp = str(int(time.time()))
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return {
        "content-type": "application/json",
        "X-Waybill-Timestamp": timestamp,
        "X-Waybill-Signature": f"sha256={mac.hexdigest()}",
    }


async def test_signed_webhook_gets_a_signed_answer(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    message = {"event_id": uuid.uuid4().hex, "chat_id": chat, "user_id": "u-7", "text": "ping"}
    body = json.dumps(message).encode()
    forged = await http.post(
        "/channels/webhook/hook", content=body, headers=hook_headers(body, "x")
    )
    assert forged.status_code == 401
    incomplete = json.dumps({"event_id": "e1", "chat_id": chat}).encode()
    bad = await http.post(
        "/channels/webhook/hook", content=incomplete, headers=hook_headers(incomplete)
    )
    assert bad.status_code == 422 and "user_id, text" in bad.json()["detail"]

    assert (
        await http.post("/channels/webhook/hook", content=body, headers=hook_headers(body))
    ).status_code == 200
    (reply,) = fake.wait_for("the signed answer", lambda: fake.calls_to("hook", chat))
    assert reply.body["text"] == "You said: ping" and reply.body["event_id"] == message["event_id"]
    timestamp = reply.headers["x-waybill-timestamp"]
    expected = hmac.new(HOOK_SECRET.encode(), timestamp.encode() + b"." + reply.raw, hashlib.sha256)
    assert reply.headers["x-waybill-signature"] == f"sha256={expected.hexdigest()}"


# ---- commands and second messages ------------------------------------------------------

SLOW = '/tool wait {"seconds": 30}'


async def running_run(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    runs = await wait_runs(
        http, thread_id, lambda runs: any(r["status"] == "running" for r in runs), "a running run"
    )
    return next(r for r in runs if r["status"] == "running")


async def test_stop_interrupts_the_active_run_and_status_reports_it(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    thread_id = thread_id_of("tg", chat, 0)
    await to_telegram(http, "tg", telegram_update(chat, "/start"))
    fake.wait_for("the greeting", said(fake, "telegram", chat, "/new starts a fresh"))
    await to_telegram(http, "tg", telegram_update(chat, "/status"))
    fake.wait_for("idle status", said(fake, "telegram", chat, "Idle"))

    await to_telegram(http, "tg", telegram_update(chat, SLOW))
    run = await running_run(http, thread_id)
    await to_telegram(http, "tg", telegram_update(chat, "/status@waybill_bot"))
    fake.wait_for(
        "busy status", said(fake, "telegram", chat, f"Working on it (run {run['run_id']})")
    )

    await to_telegram(http, "tg", telegram_update(chat, "/stop"))
    fake.wait_for("the stop reply", said(fake, "telegram", chat, "Stopped."))
    (stopped,) = await wait_runs(
        http, thread_id, lambda runs: runs[0]["status"] == "interrupted", "the run interrupted"
    )
    assert stopped["run_id"] == run["run_id"]
    fake.wait_for("the answer marked stopped", said(fake, "telegram", chat, "(stopped)"))

    await to_telegram(http, "tg", telegram_update(chat, "/stop"))
    fake.wait_for("nothing to stop", said(fake, "telegram", chat, "Nothing is running."))


async def test_new_starts_a_fresh_thread(http: httpx.AsyncClient, fake: FakePlatforms) -> None:
    chat = new_chat()
    await to_telegram(http, "tg", telegram_update(chat, "first"))
    fake.wait_for("first answer", said(fake, "telegram", chat, "You said: first"))
    await to_telegram(http, "tg", telegram_update(chat, "/new"))
    fake.wait_for("new reply", said(fake, "telegram", chat, "Started a new conversation"))
    await to_telegram(http, "tg", telegram_update(chat, "second"))
    fake.wait_for("second answer", said(fake, "telegram", chat, "You said: second"))

    old, new = thread_id_of("tg", chat, 0), thread_id_of("tg", chat, 1)
    assert len(await thread_runs(http, old)) == 1
    assert len(await thread_runs(http, new)) == 1
    state = (await http.get(f"/threads/{new}/state")).json()
    assert [m["content"] for m in state["values"]["messages"] if m["type"] == "human"] == ["second"]


async def test_second_message_is_rejected_politely(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    thread_id = thread_id_of("tg", chat, 0)
    await to_telegram(http, "tg", telegram_update(chat, SLOW))
    run = await running_run(http, thread_id)
    await to_telegram(http, "tg", telegram_update(chat, "are you there?"))
    fake.wait_for("the polite refusal", said(fake, "telegram", chat, BUSY))
    assert [r["run_id"] for r in await thread_runs(http, thread_id)] == [run["run_id"]]
    await to_telegram(http, "tg", telegram_update(chat, "/stop"))
    fake.wait_for("stopped", said(fake, "telegram", chat, "(stopped)"))


async def test_a_message_over_its_owners_quota_is_answered_why(
    channel_stack: Stack, fake: FakePlatforms
) -> None:
    chat = new_chat()
    headers = {"x-api-key": KEYS["carol"]}
    async with httpx.AsyncClient(base_url=channel_stack.url, timeout=30, headers=headers) as carol:
        await to_telegram(carol, "tg-quota", telegram_update(chat, "hello"))
        fake.wait_for("the quota's answer", said(fake, "telegram", chat, "Quota exceeded"))
        [answer] = texts(fake, "telegram", chat)
        assert "max_active_runs is 0" in answer
        assert await thread_runs(carol, thread_id_of("tg-quota", chat, 0)) == []


async def test_second_message_is_queued_behind_the_first(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    thread_id = thread_id_of("tg-queue", chat, 0)
    await to_telegram(http, "tg-queue", telegram_update(chat, '/tool wait {"seconds": 2}'))
    await running_run(http, thread_id)
    await to_telegram(http, "tg-queue", telegram_update(chat, "and then this"))
    runs = await wait_runs(http, thread_id, lambda runs: len(runs) == 2, "two runs")
    assert sorted(r["status"] for r in runs) == ["pending", "running"]
    fake.wait_for("the queued answer", said(fake, "telegram", chat, "You said: and then this"))
    runs = await wait_runs(
        http, thread_id, lambda runs: all(r["status"] == "success" for r in runs), "both done"
    )
    assert not [t for t in texts(fake, "telegram", chat) if BUSY in t]


async def test_second_message_interrupts_the_first(
    http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    thread_id = thread_id_of("tg-interrupt", chat, 0)
    await to_telegram(http, "tg-interrupt", telegram_update(chat, SLOW))
    first = await running_run(http, thread_id)
    await to_telegram(http, "tg-interrupt", telegram_update(chat, "never mind, this"))
    fake.wait_for("the new answer", said(fake, "telegram", chat, "You said: never mind, this"))
    runs = {r["run_id"]: r["status"] for r in await thread_runs(http, thread_id)}
    assert runs.pop(first["run_id"]) == "interrupted"
    assert list(runs.values()) == ["success"]
    fake.wait_for("the first answer marked stopped", said(fake, "telegram", chat, "(stopped)"))


# ---- long polling ----------------------------------------------------------------------


async def test_long_polling_takes_each_update_once(
    second_gateway: str, http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    """Two delivery replicas run (see `second_gateway`); one leads the polling."""
    chat = new_chat()
    update = telegram_update(chat, "polled hello")
    fake.push_update(update)
    fake.wait_for("the polled answer", said(fake, "telegram", chat, "You said: polled hello"))
    await asyncio.sleep(1.0)
    assert len(await thread_runs(http, thread_id_of("tg-poll", chat, 0))) == 1
    assert len([c for c in fake.calls_to("telegram", chat) if c.method == "sendMessage"]) == 1


# ---- an answer outlives the delivery replica that was streaming it ----------------------


async def test_an_answer_is_finished_after_its_delivery_process_dies(
    channel_stack: Stack, http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    chat = new_chat()
    thread_id = thread_id_of("tg", chat, 0)
    await to_telegram(http, "tg", telegram_update(chat, '/tool wait {"seconds": 6}'))
    await running_run(http, thread_id)
    delivery = channel_stack.processes["delivery"]
    delivery.kill()  # SIGKILL: no goodbye; its lease on the answer just lapses
    delivery.wait()
    # Back before the run ends (its receipt needs a delivery service).
    channel_stack.start_one("delivery")
    wait_until(lambda: grpc_serving(channel_stack.address_of("delivery")), "delivery back")

    answer = "Tool wait returned: waited 6 s"
    fake.wait_for("the adopted answer", said(fake, "telegram", chat, answer))
    (run,) = await wait_runs(http, thread_id, lambda r: r[0]["status"] != "running", "the end")
    assert run["status"] == "success"  # one run, answered by whichever replica adopted it
    await asyncio.sleep(1.0)
    assert texts(fake, "telegram", chat).count(answer) == 1
    adopted = f"adopted the answer of run {run['run_id']}"
    assert any(
        adopted in log for name, log in stack_logs(channel_stack).items() if "delivery" in name
    )


# ---- secrets ---------------------------------------------------------------------------


def stack_logs(stack: Stack) -> dict[str, str]:
    assert stack.log_dir is not None
    return {p.name: p.read_text(errors="replace") for p in Path(stack.log_dir).glob("*.log")}


async def test_no_secret_reaches_the_logs_or_the_journal(
    channel_stack: Stack, second_gateway: str, http: httpx.AsyncClient, fake: FakePlatforms
) -> None:
    """Last of the module: every test above has run through the stack."""
    chat = new_chat()
    await to_telegram(http, "tg", telegram_update(chat, '/tool add {"a": 1, "b": 2}'))
    fake.wait_for("the answer", said(fake, "telegram", chat, "returned"))
    thread_id = thread_id_of("tg", chat, 0)
    (run,) = await wait_runs(http, thread_id, lambda r: r and r[0]["status"] == "success", "done")
    seen = []
    base = f"/threads/{thread_id}/runs/{run['run_id']}"
    seen.append((await http.get(f"{base}/events", params={"limit": 1000})).text)
    seen.append((await http.get(f"{base}/stream", headers={"Last-Event-ID": "-1"})).text)
    seen.append((await http.get(base)).text)
    seen.append((await http.get(f"/threads/{thread_id}/state")).text)
    logs = stack_logs(channel_stack)
    assert set(logs) >= {"delivery.log", "gateway.log", "delivery-2.log", "gateway-2.log"}
    seen.extend(logs.values())
    assert any("telegram" in text for text in seen)  # the material is really there
    for secret in SECRETS:
        assert all(secret not in text for text in seen), "a secret leaked"
