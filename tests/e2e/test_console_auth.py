"""The console with auth on: the page asks for a key, keeps it in this tab only
(sessionStorage: no cookie, no localStorage), sends it on every call and on the
streams, and asks again when it is refused."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.support.console_browser import ConsolePage, chromium
from tests.support.stacks import stack_in_mode

pytestmark = pytest.mark.timeout(240)  # a stack and a browser start in the first test

API_KEY = "console-admin-key-0001"
REFUSED = "status of 401"  # Chromium logs each refused call as a console error


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("console-auth")
    with stack_in_mode("sqlite", data_dir, WAYBILL_API_KEY=API_KEY) as stack:
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


def sign_in(console: ConsolePage, key: str, kind: str) -> None:
    page = console.page
    page.fill("input[name=key]", key)
    page.select_option("select[name=kind]", kind)
    page.click("form.signin button[type=submit]")


def test_sign_in_with_a_key_then_browse_and_chat(console: ConsolePage, base_url: str) -> None:
    headers = {"x-api-key": API_KEY}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as api:
        thread_id = api.post("/threads", json={"metadata": {"who": "api"}}).json()["thread_id"]
        assert httpx.get(f"{base_url}/console/").status_code == 200  # the files need no key

    page = console.goto("/threads")
    expect(page.locator("form.signin")).to_contain_text("auth on")
    console.shot("auth-sign-in")
    sign_in(console, "not-the-key", "x-api-key")
    expect(page.locator("form.signin")).to_contain_text("That key was refused.")
    # Before a key was accepted, refused calls are the only errors.
    assert console.errors and all(REFUSED in error for error in console.errors)
    console.errors.clear()

    sign_in(console, API_KEY, "bearer")
    expect(page.locator("[data-testid=threads]")).to_contain_text(thread_id[:8])
    console.shot("auth-threads")
    page.reload()  # the key stays in the tab
    expect(page.locator("[data-testid=threads]")).to_contain_text(thread_id[:8])
    storage = page.evaluate(
        "() => ({local: Object.keys(localStorage), "
        "session: Object.keys(sessionStorage).sort(), cookie: document.cookie})"
    )
    assert storage == {
        "local": [],
        "session": ["waybill.console.key", "waybill.console.keyKind"],
        "cookie": "",
    }

    console.goto("/chat")
    page.fill("textarea[name=message]", "hello through auth")
    page.click("form.chat-input button[type=submit]")  # its stream needs the key too
    expect(page.locator("[data-testid=messages]")).to_contain_text("You said: hello through auth")
    console.goto("/operations")
    # The answer shows as it streams; the run's status is written after its stream,
    # and the panel reads once: refresh it until the run has ended.
    panel = page.locator("[data-testid=runs-by-status]")
    for _ in range(40):
        if "running (0)" in panel.inner_text():
            break
        panel.get_by_role("button", name="Refresh").click()
        page.wait_for_timeout(250)
    expect(panel).to_contain_text("success (1)")
    assert console.errors == []

    page.click("text=Sign out")
    expect(page.locator("form.signin")).to_be_visible()
    assert page.evaluate("Object.keys(sessionStorage)") == []


def test_another_tab_is_asked_again(console: ConsolePage) -> None:
    page = console.goto("/operations")
    expect(page.locator("form.signin")).to_be_visible()
    assert all(REFUSED in error for error in console.errors)
