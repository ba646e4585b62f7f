"""Headless Chromium (Debian's `chromium`) for the console's browser tests,
driven with Playwright for Python: never a downloaded browser.

`ConsolePage` wraps a page: it records every console error and uncaught
exception (a test ends by asserting there were none) and saves screenshots
under test-artifacts/console/ (git-ignored), one per page visited.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

from tests.support.paths import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts" / "console"


@contextmanager
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.exists():  # .ci/run installs it; a developer may not have yet
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class ConsolePage:
    page: Page
    base_url: str
    errors: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, browser: Browser, base_url: str) -> ConsolePage:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        found = cls(page, base_url)
        page.on("console", found._console)
        page.on("pageerror", lambda error: found.errors.append(f"uncaught: {error}"))
        return found

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            self.errors.append(f"{message.type}: {message.text} ({message.location})")

    def goto(self, route: str) -> Page:
        self.page.goto(f"{self.base_url}/console/#{route}")
        return self.page

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{re.sub(r'[^a-z0-9_-]+', '-', name.lower())}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        with suppress(Error):
            self.page.close()
