"""The chat platforms beyond Telegram and Slack, end to end: a real stack (SQLite
and Postgres) whose channels talk to local fakes of each platform's API, with
the platform's own message shapes, signatures and encryption. For each: an
answer streamed back, a duplicate delivery, a forged one (refused and
counted), the platform limiting our rate; for the connection-based ones, a
dropped connection resumed without losing or repeating a message."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import MODES
from tests.support import fake_dingtalk, fake_discord, fake_wecom
from tests.support.fake_dingtalk import FakeDingTalk
from tests.support.fake_discord import FakeDiscord
from tests.support.fake_feishu import FakeFeishu, encrypt, message_event, signed
from tests.support.fake_matrix import FakeMatrix
from tests.support.fake_wecom import FakeWeCom
from tests.support.helpers import WAYBILL, chat_writer
from tests.support.stacks import (
    free_port,
    fresh_postgres_database,
    metrics_url,
    running_stack,
    scrape,
    stack_env,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving
from waybill.services.delivery.channels.store import thread_id_of

pytestmark = pytest.mark.timeout(120)


def secret(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex}"


KEY = secret("alice")
FS_APP, FS_SECRET = "cli_a1b2c3", secret("fs-app-secret")
FS_ENCRYPT, FS_TOKEN = secret("fs-encrypt"), secret("fs-verify")
DT_APP, DT_SECRET = "dingappkey01", secret("dt-app-secret")
WC_CORP, WC_AGENT, WC_SECRET = "ww1234abcd", "1000002", secret("wc-corp-secret")
WC_TOKEN, WC_AES = secret("wc-token"), fake_wecom.new_aes_key()
DC_TOKEN = f"MTE{uuid.uuid4().hex}.{uuid.uuid4().hex[:6]}.{uuid.uuid4().hex}"
MX_TOKEN = f"syt_{uuid.uuid4().hex}"
SECRETS = {
    "TEST_MX_TOKEN": MX_TOKEN,
    "TEST_DC_TOKEN": DC_TOKEN,
    "TEST_WC_SECRET": WC_SECRET,
    "TEST_WC_TOKEN": WC_TOKEN,
    "TEST_WC_AES": WC_AES,
    "TEST_DT_SECRET": DT_SECRET,
    "TEST_FS_SECRET": FS_SECRET,
    "TEST_FS_ENCRYPT": FS_ENCRYPT,
    "TEST_FS_TOKEN": FS_TOKEN,
}

TOKENS = 300
LONG_ANSWER = "".join(f"t{i} " for i in range(TOKENS)).strip()


@dataclass
class Fakes:
    feishu: FakeFeishu
    dingtalk: FakeDingTalk
    wecom: FakeWeCom
    discord: FakeDiscord
    matrix: FakeMatrix

    def all(self) -> list[Any]:
        return [self.feishu, self.dingtalk, self.wecom, self.discord, self.matrix]


@dataclass
class World:
    stack: Stack
    fakes: Fakes


def _channels(fakes: Fakes) -> list[dict[str, Any]]:
    feishu = {
        "platform": "feishu",
        "owner": "alice",
        "app_id": FS_APP,
        "app_secret_env": "TEST_FS_SECRET",
        "encrypt_key_env": "TEST_FS_ENCRYPT",
        "verification_token_env": "TEST_FS_TOKEN",
        "api_base": fakes.feishu.url,
    }
    return [
        {"name": "fs", **feishu},
        # The same app with a wrong secret: doctor says so, the others work on.
        {"name": "fs-bad", **{k: v for k, v in feishu.items() if k != "app_secret_env"}}
        | {"app_secret": "not-the-secret"},
        {
            "name": "dt",
            "platform": "dingtalk",
            "owner": "alice",
            "app_id": DT_APP,
            "app_secret_env": "TEST_DT_SECRET",
            "api_base": fakes.dingtalk.url,
        },
        {
            "name": "wc",
            "platform": "wecom",
            "owner": "alice",
            "corp_id": WC_CORP,
            "agent_id": WC_AGENT,
            "corp_secret_env": "TEST_WC_SECRET",
            "callback_token_env": "TEST_WC_TOKEN",
            "encoding_aes_key_env": "TEST_WC_AES",
            "api_base": fakes.wecom.url,
        },
        {
            "name": "dc",
            "platform": "discord",
            "owner": "alice",
            "bot_token_env": "TEST_DC_TOKEN",
            "public_key": fakes.discord.public_key,
            "api_base": fakes.discord.url,
        },
        {
            "name": "mx",
            "platform": "matrix",
            "owner": "alice",
            "access_token_env": "TEST_MX_TOKEN",
            "api_base": fakes.matrix.url,
        },
        # A homeserver that is down: doctor says so, its listener keeps trying,
        # and every other channel works on.
        {
            "name": "mx-down",
            "platform": "matrix",
            "owner": "alice",
            "access_token_env": "TEST_MX_TOKEN",
            "api_base": f"http://127.0.0.1:{free_port()}",
        },
    ]


@pytest.fixture(scope="module", params=MODES)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    fakes = Fakes(
        FakeFeishu(FS_APP, FS_SECRET).start(),
        FakeDingTalk(DT_APP, DT_SECRET).start(),
        FakeWeCom(WC_CORP, WC_SECRET).start(),
        FakeDiscord(DC_TOKEN).start(),
        FakeMatrix(MX_TOKEN).start(),
    )
    data_dir = tmp_path_factory.mktemp(f"platforms-{request.param}")
    config = {
        "auth": {
            "principals": [
                {"user_id": "alice", "key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}
            ]
        },
        "channels": _channels(fakes),
    }
    (data_dir / "waybill.yaml").write_text(yaml.safe_dump(config))
    extra = {
        "WAYBILL_CONFIG": str(data_dir / "waybill.yaml"),
        "WAYBILL_CHANNEL_EDIT_SECONDS": "0.05",
        "WAYBILL_CHANNEL_POLL_SECONDS": "1",
        "WAYBILL_CHANNEL_POLL_RETRY_SECONDS": "0.2",
        "WAYBILL_CHANNEL_LEADER_SECONDS": "3",
        "WAYBILL_CHANNEL_RETRY_FIRST_SECONDS": "0.1",
        "WAYBILL_CHANNEL_HTTP_TIMEOUT_SECONDS": "5",
        **SECRETS,
    }
    try:
        if request.param == "postgres":
            with (
                fresh_postgres_database() as url,
                running_stack(stack_env(data_dir, url, **extra), data_dir) as stack,
            ):
                yield World(stack, fakes)
        else:
            with running_stack(stack_env(data_dir, **extra), data_dir) as stack:
                yield World(stack, fakes)
    finally:
        for fake in fakes.all():
            fake.stop()


@pytest.fixture
async def http(world: World) -> Any:
    headers = {"x-api-key": KEY}
    async with httpx.AsyncClient(base_url=world.stack.url, timeout=30, headers=headers) as client:
        yield client


# ---- shared checks -------------------------------------------------------------------


async def thread_runs(http: httpx.AsyncClient, thread_id: str) -> list[dict[str, Any]]:
    response = await http.get(f"/threads/{thread_id}/runs")
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return list(response.json())


async def one_run(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    """The thread's only run, once it ended, after time enough for a second one."""
    for _ in range(400):
        runs = await thread_runs(http, thread_id)
        if runs and all(r["status"] not in ("pending", "running") for r in runs):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    runs = await thread_runs(http, thread_id)
    assert len(runs) == 1, runs
    return runs[0]


