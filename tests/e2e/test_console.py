"""The console (/console) in a real headless Chromium against a real stack:
every page loads and shows what the API holds, chat streams the scripted
model's tokens, a running run is cancelled from its page (and no longer can be
once it is over), a run taken over by another runner says so, an interrupt is
resumed through its form, a dropped stream resumes without duplicates, an
`agent ⇄ tools` loop is drawn as LangGraph draws it, and no page logs a console
error. Screenshots land in test-artifacts/console/."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from playwright.sync_api import Browser, Page, Route, expect

from tests.support.console_browser import ConsolePage, chromium
from tests.support.helpers import present, says, slow, tools, write
from tests.support.paths import FIXTURES, REPO
from tests.support.stacks import (
    WEBHOOK_ENV,
    free_port,
    stack_in_mode,
    start_second_gateway,
    wait_until,
)
from tests.support.webhook_receiver import WebhookReceiver
from waybill.common.launch import SERVICES, Stack

# A stack and a browser start in the first test of the file (slow on a loaded machine).
pytestmark = pytest.mark.timeout(240)

# LangGraph Platform's own answers (langgraph dev 0.16.7), recorded for test_studio.py.
STUDIO_REFERENCE = FIXTURES / "studio_graphs" / "reference.json"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("console")
    config = {
        "prices": {"scripted": {"input_per_million": 1.0, "output_per_million": 2.0}},
        "channels": [
            {
                "name": "support",
                "platform": "webhook",
                "secret_env": "CONSOLE_HOOK_SECRET",
                # Loopback only; nothing is posted in these tests.
                "reply_url": f"http://127.0.0.1:{free_port()}/replies",
            }
        ],
    }
    config_file = data_dir / "waybill.yaml"
    config_file.write_text(yaml.safe_dump(config))
    extra = {
        "WAYBILL_CONFIG": str(config_file),
        "CONSOLE_HOOK_SECRET": "console-hook-secret",
        **WEBHOOK_ENV,  # webhooks to a local receiver
    }
    with stack_in_mode("sqlite", data_dir, **extra) as stack:
        yield stack


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> str:
    return stack.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as found:
        yield found


@pytest.fixture
def api(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


@pytest.fixture
def console(browser: Browser, base_url: str) -> Iterator[ConsolePage]:
    page = ConsolePage.open(browser, base_url)
    yield page
    errors = list(page.errors)
    page.close()
    assert errors == []


def finished_run(api: httpx.Client, thread_id: str, **body: object) -> str:
    api.post(f"/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", **body})
    return str(api.get(f"/threads/{thread_id}/runs").json()[0]["run_id"])


def run_status(api: httpx.Client, thread_id: str, run_id: str) -> str:
    return str(api.get(f"/threads/{thread_id}/runs/{run_id}").json()["status"])


def test_the_files_are_served_with_their_types_and_a_strict_policy(api: httpx.Client) -> None:
    index = api.get("/console/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    policy = index.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    module = api.get("/console/js/app.js")
    assert module.headers["content-type"].startswith("text/javascript")
    assert module.headers["x-content-type-options"] == "nosniff"
    assert api.get("/console", follow_redirects=False).status_code in (301, 307)
    assert api.get("/console/../gateway/app.py").status_code == 404
    vendored = REPO / "gateway/console/vendor/preact-htm.js"
    assert api.get("/console/vendor/preact-htm.js").content == vendored.read_bytes()


def test_the_channel_bindings_route_shows_no_secret(api: httpx.Client) -> None:
    [support] = api.get("/channels").json()
    assert support == {
        "name": "support",
        "platform": "webhook",
        "owner": "local",
        "inbound_path": "/channels/webhook/support",
    }
    assert "console-hook-secret" not in json.dumps(support)


def test_threads_thread_and_run_pages(console: ConsolePage, api: httpx.Client) -> None:
    thread_id = api.post("/threads", json={"metadata": {"team": "console"}}).json()["thread_id"]
    run_id = finished_run(api, thread_id, input=says('/tool add {"a": 1, "b": 2}'))

    page = console.goto("/threads")
    row = page.locator("[data-testid=threads] tr", has_text=thread_id[:8])
    expect(row).to_contain_text("team: console")
    console.shot("threads")
    page.fill("input[name=metadata]", '{"team": "nobody"}')
    page.click("button[type=submit]")
    expect(page.get_by_text("No threads.")).to_be_visible()

    page = console.goto(f"/threads/{thread_id}")
    messages = page.locator("[data-testid=messages]")
    expect(messages).to_contain_text("Tool add returned: 3.0")
    expect(messages.locator("details.call")).to_contain_text("add")  # the call, folded
    console.shot("thread-chat")
    page.click("[data-tab=state]")
    expect(page.locator("pre.json").first).to_contain_text("Tool add returned: 3.0")
    page.click("[data-tab=history]")
    history = page.locator("[data-testid=history] tbody tr")
    expect(history.first).to_be_visible()
    assert history.count() >= 3
    history.last.click()  # the first checkpoint: time travel to the input
    expect(page.get_by_text("Fork a run from here")).to_be_visible()
    console.shot("thread-history")
    page.click("[data-tab=runs]")
    expect(page.locator("[data-testid=runs]")).to_contain_text(run_id[:8])

    page = console.goto(f"/threads/{thread_id}/runs/{run_id}")
    expect(page.locator("[data-testid=run-status]")).to_have_text("success")
    expect(page.locator("[data-testid=receipt]")).to_contain_text("nothing_to_deliver")
    timeline = page.locator("[data-testid=timeline]")
    expect(timeline).to_contain_text("add")
    expect(timeline).to_contain_text("scripted")
    usage = api.get(f"/threads/{thread_id}/runs/{run_id}").json()["usage"]
    expect(page.locator("[data-testid=usage]")).to_contain_text(str(usage["cost"]))
    expect(page.locator("[data-testid=changes]")).to_contain_text("No file changed.")
    expect(page.locator("[data-testid=deliveries]")).to_contain_text("No webhook")
    events = (
        api.get(
            f"/threads/{thread_id}/runs/{run_id}/stream", headers={"Last-Event-ID": "-1"}
        ).text.count("\nevent: ")
        + 1
    )
    expect(page.locator("[data-testid=event-count]")).to_have_text(str(events))
    page.click("[data-testid=join]")
    expect(page.get_by_text("Joined: the run's result")).to_be_visible()
    console.shot("run")
    page.click("[data-testid=rerun]")
    expect(page).not_to_have_url(f"{console.base_url}/console/#/threads/{thread_id}/runs/{run_id}")
    expect(page.locator("[data-testid=run-status]")).to_have_text("success")
    runs = api.get(f"/threads/{thread_id}/runs").json()
    assert len(runs) == 2 and runs[0]["kwargs"]["input"] == runs[1]["kwargs"]["input"]


def test_fork_a_run_from_a_checkpoint(console: ConsolePage, api: httpx.Client) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    first = finished_run(api, thread_id, input=says("first question"))
    page = console.goto(f"/threads/{thread_id}")
    page.click("[data-tab=history]")
    page.locator("[data-testid=history] tbody tr").first.click()
    page.fill("textarea[name=fork-input]", json.dumps(says("forked question")))
    page.click("[data-testid=fork]")
    expect(page.locator("[data-testid=run-status]")).to_have_text("success")
    forked = page.url.rsplit("/", 1)[-1]
    assert forked != first
    values = api.get(f"/threads/{thread_id}/state").json()["values"]
    assert values["messages"][-1]["content"] == "You said: forked question"


def test_chat_streams_the_models_tokens(console: ConsolePage, api: httpx.Client) -> None:
    page = console.goto("/chat")
    # A network of 512 KB/s (the events of 2,000 tokens take seconds to arrive,
    # not one frame, however fast the machine).
    network = page.context.new_cdp_session(page)
    network.send("Network.enable")
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": 512 * 1024, "uploadThroughput": -1},
    )
    # Every value the token counter shows: fewer than the tokens, since the
    # page draws once per animation frame, not once per token.
    page.evaluate(
        """() => {
        window.seen = [];
        const counter = document.querySelector('[data-testid=streamed-tokens]');
        new MutationObserver(() => window.seen.push(counter.textContent))
          .observe(counter, {childList: true, characterData: true, subtree: true});
      }"""
    )
    page.fill("textarea[name=message]", "/tokens 2000")
    expect(page.locator("form.chat-input button[type=submit]")).to_be_enabled()
    page.keyboard.press("Enter")
    expect(page.locator("[data-testid=streamed-tokens]")).to_have_text("2000", timeout=60_000)
    expect(page.locator("[data-testid=messages]")).to_contain_text("t1999")
    seen = [int(value) for value in page.evaluate("window.seen")]
    assert seen[-1] == 2000 and seen == sorted(seen)
    assert 10 < len(seen) < 2000  # tokens arrived over many frames, drawn in batches
    console.shot("chat")
    thread_id = page.url.split("/chat/")[1]
    messages = api.get(f"/threads/{thread_id}/state").json()["values"]["messages"]
    assert messages[-1]["content"].endswith("t1999 ")


def test_cancel_a_running_run_from_its_page(console: ConsolePage, api: httpx.Client) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    run = api.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": slow(30)}
    ).json()
    page = console.goto(f"/threads/{thread_id}/runs/{run['run_id']}")
    wait_until(lambda: run_status(api, thread_id, run["run_id"]) == "running", "the run starts")
    page.reload()
    expect(page.locator("[data-testid=run-status]")).to_have_text("running")
    page.click("[data-testid=cancel]")
    expect(page.locator("[data-testid=run-status]")).to_have_text("interrupted")
    assert run_status(api, thread_id, run["run_id"]) == "interrupted"
    console.shot("run-cancelled")

    again = api.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": slow(30)}
    ).json()
    page = console.goto(f"/threads/{thread_id}/runs/{again['run_id']}")
    wait_until(lambda: run_status(api, thread_id, again["run_id"]) == "running", "it starts")
    page.reload()
    expect(page.locator("[data-testid=run-status]")).to_have_text("running")
    page.click("[data-testid=rollback]")  # the run and what it wrote are gone
    expect(page).to_have_url(f"{console.base_url}/console/#/threads/{thread_id}")
    wait_until(
        lambda: api.get(f"/threads/{thread_id}/runs/{again['run_id']}").status_code == 404,
        "the rolled-back run is deleted",
    )


def test_cancel_is_disabled_once_another_run_rolled_this_one_back(
    console: ConsolePage, api: httpx.Client
) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    run = api.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": slow(30)}
    ).json()
    wait_until(lambda: run_status(api, thread_id, run["run_id"]) == "running", "the run starts")
    page = console.goto(f"/threads/{thread_id}/runs/{run['run_id']}")
    expect(page.locator("[data-testid=cancel]")).to_be_enabled()
    api.post(  # a newer run rolls this one back: it is over, and deleted
        f"/threads/{thread_id}/runs",
        json={
            "assistant_id": "lead_agent",
            "input": says("next"),
            "multitask_strategy": "rollback",
        },
    )
    expect(page.get_by_role("alert").first).to_contain_text("not found")
    expect(page.locator("[data-testid=cancel]:enabled")).to_have_count(0)
    expect(page.locator("[data-testid=rollback]:enabled")).to_have_count(0)
    # The browser logs each 404 of the deleted run's reads; nothing else may appear.
    gone = f"404 (Not Found) ({{'url': '{console.base_url}/threads/{thread_id}/runs/{run['run_id']}"
    console.errors[:] = [error for error in console.errors if gone not in error]


def restart_runner(stack: Stack) -> None:
    """SIGTERM the runner (it hands back what outlives its shutdown grace) and start a
    new runner process in its place: another runner, with an id of its own."""
    leaving = stack.processes["runner"]
    leaving.send_signal(signal.SIGTERM)
    assert leaving.wait(30) == 0
    stack.start_one("runner", SERVICES["runner"])
    stack.wait_ready(["runner"])


def test_a_run_taken_over_by_another_runner_shows_its_attempt(
    console: ConsolePage, api: httpx.Client, stack: Stack
) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    # The tool outlasts the runner's shutdown grace (2 s), so attempt 1 is handed back.
    run = api.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": slow(5)}
    ).json()
    page = console.goto(f"/threads/{thread_id}/runs/{run['run_id']}")
    attempt = page.locator("[data-testid=run-attempt]")
    expect(attempt).to_have_text("1")
    expect(page.locator("[data-testid=taken-over]")).to_have_count(0)
    restart_runner(stack)  # the new runner resumes the run from its checkpoint
    expect(page.locator("[data-testid=run-status]")).to_have_text("success", timeout=60_000)
    expect(attempt).to_have_text(re.compile(r"^2\b"))
    expect(page.locator("[data-testid=taken-over]")).to_have_text("taken over")
    expect(page.locator("[data-testid=cancel]")).to_be_disabled()
    console.shot("run-taken-over")


def test_a_dropped_stream_resumes_without_duplicates(
    console: ConsolePage, api: httpx.Client
) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    run = api.post(
        f"/threads/{thread_id}/runs",
        json={"assistant_id": "lead_agent", "input": slow(2), "stream_mode": ["values", "updates"]},
    ).json()
    page = console.goto(f"/threads/{thread_id}/runs/{run['run_id']}")
    drop = page.locator("[data-testid=drop]")
    expect(drop).to_be_enabled()
    drop.click()  # cut as a network failure would, mid-run
    expect(page.locator("[data-testid=run-status]")).to_have_text("success", timeout=30_000)
    expect(page.locator("[data-testid=reconnects]")).not_to_have_text("reconnects: 0")
    replay = api.get(
        f"/threads/{thread_id}/runs/{run['run_id']}/stream", headers={"Last-Event-ID": "-1"}
    ).text
    ids = [line[4:] for line in replay.splitlines() if line.startswith("id: ")]
    expect(page.locator("[data-testid=event-count]")).to_have_text(str(len(ids)))


def test_an_interrupt_is_answered_through_the_form(console: ConsolePage, api: httpx.Client) -> None:
    page = console.goto("/chat")
    page.select_option("select[name=assistant]", "approval")
    page.fill("textarea[name=message]", '{"action": "deploy"}')
    page.click("form.chat-input button[type=submit]")
    form = page.locator("[data-testid=interrupt]")
    expect(form).to_contain_text("approve deploy?")
    console.shot("chat-interrupt")
    form.locator("input[name=resume]").fill("yes")
    form.locator("button[type=submit]").click()
    expect(page.locator("pre.json").first).to_contain_text("deploy: yes")
    expect(form).to_have_count(0)
    thread_id = page.url.split("/chat/")[1]
    # The page shows the resumed run's values as they stream; its end comes after.
    wait_until(lambda: api.get(f"/threads/{thread_id}").json()["status"] == "idle", "the run's end")
    thread = api.get(f"/threads/{thread_id}").json()
    assert thread["values"]["decision"] == "deploy: yes"
    assert thread["status"] == "idle"


def test_a_thousand_messages_render_only_what_is_in_view(
    console: ConsolePage, api: httpx.Client
) -> None:
    thread_id = api.post("/threads", json={"metadata": {"graph_id": "lead_agent"}}).json()[
        "thread_id"
    ]
    messages = [
        {"type": "human" if i % 2 == 0 else "ai", "content": f"message number {i}", "id": f"m{i}"}
        for i in range(1000)
    ]
    update = api.post(
        f"/threads/{thread_id}/state", json={"values": {"messages": messages}, "as_node": "agent"}
    )
    assert update.status_code == 200, update.text
    page = console.goto(f"/threads/{thread_id}")
    listing = page.locator("[data-testid=messages]")
    expect(listing).to_have_attribute("data-count", "1000")
    expect(listing).to_contain_text("message number 999")  # it opens at the end
    rendered = listing.locator("[data-row]").count()
    assert 0 < rendered < 100
    listing.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
    expect(listing).to_contain_text("message number 0")
    assert listing.locator("[data-row]").count() < 100
    console.shot("thread-1000-messages")


def test_assistants_create_edit_versions_and_graph(console: ConsolePage, api: httpx.Client) -> None:
    page = console.goto("/assistants")
    page.click("[data-testid=new-assistant]")
    form = page.locator("[data-testid=create-assistant]")
    form.locator("select[name=graph_id]").select_option("approval")
    form.locator("input[name=name]").fill("release approvals")
    form.locator("textarea[name=metadata]").fill('{"team": "release"}')
    form.locator("button[type=submit]").click()
    expect(page.locator("[data-testid=graph] [data-node=ask]")).to_be_visible()
    assistant_id = page.url.rsplit("/", 1)[-1]
    console.shot("assistant-graph")
    page.click("[data-tab=edit]")
    page.fill("[data-testid=edit-assistant] input[name=name]", "release approvals v2")
    page.click("[data-testid=edit-assistant] button[type=submit]")
    expect(page.get_by_text("Saved.")).to_be_visible()
    page.click("[data-tab=versions]")
    expect(page.locator("[data-testid=versions] tbody tr")).to_have_count(2)
    console.shot("assistant-versions")
    stored = api.get(f"/assistants/{assistant_id}").json()
    assert (stored["name"], stored["version"], stored["metadata"]["team"]) == (
        "release approvals v2",
        2,
        "release",
    )


def node_boxes(page: Page) -> dict[str, dict[str, float]]:
    """Where each node of the drawn graph is, by node id, in the drawing's own units
    (the units of its edges' paths)."""
    return {
        str(node.get_attribute("data-node")): {
            side: float(str(node.locator("rect").get_attribute(side)))
            for side in ("x", "y", "width", "height")
        }
        for node in page.locator("[data-testid=graph] [data-node]").all()
    }


def assert_agent_tools_loop(page: Page, agent: str, tools: list[str]) -> None:
    """As LangGraph draws it: __start__, the agent one row below, its tools one row
    below that with __end__, and the way back drawn up from tools into the agent."""
    expect(page.locator("[data-testid=graph] [data-node=__end__]")).to_be_visible()
    boxes = node_boxes(page)
    step = boxes[agent]["y"] - boxes["__start__"]["y"]
    assert step > 0
    for tool in tools:
        assert boxes[tool]["y"] - boxes[agent]["y"] == step, (tool, boxes)
    assert boxes["__end__"]["y"] == boxes[tools[0]]["y"], boxes
    for tool in tools:
        back = page.locator(f"[data-testid=graph] path[data-edge='{tool}->{agent}']")
        start_x, start_y = map(float, str(back.get_attribute("d"))[1:].split()[:2])
        assert start_y == pytest.approx(boxes[tool]["y"], abs=1)  # leaves the tool's top
        assert boxes[tool]["x"] <= start_x <= boxes[tool]["x"] + boxes[tool]["width"]


def test_the_agent_tools_loop_is_drawn_as_langgraph_draws_it(
    console: ConsolePage, api: httpx.Client
) -> None:
    [lead] = [
        a for a in api.post("/assistants/search", json={}).json() if a["graph_id"] == "lead_agent"
    ]
    page = console.goto(f"/assistants/{lead['assistant_id']}")
    assert_agent_tools_loop(page, "agent", ["tools", "task"])
    console.shot("assistant-graph-lead-agent")

    # A create_react_agent graph, as LangGraph Platform itself answers its drawing.
    react = json.loads(STUDIO_REFERENCE.read_text())["graph"]["agent"]["absent"]

    def reference_drawing(route: Route) -> None:
        route.fulfill(json=react)

    page.route("**/assistants/*/graph*", reference_drawing)
    page.reload()
    assert_agent_tools_loop(page, "agent", ["tools"])
    conditional = page.locator("[data-testid=graph] path.conditional")
    expect(conditional).to_have_count(sum(1 for e in react["edges"] if e.get("conditional")))
    console.shot("assistant-graph-react-agent")


def test_operations_page(console: ConsolePage, api: httpx.Client) -> None:
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    finished_run(api, thread_id, input=says("count my tokens"))
    cron = api.post(
        "/runs/crons",
        json={"assistant_id": "approval", "schedule": "0 3 * * *", "input": {"action": "x"}},
    ).json()
    page = console.goto("/operations")
    expect(page.locator("[data-testid=runs-by-status]")).to_contain_text("success (")
    page.click("[data-filter=success]")
    expect(page.locator("[data-testid=runs-by-status] [data-testid=runs]")).to_contain_text(
        thread_id[:8]
    )
    expect(page.locator("[data-testid=usage-by-model]")).to_contain_text("scripted")
    expect(page.locator("[data-testid=usage-by-user]")).to_contain_text("local")
    crons = page.locator("[data-testid=crons]")
    expect(crons).to_contain_text(cron["cron_id"][:8])
    expect(crons).to_contain_text("0 3 * * *")
    expect(page.locator("[data-testid=channels]")).to_contain_text("/channels/webhook/support")
    # No `quotas` section: the panel says so (test_console_quotas.py: with one).
    quotas = page.locator("[data-testid=quota-me]")
    expect(quotas).to_contain_text("No quota is configured for local")
    console.shot("operations")
    api.delete(f"/runs/crons/{cron['cron_id']}")


def test_the_key_is_not_asked_for_with_auth_off(console: ConsolePage) -> None:
    page = console.goto("/threads")
    expect(page.locator("h1")).to_have_text("Threads")
    assert page.evaluate("Object.keys(sessionStorage)") == []


def test_a_run_started_on_one_gateway_is_followed_through_another(
    browser: Browser, stack: Stack, api: httpx.Client
) -> None:
    other = start_second_gateway(stack)
    thread_id = api.post("/threads", json={}).json()["thread_id"]
    run = api.post(
        f"/threads/{thread_id}/runs", json={"assistant_id": "lead_agent", "input": slow(1)}
    ).json()
    console = ConsolePage.open(browser, other)
    try:
        page = console.goto(f"/threads/{thread_id}/runs/{run['run_id']}")
        expect(page.locator("[data-testid=run-status]")).to_have_text("success", timeout=30_000)
        expect(page.locator("[data-testid=receipt]")).to_contain_text("nothing_to_deliver")
        assert console.errors == []
    finally:
        console.close()


def test_outputs_changes_and_webhook_deliveries(console: ConsolePage, api: httpx.Client) -> None:
    receiver = WebhookReceiver(free_port()).start()
    try:
        thread_id = api.post("/threads", json={}).json()["thread_id"]
        run_id = finished_run(
            api,
            thread_id,
            input=tools(write("report.md", "# the report"), present("report.md")),
            webhook=receiver.url,
        )
        wait_until(lambda: len(receiver.received) == 1, "the webhook is delivered")
        page = console.goto(f"/threads/{thread_id}/runs/{run_id}")
        expect(page.locator("[data-testid=receipt]")).to_contain_text("delivered")
        expect(page.locator("[data-testid=changes] [data-change=created]")).to_contain_text(
            "report.md"
        )
        deliveries = page.locator("[data-testid=deliveries]")
        expect(deliveries).to_contain_text(receiver.url)
        expect(deliveries).to_contain_text("200")
        with page.expect_download() as downloading:
            page.locator("[data-testid=outputs] button", has_text="report.md").click()
        saved = downloading.value.path()
        assert downloading.value.suggested_filename == "report.md"
        assert Path(saved).read_text() == "# the report"
        console.shot("run-delivered")
    finally:
        receiver.stop()
