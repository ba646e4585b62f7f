"""Webhooks from a durable outbox, against a local receiver: signed, retried
with backoff while the receiver is down, delivered after the delivery service
itself was killed mid-backoff, and never sent to private addresses unless the
configuration allows them (here: 127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import says
from tests.support.stacks import (
    WEBHOOK_ENV,
    WEBHOOK_SECRET,
    eventually,
    free_port,
    fresh_postgres_database,
    runner_stats,
    running_stack,
    service_channel,
    stack_env,
    wait_until,
)
from tests.support.webhook_receiver import WebhookReceiver
from waybill.common.launch import Stack, grpc_serving
from waybill.services.delivery.signing import verify
from waybill.v1 import delivery_pb2, delivery_pb2_grpc

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hooks_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"webhooks-{request.param}")
    # A runner gives up confirming to a delivery that is away after 2 s (not 60), so
    # that delivery's own settling of held webhooks is what the tests meet.
    env = {**WEBHOOK_ENV, "WAYBILL_DEPENDENCY_OUTAGE_SECONDS": "2"}
    if request.param == "postgres":
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url, **env), data_dir) as stack,
        ):
            yield stack
    else:
        with running_stack(stack_env(data_dir, **env), data_dir) as stack:
            yield stack


@pytest.fixture
async def sdk(hooks_stack: Stack) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=hooks_stack.url, timeout=30)
    yield client
    await client.aclose()


@pytest.fixture
async def raw(hooks_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hooks_stack.url, timeout=30) as client:
        yield client


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    found = WebhookReceiver(free_port())
    yield found
    found.stop()


async def deliveries(raw: httpx.AsyncClient, thread_id: str, run_id: str) -> list[dict[str, Any]]:
    response = await raw.get(f"/threads/{thread_id}/runs/{run_id}/deliveries")
    assert response.status_code == 200, response.text
    return list(response.json())


async def finished_run(sdk: LangGraphClient, webhook: str, text: str = "hello") -> tuple[str, str]:
    thread = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(thread, "lead_agent", input=says(text), webhook=webhook)
    await sdk.runs.join(thread, run["run_id"])
    return thread, run["run_id"]


def delivered(found: list[dict[str, Any]]) -> bool:
    return bool(found) and all(d["state"] == "delivered" for d in found)


async def test_the_webhook_is_signed_and_says_how_the_run_ended(
    sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    receiver.start()
    thread, run_id = await finished_run(sdk, receiver.url)
    found = await eventually(
        lambda: _delivered_list(raw, thread, run_id), "the webhook to be delivered"
    )
    [delivery] = found
    assert delivery["source"] == "run" and delivery["url"] == receiver.url
    assert [a["status_code"] for a in delivery["attempts"]] == [200]

    [hit] = receiver.snapshot()
    headers = hit.headers
    assert verify(
        WEBHOOK_SECRET.encode(),
        headers["x-waybill-timestamp"],
        hit.body,
        headers["x-waybill-signature"],
    )
    assert not verify(
        b"another-secret", headers["x-waybill-timestamp"], hit.body, headers["x-waybill-signature"]
    )
    assert headers["idempotency-key"] == delivery["delivery_id"]
    assert headers["x-waybill-attempt-id"] == delivery["attempts"][0]["attempt_id"]
    body = json.loads(hit.body)
    assert body["run_id"] == run_id and body["thread_id"] == thread
    assert body["status"] == "success"
    assert body["values"]["messages"][-1]["content"] == "You said: hello"
    assert body["receipt"]["verdict"] == "nothing_to_deliver"
    assert body["kwargs"]["webhook"] == receiver.url


async def _delivered_list(raw: httpx.AsyncClient, thread: str, run_id: str) -> list[dict[str, Any]]:
    found = await deliveries(raw, thread, run_id)
    return found if delivered(found) else []


async def test_a_receiver_that_is_down_gets_it_once_it_is_up(
    sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    thread, run_id = await finished_run(sdk, receiver.url)  # nobody listens yet

    async def failed_twice() -> bool:
        found = await deliveries(raw, thread, run_id)
        return bool(found) and len(found[0]["attempts"]) >= 2

    await eventually(failed_twice, "two failed attempts")
    receiver.start()
    [delivery] = await eventually(lambda: _delivered_list(raw, thread, run_id), "delivery")
    attempts = delivery["attempts"]
    assert all(a["error"] and a["status_code"] is None for a in attempts[:-1])
    # In plain words: no httpx class ("ConnectError") nor its text.
    assert {a["error"] for a in attempts[:-1]} == {"could not connect to the receiver"}
    assert attempts[-1]["status_code"] == 200 and attempts[-1]["error"] is None
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    [hit] = receiver.snapshot()
    assert hit.headers["x-waybill-attempt"] == str(len(attempts))


async def test_a_failing_receiver_is_retried_and_each_attempt_recorded(
    sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    receiver.status = 503
    receiver.start()
    thread, run_id = await finished_run(sdk, receiver.url)

    async def three_answers() -> bool:
        return len(receiver.snapshot()) >= 3

    await eventually(three_answers, "three attempts")
    receiver.status = 204
    [delivery] = await eventually(lambda: _delivered_list(raw, thread, run_id), "delivery")
    hits = receiver.snapshot()
    assert len({h.headers["idempotency-key"] for h in hits}) == 1
    assert len({h.headers["x-waybill-attempt-id"] for h in hits}) == len(hits)
    codes = [a["status_code"] for a in delivery["attempts"]]
    assert codes[-1] == 204 and set(codes[:-1]) == {503}
    assert delivery["attempts"][0]["error"] == "the receiver answered 503"


async def test_thread_and_assistant_subscriptions_are_told(
    sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    receiver.start()
    assistant = await sdk.assistants.create("lead_agent", name="subscribed")
    thread = (await sdk.threads.create())["thread_id"]
    for path in (
        f"/threads/{thread}/webhooks",
        f"/assistants/{assistant['assistant_id']}/webhooks",
    ):
        response = await raw.post(path, json={"url": receiver.url + "?from=" + path.split("/")[1]})
        assert response.status_code == 200, response.text
    listed = (await raw.get(f"/threads/{thread}/webhooks")).json()
    assert [s["scope"] for s in listed] == ["thread"]

    run = await sdk.runs.create(thread, assistant["assistant_id"], input=says("hi"))
    await sdk.runs.join(thread, run["run_id"])
    found = await eventually(lambda: _delivered_list(raw, thread, run["run_id"]), "deliveries")
    assert sorted(d["source"] for d in found) == ["assistant", "thread"]
    assert sorted(h.path for h in receiver.snapshot()) == [
        "/hook?from=assistants",
        "/hook?from=threads",
    ]

    gone = await raw.delete(f"/threads/{thread}/webhooks/{listed[0]['subscription_id']}")
    assert gone.status_code == 204
    assert (await raw.get(f"/threads/{thread}/webhooks")).json() == []


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.1.2.3/hook", "not a public (globally routable) address"),
        ("http://169.254.169.254/latest/meta-data", "not a public (globally routable) address"),
        ("http://[::1]:8080/hook", "not a public (globally routable) address"),
        ("http://192.168.0.10/hook", "not a public (globally routable) address"),
        ("http://[::ffff:10.0.0.1]/hook", "not a public (globally routable) address"),
        ("ftp://example.com/hook", "use an http:// or https:// URL"),
        ("http://user:pw@127.0.0.1/hook", "credentials in the URL"),
        ("http://no-such-host.invalid/hook", "does not resolve"),
    ],
)
async def test_ssrf_targets_are_refused_at_run_creation(
    sdk: LangGraphClient, raw: httpx.AsyncClient, url: str, reason: str
) -> None:
    thread = (await sdk.threads.create())["thread_id"]
    body = {"assistant_id": "lead_agent", "input": says("x"), "webhook": url}
    response = await raw.post(f"/threads/{thread}/runs", json=body)
    assert response.status_code == 422, response.text
    assert reason in response.json()["detail"]
    assert (await raw.get(f"/threads/{thread}/runs")).json() == []  # nothing half-written
    subscribe = await raw.post(f"/threads/{thread}/webhooks", json={"url": url})
    assert subscribe.status_code == 422


async def test_killed_mid_backoff_the_delivery_service_delivers_after_restart(
    hooks_stack: Stack, sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    thread, run_id = await finished_run(sdk, receiver.url)  # the receiver is down

    async def failed_once() -> bool:
        found = await deliveries(raw, thread, run_id)
        return bool(found) and len(found[0]["attempts"]) >= 1

    await eventually(failed_once, "a failed attempt")
    delivery = hooks_stack.processes["delivery"]
    delivery.send_signal(signal.SIGKILL)
    delivery.wait()
    receiver.start()
    await asyncio.sleep(1.0)  # past every backoff: a live outbox would have sent it by now
    assert receiver.snapshot() == []

    hooks_stack.start_one("delivery")
    address = hooks_stack.address_of("delivery")
    wait_until(lambda: grpc_serving(address), "delivery serving again")
    [done] = await eventually(
        lambda: _delivered_list(raw, thread, run_id), "delivery after restart"
    )
    hits = receiver.snapshot()
    assert len(hits) == 1  # once: the attempts before the kill never reached anyone
    assert hits[0].headers["idempotency-key"] == done["delivery_id"]
    assert hits[0].headers["x-waybill-attempt-id"] == done["attempts"][-1]["attempt_id"]
    assert len(done["attempts"]) >= 2


def stored_receipt(address: str, run_id: str) -> bool:
    with service_channel(address) as channel:
        try:
            delivery_pb2_grpc.DeliveryStub(channel).GetReceipt(
                delivery_pb2.GetReceiptRequest(run_id=run_id), timeout=5
            )
        except grpc.RpcError:
            return False
    return True


async def test_a_webhook_its_runner_never_confirmed_is_released_by_delivery(
    hooks_stack: Stack, sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """Receipt written, status accepted, then delivery dies before the runner can
    confirm: the restarted delivery asks admission how the run ended and sends."""
    receiver.start()
    thread = (await sdk.threads.create())["thread_id"]
    slow = says('/tool wait {"seconds": 1}')
    run_id = (await sdk.runs.create(thread, "lead_agent", input=slow, webhook=receiver.url))[
        "run_id"
    ]

    async def in_the_tool() -> bool:
        found = (await raw.get(f"/threads/{thread}/runs/{run_id}/events?type=tool_start")).json()
        return bool(found)

    await eventually(in_the_tool, "the slow tool to start")
    admission, delivery = hooks_stack.processes["admission"], hooks_stack.processes["delivery"]
    runner_address = hooks_stack.address_of("runner")
    failed_before = runner_stats(runner_address)["confirmations_failed"]
    admission.send_signal(signal.SIGSTOP)  # the runner's status report waits here
    try:
        address = hooks_stack.address_of("delivery")
        await eventually(lambda: asyncio.to_thread(stored_receipt, address, run_id), "the receipt")
        delivery.send_signal(signal.SIGSTOP)  # and now its confirmation will wait here
    finally:
        admission.send_signal(signal.SIGCONT)
    assert (await sdk.runs.get(thread, run_id))["status"] in ("running", "success")

    async def succeeded() -> bool:
        return (await sdk.runs.get(thread, run_id))["status"] == "success"

    await eventually(succeeded, "the status to be accepted")
    delivery.send_signal(signal.SIGKILL)  # the confirmation in flight fails
    delivery.wait()

    async def confirmation_failed() -> bool:
        return runner_stats(runner_address)["confirmations_failed"] > failed_before

    await eventually(confirmation_failed, "the runner's confirmation to fail")
    assert receiver.snapshot() == []
    hooks_stack.start_one("delivery")
    wait_until(lambda: grpc_serving(address), "delivery serving again")
    [done] = await eventually(lambda: _delivered_list(raw, thread, run_id), "the held webhook sent")
    assert done["epoch"] == 1
    [hit] = receiver.snapshot()
    assert json.loads(hit.body)["status"] == "success"


async def test_a_run_cancelled_before_it_started_still_calls_its_webhook(
    sdk: LangGraphClient, raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    receiver.start()
    thread = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.create(thread, "lead_agent", input=says('/tool wait {"seconds": 1}'))
    queued = await sdk.runs.create(thread, "lead_agent", input=says("later"), webhook=receiver.url)
    await sdk.runs.cancel(thread, queued["run_id"])
    await sdk.runs.join(thread, first["run_id"])
    await sdk.runs.join(thread, queued["run_id"])
    [done] = await eventually(lambda: _delivered_list(raw, thread, queued["run_id"]), "the webhook")
    [hit] = receiver.snapshot()
    body = json.loads(hit.body)
    assert body["run_id"] == queued["run_id"] and body["status"] == "interrupted"
    assert done["source"] == "run"


async def test_a_stateless_run_calls_its_webhook_though_its_thread_is_gone(
    raw: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    receiver.start()
    body = {"assistant_id": "lead_agent", "input": says("stateless"), "webhook": receiver.url}
    reply = await raw.post("/runs/wait", json=body)
    assert reply.status_code == 200, reply.text

    async def one_hit() -> bool:
        return len(receiver.snapshot()) == 1

    await eventually(one_hit, "the webhook")
    sent = json.loads(receiver.snapshot()[0].body)
    assert sent["status"] == "success"
    assert sent["values"]["messages"][-1]["content"] == "You said: stateless"
    assert (await raw.get(f"/threads/{sent['thread_id']}")).status_code == 404