def counted(world: World, metric: str, **labels: str) -> float:
    key = metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return scrape(metrics_url(world.stack, "delivery")).get(key, 0.0)


def grows(shown: list[str]) -> bool:
    """Each text shown is a longer start of the next (edits only add)."""
    return all(later.startswith(earlier) for earlier, later in itertools.pairwise(shown))


# ---- Feishu / Lark -------------------------------------------------------------------


async def to_feishu(
    http: httpx.AsyncClient, body: bytes, headers: dict[str, str], channel: str = "fs"
) -> httpx.Response:
    return await http.post(f"/channels/feishu/{channel}/events", content=body, headers=headers)


async def test_feishu_url_verification_answers_the_challenge(
    http: httpx.AsyncClient, world: World
) -> None:
    handshake = {"challenge": "ch-7f3a", "token": FS_TOKEN, "type": "url_verification"}
    plain = {"content-type": "application/json"}
    answered = await to_feishu(http, encrypt(FS_ENCRYPT, handshake), plain)
    assert answered.status_code == 200 and answered.json() == {"challenge": "ch-7f3a"}
    other_key = await to_feishu(http, encrypt("not-the-key", handshake), plain)
    assert other_key.status_code == 401, other_key.text
    wrong_token = await to_feishu(http, encrypt(FS_ENCRYPT, {**handshake, "token": "x"}), plain)
    assert wrong_token.status_code == 401
    not_json = await to_feishu(http, b"\xff not json", plain)
    assert not_json.status_code == 422


