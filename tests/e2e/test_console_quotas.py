"""The console's Quotas panel (Operations page) in headless Chromium against a
stack with auth and a `quotas` section: the signed-in caller's limits beside
their use, as `GET /quotas/me` answers them; an admin's look-up of another
principal (`/quotas/{principal}`); a user's look-up refused, said in words.
(With no quotas configured, test_console.py's operations test sees the panel
say so.)"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import Browser, Locator, expect

from tests.support.console_browser import ConsolePage, chromium
from tests.support.helpers import says
from tests.support.stacks import stack_in_mode

pytestmark = pytest.mark.timeout(240)  # a stack and a browser start in the first test

ROOT_KEY = "console-quota-root-key"
ALICE_KEY = "console-quota-alice-key"
# Each use beside the limit it is counted against (the panel's rows).
METERED = {
    "max_active_runs": "active_runs",
    "max_pending_runs": "pending_runs",
    "runs_per_minute": "runs_this_minute",
    "tokens_per_day": "tokens_today",
    "cost_per_day": "cost_today",
}


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("console-quotas")
    config = {
        "auth": {
            "principals": [
                {"user_id": "alice", "key_sha256": key_hash(ALICE_KEY)},
                {"user_id": "root", "role": "admin", "key_sha256": key_hash(ROOT_KEY)},
            ]
        },
        "quotas": {
            "default": {"max_active_runs": 3, "tokens_per_day": 100000},
            "principals": {"alice": {"max_active_runs": 1, "tokens_per_day": 5000}},
            "run": {"max_tokens": 20000},
        },
    }
    config_file = data_dir / "waybill.yaml"
    config_file.write_text(yaml.safe_dump(config))
    with stack_in_mode("sqlite", data_dir, WAYBILL_CONFIG=str(config_file)) as stack:
        yield stack.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as found:
        yield found


@pytest.fixture
def console(browser: Browser, base_url: str) -> Iterator[ConsolePage]:
    page = ConsolePage.open(browser, base_url)
    yield page
    page.close()


def signed_in(console: ConsolePage, key: str) -> None:
    page = console.goto("/operations")
    page.fill("input[name=key]", key)
    page.click("form.signin button[type=submit]")
    expect(page.locator("[data-testid=quota-me]")).to_be_visible()
    # Before the key, refused calls are the only errors (Chromium logs each).
    assert all("status of 401" in error for error in console.errors), console.errors
    console.errors.clear()


def assert_shows(report: Locator, answer: dict[str, Any]) -> None:
    """The panel's rows are the answer's set limits, each beside its use."""
    expect(report).to_have_attribute("data-principal", answer["principal"])
    limits, use = answer["limits"], answer["use"]
    metered = {limit: used for limit, used in METERED.items() if limits[limit] is not None}
    rows = report.locator("tr[data-limit]")
    expect(rows).to_have_count(len(metered))
    for limit, used in metered.items():
        row = report.locator(f"tr[data-limit={limit}]")
        expect(row).to_have_attribute("data-value", str(limits[limit]))
        expect(row).to_have_attribute("data-use", str(use[used]))
        if limit != "cost_per_day":  # counts: shown with thousands separators
            expect(row).to_contain_text(f"{use[used]:,} / {limits[limit]:,}")
    expect(report).to_contain_text(f"tokens per run: {limits['max_tokens']:,}")
    expect(report.locator("[data-resets-at]")).to_have_attribute(
        "data-resets-at", answer["resets_at"]
    )


def test_the_quotas_panel_shows_limits_beside_use_and_an_admin_looks_up_another(
    console: ConsolePage, base_url: str
) -> None:
    with httpx.Client(base_url=base_url, headers={"x-api-key": ROOT_KEY}, timeout=60) as root:
        run = {"assistant_id": "lead_agent", "input": says("spend a few tokens")}
        thread_id = str(uuid.uuid4())
        done = root.post(f"/threads/{thread_id}/runs/wait", json={**run, "if_not_exists": "create"})
        assert done.status_code == 200, done.text
        mine = root.get("/quotas/me").json()
        of_alice = root.get("/quotas/alice").json()
    assert mine["use"]["tokens_today"] > 0
    assert (mine["limits"]["max_active_runs"], of_alice["limits"]["max_active_runs"]) == (3, 1)

    signed_in(console, ROOT_KEY)
    page = console.page
    panel = page.locator("[data-testid=quotas]")
    assert_shows(panel.locator("[data-testid=quota-me]"), mine)
    tokens = panel.locator("[data-testid=quota-me] tr[data-limit=tokens_per_day]")
    expect(tokens).to_contain_text("tokens today")
    expect(tokens).to_contain_text(f"{mine['use']['tokens_today']:,} / 100,000")
    expect(panel).to_contain_text("No limit on: pending runs, runs per minute, cost per day")

    panel.locator("input[name=principal]").fill("alice")
    panel.locator("button[type=submit]").click()
    assert_shows(panel.locator("[data-testid=quota-lookup]"), of_alice)
    console.shot("operations-quotas")
    assert console.errors == []


def test_a_users_look_up_of_another_is_refused_in_words(console: ConsolePage) -> None:
    signed_in(console, ALICE_KEY)
    panel = console.page.locator("[data-testid=quotas]")
    expect(panel.locator("[data-testid=quota-me]")).to_have_attribute("data-principal", "alice")
    panel.locator("input[name=principal]").fill("root")
    panel.locator("button[type=submit]").click()
    refused = panel.locator("[data-testid=quota-lookup-error]")
    expect(refused).to_contain_text("only admins may read another principal's")
    expect(panel.locator("[data-testid=quota-lookup]")).to_have_count(0)
    # The refused call is the page's only error (Chromium logs it).
    assert console.errors and all("status of 403" in error for error in console.errors)