async def test_feishu_message_streams_the_answer_as_card_updates(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.feishu, f"oc_{uuid.uuid4().hex}"
    event = message_event(chat, f"/tokens {TOKENS}", FS_TOKEN)
    body = encrypt(FS_ENCRYPT, event)
    answered = await to_feishu(http, body, signed(FS_ENCRYPT, body))
    assert answered.status_code == 200, answered.text

    message_id = event["event"]["message"]["message_id"]
    shown = fake.wait_for(
        "the whole answer", lambda: (s := fake.shown(message_id)) and s[-1] == LONG_ANSWER and s
    )
    assert len(shown) >= 2 and grows(shown) and len(shown[0]) < len(LONG_ANSWER)
    (reply,) = fake.calls_to(f"/messages/{message_id}/reply")
    assert reply.body["msg_type"] == "interactive"
    assert reply.headers["authorization"].startswith("Bearer t-")  # the tenant token

    run = await one_run(http, thread_id_of("fs", chat, 0))
    assert run["status"] == "success"
    assert chat_writer(run) == {
        "platform": "feishu",
        "channel": "fs",
        "user": "ou_ada",
        "chat": chat,
    }


async def test_feishu_duplicate_delivery_starts_one_run(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.feishu, f"oc_{uuid.uuid4().hex}"
    before = counted(
        world, "waybill_channel_duplicate_events_total", platform="feishu", channel="fs"
    )
    event = message_event(chat, "only once please", FS_TOKEN)
    body = encrypt(FS_ENCRYPT, event)
    for _ in range(2):  # Feishu retries a delivery it saw no 200 for
        assert (await to_feishu(http, body, signed(FS_ENCRYPT, body))).status_code == 200
    message_id = event["event"]["message"]["message_id"]
    fake.wait_for("the answer", lambda: "You said: only once please" in fake.shown(message_id))
    await one_run(http, thread_id_of("fs", chat, 0))
    assert len(fake.calls_to(f"/messages/{message_id}/reply")) == 1
    after = counted(
        world, "waybill_channel_duplicate_events_total", platform="feishu", channel="fs"
    )
    assert after == before + 1


async def test_feishu_forged_tampered_or_replayed_delivery_is_refused_and_counted(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.feishu, f"oc_{uuid.uuid4().hex}"
    before = counted(
        world, "waybill_channel_deliveries_refused_total", platform="feishu", channel="fs"
    )
    event = message_event(chat, "let me in", FS_TOKEN)
    body = encrypt(FS_ENCRYPT, event)
    forged = await to_feishu(http, body, signed("not-the-encrypt-key", body))
    assert forged.status_code == 401 and "x-lark-signature" in forged.json()["detail"]
    other = encrypt(FS_ENCRYPT, message_event(chat, "something else", FS_TOKEN))
    assert (await to_feishu(http, other, signed(FS_ENCRYPT, body))).status_code == 401
    replayed = signed(FS_ENCRYPT, body, timestamp=int(time.time()) - 3600)
    assert (await to_feishu(http, body, replayed)).status_code == 401
    unsigned = await to_feishu(http, body, {"content-type": "application/json"})
    assert unsigned.status_code == 401
    after = counted(
        world, "waybill_channel_deliveries_refused_total", platform="feishu", channel="fs"
    )
    assert after == before + 4
    await asyncio.sleep(0.5)
    assert await thread_runs(http, thread_id_of("fs", chat, 0)) == []
    assert fake.calls_to(f"/messages/{event['event']['message']['message_id']}/") == []


async def test_feishu_rate_limit_is_waited_out(http: httpx.AsyncClient, world: World) -> None:
    fake, chat = world.fakes.feishu, f"oc_{uuid.uuid4().hex}"
    event = message_event(chat, "patience", FS_TOKEN)
    message_id = event["event"]["message"]["message_id"]
    fake.limit(f"/messages/{message_id}/reply", 2)  # code 99991400, reset in 1 s
    body = encrypt(FS_ENCRYPT, event)
    assert (await to_feishu(http, body, signed(FS_ENCRYPT, body))).status_code == 200
    fake.wait_for("the answer", lambda: "You said: patience" in fake.shown(message_id), 60)
    tries = fake.calls_to(f"/messages/{message_id}/reply")
    assert len(tries) == 3
    assert all(b.at - a.at >= 0.9 for a, b in itertools.pairwise(tries))  # as Feishu asked
    retried = counted(
        world, "waybill_channel_platform_retries_total", platform="feishu", reason="rate limited"
    )
    assert retried >= 2


# ---- DingTalk ---------------------------------------------------------------------------


async def to_dingtalk(
    http: httpx.AsyncClient, message: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    body = json.dumps(message).encode()
    return await http.post("/channels/dingtalk/dt/events", content=body, headers=headers)


async def test_dingtalk_message_streams_the_answer_as_card_updates(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.dingtalk, f"cid{uuid.uuid4().hex}"
    message = fake_dingtalk.callback(chat, f"/tokens {TOKENS}")
    answered = await to_dingtalk(http, message, fake_dingtalk.signed(DT_SECRET))
    assert answered.status_code == 200, answered.text
    shown = fake.wait_for(
        "the whole answer", lambda: (s := fake.shown(chat)) and s[-1] == LONG_ANSWER and s
    )
    assert len(shown) >= 2 and grows(shown) and len(shown[0]) < len(LONG_ANSWER)
    (sent,) = fake.calls_to("/robot/interactiveCards/send")[-1:]
    assert sent.body["robotCode"] == DT_APP and sent.body["cardTemplateId"] == "StandardCard"
    run = await one_run(http, thread_id_of("dt", chat, 0))
    assert run["status"] == "success"
    assert chat_writer(run)["user"] == "staff-ada"


async def test_dingtalk_duplicate_callback_starts_one_run(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.dingtalk, f"cid{uuid.uuid4().hex}"
    message = fake_dingtalk.callback(chat, "just the once")
    for _ in range(3):
        answered = await to_dingtalk(http, message, fake_dingtalk.signed(DT_SECRET))
        assert answered.status_code == 200
    fake.wait_for("the answer", lambda: "You said: just the once" in fake.shown(chat))
    await one_run(http, thread_id_of("dt", chat, 0))
    sent = fake.calls_to("/robot/interactiveCards/send")
    assert len([c for c in sent if c.body.get("openConversationId") == chat]) == 1
    dupes = counted(
        world, "waybill_channel_duplicate_events_total", platform="dingtalk", channel="dt"
    )
    assert dupes >= 2


async def test_dingtalk_forged_or_replayed_callback_is_refused_and_counted(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, chat = world.fakes.dingtalk, f"cid{uuid.uuid4().hex}"
    before = counted(
        world, "waybill_channel_deliveries_refused_total", platform="dingtalk", channel="dt"
    )
    message = fake_dingtalk.callback(chat, "let me in")
    forged = await to_dingtalk(http, message, fake_dingtalk.signed("not-the-app-secret"))
    assert forged.status_code == 401 and "sign" in forged.json()["detail"]
    late = fake_dingtalk.signed(DT_SECRET, int(time.time() * 1000) - 3600_000)
    assert (await to_dingtalk(http, message, late)).status_code == 401
    unsigned = await to_dingtalk(http, message, {"content-type": "application/json"})
    assert unsigned.status_code == 401
    after = counted(
        world, "waybill_channel_deliveries_refused_total", platform="dingtalk", channel="dt"
    )
    assert after == before + 3
    await asyncio.sleep(0.5)
    assert await thread_runs(http, thread_id_of("dt", chat, 0)) == []
    assert fake.shown(chat) == []


async def test_dingtalk_rate_limit_is_waited_out(http: httpx.AsyncClient, world: World) -> None:
    fake, chat = world.fakes.dingtalk, f"cid{uuid.uuid4().hex}"
    fake.limit("/robot/interactiveCards/send", 2)  # QpsLimitForApi, Retry-After: 1
    message = fake_dingtalk.callback(chat, "slowly")
    assert (await to_dingtalk(http, message, fake_dingtalk.signed(DT_SECRET))).status_code == 200
    fake.wait_for("the answer", lambda: "You said: slowly" in fake.shown(chat), 60)
    tries = fake.calls_to("/robot/interactiveCards/send")[-3:]
    assert [c.body.get("openConversationId") for c in tries] == [chat] * 3
    assert all(b.at - a.at >= 0.9 for a, b in itertools.pairwise(tries))


# ---- WeCom ----------------------------------------------------------------------------


def wecom_callback(user: str, text: str, **signing: Any) -> tuple[str, bytes, str]:
    """(the query, the body, the MsgId) of a user's text, as WeCom calls back."""
    xml, msg_id = fake_wecom.text_message(user, text, WC_CORP, WC_AGENT)
    encrypted = fake_wecom.encrypt(signing.pop("aes_key", WC_AES), WC_CORP, xml)
    query = fake_wecom.signed_query(signing.pop("token", WC_TOKEN), encrypted, **signing)
    return query, fake_wecom.envelope(WC_CORP, WC_AGENT, encrypted), msg_id


async def to_wecom(http: httpx.AsyncClient, query: str, body: bytes) -> httpx.Response:
    headers = {"content-type": "text/xml"}
    return await http.post(f"/channels/wecom/wc/events?{query}", content=body, headers=headers)


async def test_wecom_url_verification_answers_the_decrypted_echostr(
    http: httpx.AsyncClient,
) -> None:
    echostr = fake_wecom.encrypt(WC_AES, WC_CORP, "echo-5821")
    query = fake_wecom.signed_query(WC_TOKEN, echostr, echostr=echostr)
    answered = await http.get(f"/channels/wecom/wc/events?{query}")
    assert answered.status_code == 200, answered.text
    assert answered.text == "echo-5821" and answered.headers["content-type"].startswith(
        "text/plain"
    )
    forged = fake_wecom.signed_query("not-the-token", echostr, echostr=echostr)
    assert (await http.get(f"/channels/wecom/wc/events?{forged}")).status_code == 401


async def test_wecom_message_streams_the_answer_in_chunks(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, user = world.fakes.wecom, f"user-{uuid.uuid4().hex[:8]}"
    query, body, _ = wecom_callback(user, f"/tokens {TOKENS}")
    answered = await to_wecom(http, query, body)
    assert answered.status_code == 200 and answered.text == "", answered.text
    await one_run(http, thread_id_of("wc", user, 0))
    chunks = fake.wait_for("the whole answer", lambda: (s := fake.sent_to(user)) and s)
    assert len(chunks) >= 2 and all(len(chunk) <= 680 for chunk in chunks)
    assert " ".join(chunks) == LONG_ANSWER  # cut between words, nothing lost or repeated
    (first,) = [c for c in fake.calls_to("/cgi-bin/message/send") if c.body["touser"] == user][:1]
    assert first.body["agentid"] == int(WC_AGENT) and first.body["msgtype"] == "text"


async def test_wecom_duplicate_callback_starts_one_run(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, user = world.fakes.wecom, f"user-{uuid.uuid4().hex[:8]}"
    query, body, _ = wecom_callback(user, "once is enough")
    for _ in range(2):  # WeCom calls again when it got no answer within 5 s
        assert (await to_wecom(http, query, body)).status_code == 200
    await one_run(http, thread_id_of("wc", user, 0))
    assert fake.wait_for("the answer", lambda: fake.sent_to(user)) == ["You said: once is enough"]


async def test_wecom_forged_or_replayed_callback_is_refused_and_counted(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, user = world.fakes.wecom, f"user-{uuid.uuid4().hex[:8]}"
    before = counted(
        world, "waybill_channel_deliveries_refused_total", platform="wecom", channel="wc"
    )
    forged = wecom_callback(user, "let me in", token="not-the-token")
    assert (await to_wecom(http, forged[0], forged[1])).status_code == 401
    late = wecom_callback(user, "let me in", timestamp=int(time.time()) - 3600)
    assert (await to_wecom(http, late[0], late[1])).status_code == 401
    other_key = wecom_callback(user, "let me in", aes_key=fake_wecom.new_aes_key())
    refused = await to_wecom(http, other_key[0], other_key[1])
    assert refused.status_code == 401 and "EncodingAESKey" in refused.json()["detail"]
    query, body, _ = wecom_callback(user, "let me in")
    tampered = body.replace(b"<Encrypt><![CDATA[", b"<Encrypt><![CDATA[AAAA")
    assert (await to_wecom(http, query, tampered)).status_code == 401
    after = counted(
        world, "waybill_channel_deliveries_refused_total", platform="wecom", channel="wc"
    )
    assert after == before + 4
    await asyncio.sleep(0.5)
    assert await thread_runs(http, thread_id_of("wc", user, 0)) == []
    assert fake.sent_to(user) == []


async def test_wecom_rate_limit_is_waited_out(http: httpx.AsyncClient, world: World) -> None:
    fake, user = world.fakes.wecom, f"user-{uuid.uuid4().hex[:8]}"
    fake.limit("/cgi-bin/message/send", 2)  # errcode 45009
    query, body, _ = wecom_callback(user, "in good time")
    assert (await to_wecom(http, query, body)).status_code == 200
    assert fake.wait_for("the answer", lambda: fake.sent_to(user), 60) == ["You said: in good time"]
    tries = [c for c in fake.calls_to("/cgi-bin/message/send") if c.body.get("touser") == user]
    assert [c.limited for c in tries] == [True, True, False]


# ---- Discord -------------------------------------------------------------------------


def new_channel() -> str:
    return str(uuid.uuid4().int % 10**18)


def discord_answer(fake: FakeDiscord, message_id: str, text: str) -> Any:
    return lambda: [t for t in fake.shown(message_id) if text in t]


async def test_discord_message_streams_the_answer_through_edits(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, channel = world.fakes.discord, new_channel()
    fake.wait_for("the gateway session", fake.ready)
    fake.push(
        fake_discord.message_create(channel, "<@someone> not for the bot", guild=True)
        | {"content": "not for the bot"}
    )
    message = fake_discord.message_create(channel, f"/tokens {TOKENS}", guild=True)
    fake.push(message)
    shown = fake.wait_for(
        "the whole answer", lambda: (s := fake.shown(message["id"])) and s[-1] == LONG_ANSWER and s
    )
    assert len(shown) >= 2 and grows(shown) and len(shown[0]) < len(LONG_ANSWER)
    (post,) = fake.replies_to(message["id"])
    assert post.headers["authorization"] == f"Bot {DC_TOKEN}"
    assert post.body["allowed_mentions"] == {"parse": []}
    run = await one_run(http, thread_id_of("dc", channel, 0))  # the unmentioned one ran nothing
    assert chat_writer(run)["user"] == "1300000000000000001"
    assert fake.heartbeats > 0  # the connection was kept alive


async def test_discord_dropped_connection_resumes_without_losing_or_repeating(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, channel = world.fakes.discord, new_channel()
    fake.wait_for("the gateway session", fake.ready)
    identified = fake.identifies
    before = fake_discord.message_create(channel, "before the drop")
    before_seq = fake.push(before)
    fake.wait_for("the first answer", discord_answer(fake, before["id"], "before the drop"))
    await asyncio.sleep(1.0)  # its position is written right after it was taken

    # In two other channels: one channel's second message would be refused as busy.
    during = [fake_discord.message_create(new_channel(), f"during the drop {n}") for n in (1, 2)]
    resumed_before = len(fake.resumes)
    seqs = fake.drop(then=during)  # sent while no connection is there to take them
    for message in during:
        fake.wait_for("an answer", discord_answer(fake, message["id"], message["content"]))
    assert fake.identifies == identified  # resumed, not a new session
    # The resume after this drop: on a loaded machine a heartbeat acknowledged late
    # (the fake beats every 400 ms) makes another drop and resume after it.
    session, resumed_at = fake.resumes[resumed_before]
    assert before_seq <= resumed_at < seqs[0]
    await asyncio.sleep(0.5)
    for message in (before, *during):
        assert len(fake.replies_to(message["id"])) == 1  # none lost, none repeated
    for message in (before, *during):
        await one_run(http, thread_id_of("dc", message["channel_id"], 0))


async def test_discord_session_survives_a_restart_of_the_delivery_process(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, stack = world.fakes.discord, world.stack
    fake.wait_for("the gateway session", fake.ready)
    identified = fake.identifies
    first = fake_discord.message_create(new_channel(), "before the restart")
    fake.push(first)
    fake.wait_for("the first answer", discord_answer(fake, first["id"], "before the restart"))
    await one_run(http, thread_id_of("dc", first["channel_id"], 0))
    delivery = stack.processes["delivery"]
    delivery.kill()  # SIGKILL: the session and sequence stay in its lease row
    delivery.wait()
    second = fake_discord.message_create(new_channel(), "while it was down")
    fake.push(second)  # the connection is gone: it waits in the session
    stack.start_one("delivery")
    wait_until(lambda: grpc_serving(stack.address_of("delivery")), "delivery back")
    fake.wait_for("the answer", discord_answer(fake, second["id"], "while it was down"), 60)
    assert fake.identifies == identified  # the new process resumed the session
    await asyncio.sleep(0.5)
    assert len(fake.replies_to(first["id"])) == 1 and len(fake.replies_to(second["id"])) == 1


async def test_discord_message_delivered_twice_starts_one_run(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, channel = world.fakes.discord, new_channel()
    fake.wait_for("the gateway session", fake.ready)
    message = fake_discord.message_create(channel, "twice over")
    fake.push(message)
    fake.push(message)  # the same message id again (a replay after a resume)
    fake.wait_for("the answer", discord_answer(fake, message["id"], "You said: twice over"))
    await one_run(http, thread_id_of("dc", channel, 0))
    assert len(fake.replies_to(message["id"])) == 1


async def test_discord_rate_limit_is_waited_out(http: httpx.AsyncClient, world: World) -> None:
    fake, channel = world.fakes.discord, new_channel()
    fake.wait_for("the gateway session", fake.ready)
    fake.limit(f"/channels/{channel}/messages", 2)  # 429, retry_after 0.8
    message = fake_discord.message_create(channel, "no hurry")
    fake.push(message)
    fake.wait_for("the answer", discord_answer(fake, message["id"], "You said: no hurry"), 60)
    tries = fake.calls_to(f"/channels/{channel}/messages", "POST")
    assert [c.limited for c in tries] == [True, True, False]
    assert all(b.at - a.at >= 0.7 for a, b in itertools.pairwise(tries))


async def test_discord_interactions_are_verified_and_answered_by_editing(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, channel = world.fakes.discord, new_channel()
    url = "/channels/discord/dc/events"
    ping = json.dumps({"id": "1", "application_id": fake_discord.APP_ID, "type": 1}).encode()
    pong = await http.post(url, content=ping, headers=fake.sign(ping))
    assert pong.status_code == 200 and pong.json() == {"type": 1}
    before = counted(
        world, "waybill_channel_deliveries_refused_total", platform="discord", channel="dc"
    )
    command = fake_discord.slash_command(channel, "ask", "what is up")
    body = json.dumps(command).encode()
    forged = dict(fake.sign(body), **{"X-Signature-Ed25519": "00" * 64})
    assert (await http.post(url, content=body, headers=forged)).status_code == 401
    late = fake.sign(body, timestamp=int(time.time()) - 3600)
    assert (await http.post(url, content=body, headers=late)).status_code == 401
    after = counted(
        world, "waybill_channel_deliveries_refused_total", platform="discord", channel="dc"
    )
    assert after == before + 2

    deferred = await http.post(url, content=body, headers=fake.sign(body))
    assert deferred.status_code == 200 and deferred.json() == {"type": 5}
    original = f"/webhooks/{fake_discord.APP_ID}/{command['token']}/messages/@original"
    edits = fake.wait_for(
        "the answer",
        lambda: [c for c in fake.calls_to(original, "PATCH") if "what is up" in c.body["content"]],
    )
    assert edits[-1].body["content"] == "You said: what is up"
    await one_run(http, thread_id_of("dc", channel, 0))


# ---- Matrix --------------------------------------------------------------------------


def new_room() -> str:
    return f"!{uuid.uuid4().hex[:12]}:localhost"


def syncing(fake: FakeMatrix) -> Any:
    """The sync loop is past its first sync (which only learns where "now" is)."""
    return lambda: [c for c in fake.syncs() if "since" in c.query]


def matrix_answer(fake: FakeMatrix, event_id: str, text: str) -> Any:
    return lambda: [t for t in fake.shown(event_id) if text in t]


async def test_matrix_message_streams_the_answer_through_edits(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, room = world.fakes.matrix, new_room()
    fake.wait_for("the sync loop", syncing(fake))
    event_id = fake.say(room, f"/tokens {TOKENS}")
    shown = fake.wait_for(
        "the whole answer", lambda: (s := fake.shown(event_id)) and s[-1] == LONG_ANSWER and s
    )
    assert len(shown) >= 2 and grows(shown) and len(shown[0]) < len(LONG_ANSWER)
    run = await one_run(http, thread_id_of("mx", room, 0))
    assert chat_writer(run)["user"] == "@ada:localhost"
    # Our own reply and its edits came back through the sync: none started a run.
    webhook = await http.post("/channels/matrix/mx/events", json={})
    assert 400 <= webhook.status_code < 500  # Matrix delivers no webhooks


async def test_matrix_dropped_sync_resumes_from_its_token(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, room = world.fakes.matrix, new_room()
    fake.wait_for("the sync loop", syncing(fake))
    first = fake.say(room, "before the drop")
    fake.wait_for("the first answer", matrix_answer(fake, first, "before the drop"))
    fake.drop_syncs(1)  # the sync that carries the next message is cut
    second = fake.say(room, "after the drop")
    fake.wait_for("the second answer", matrix_answer(fake, second, "after the drop"))
    tokens = [c.query.get("since") for c in fake.syncs()]
    assert any(a == b for a, b in itertools.pairwise(tokens))  # the cut one, asked again
    await asyncio.sleep(0.5)
    assert len(fake.replies_to(first)) == 1 and len(fake.replies_to(second)) == 1
    assert len(await thread_runs(http, thread_id_of("mx", room, 0))) == 2


async def test_matrix_since_token_survives_a_restart(http: httpx.AsyncClient, world: World) -> None:
    fake, room, stack = world.fakes.matrix, new_room(), world.stack
    fake.wait_for("the sync loop", syncing(fake))
    first = fake.say(room, "before the restart")
    fake.wait_for("the first answer", matrix_answer(fake, first, "before the restart"))
    await one_run(http, thread_id_of("mx", room, 0))
    delivery = stack.processes["delivery"]
    delivery.kill()  # SIGKILL: its lease lapses, its position stays in the database
    delivery.wait()
    syncs_before = len(fake.syncs())
    second = fake.say(room, "while it was down")
    stack.start_one("delivery")
    wait_until(lambda: grpc_serving(stack.address_of("delivery")), "delivery back")
    fake.wait_for("the answer", matrix_answer(fake, second, "while it was down"), 60)
    assert all("since" in c.query for c in fake.syncs()[syncs_before:])  # no fresh start
    await asyncio.sleep(0.5)
    assert len(fake.replies_to(first)) == 1 and len(fake.replies_to(second)) == 1


async def test_matrix_event_synced_twice_starts_one_run(
    http: httpx.AsyncClient, world: World
) -> None:
    fake, room = world.fakes.matrix, new_room()
    fake.wait_for("the sync loop", syncing(fake))
    event_id = fake.say(room, "say it once")
    fake._append(room, dict(fake.timeline[-1][1]))  # the same event id again
    fake.wait_for("the answer", matrix_answer(fake, event_id, "You said: say it once"))
    await one_run(http, thread_id_of("mx", room, 0))
    assert len(fake.replies_to(event_id)) == 1


async def test_matrix_rate_limit_is_waited_out(http: httpx.AsyncClient, world: World) -> None:
    fake, room = world.fakes.matrix, new_room()
    fake.wait_for("the sync loop", syncing(fake))
    fake.limit(f"/rooms/{urllib.parse.quote(room, safe='')}/send/", 2)  # M_LIMIT_EXCEEDED
    event_id = fake.say(room, "take your time")
    fake.wait_for("the answer", matrix_answer(fake, event_id, "You said: take your time"), 60)
    tries = fake.calls_to(f"/rooms/{urllib.parse.quote(room, safe='')}/send/", "PUT")
    assert [c.limited for c in tries[:3]] == [True, True, False]
    assert len({c.path for c in tries[:3]}) == 1  # one transaction id, retried
    assert all(b.at - a.at >= 0.7 for a, b in itertools.pairwise(tries[:3]))


# ---- doctor, and what must never show ----------------------------------------------------


def test_doctor_reports_each_channel_and_one_refusing_its_credentials(world: World) -> None:
    env = {**os.environ, **world.stack.env}
    done = subprocess.run([WAYBILL, "doctor"], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(line.startswith("ok    channel fs ") and "waybill-test" in line for line in lines)
    (bad,) = [line for line in lines if line.startswith("FAIL  channel fs-bad")]
    assert "10014" in bad or "HTTP 400" in bad
    (down,) = [line for line in lines if line.startswith("FAIL  channel mx-down")]
    assert "ConnectError" in down
    for channel in ("dt", "wc", "dc", "mx"):
        assert any(line.startswith(f"ok    channel {channel} ") for line in lines), done.stdout
    assert "2 check(s) failed" in done.stdout
    for value in SECRETS.values():
        assert value not in done.stdout + done.stderr


def test_no_secret_reaches_the_logs(world: World) -> None:
    """Last of the module: every test above went through the stack."""
    assert world.stack.log_dir is not None
    logs = [p.read_text(errors="replace") for p in Path(world.stack.log_dir).glob("*.log")]
    assert any(
        all(p in text for p in ("feishu", "dingtalk", "wecom", "discord", "matrix"))
        for text in logs
    )
    for value in SECRETS.values():
        assert all(value not in text for text in logs), "a secret leaked"
