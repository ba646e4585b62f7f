"""A web page cannot drive a gateway that runs with auth off (gateway/browser_guard.py).

The attack: any page a browser on this machine opens calls the gateway on 127.0.0.1
(auth off: every request acts as the local user), directly or by DNS rebinding, and
starts runs that call `bash`. With auth off now: a preflight or a request from an
origin that is not the console's or Studio's is refused, a Host that is not a
loopback name (or one configured) is refused, and the sandbox's tools are not
offered unless the config says so. With auth on, or CORS set explicitly, nothing
of that changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from langgraph_sdk import get_client
from starlette.testclient import TestClient

from tests.support.helpers import after_its_end, tools
from tests.support.stacks import stack_in_mode
from waybill.common.auth_mode import sandbox_offered
from waybill.common.launch import Stack
from waybill.common.settings import Settings
from waybill.gateway.app import create_app
from waybill.gateway.browser_guard import host_name

STUDIO = "https://smith.langchain.com"
EVIL = "http://evil.example"


def preflight(origin: str) -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": "POST"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Auth off, a sandbox configured without `allow_without_auth`, one extra Host."""
    data_dir = tmp_path_factory.mktemp("browser-guard")
    config = data_dir / "waybill.yaml"
    config.write_text(yaml.safe_dump({"sandbox": {"provider": "local"}}))
    extra = {"WAYBILL_CONFIG": str(config), "WAYBILL_ALLOWED_HOSTS": "waybill.test"}
    with stack_in_mode("sqlite", data_dir, **extra) as running:
        yield running


async def thread_count(http: httpx.AsyncClient) -> int:
    reply = await http.post("/threads/count", json={})
    assert reply.status_code == 200, reply.text
    return int(reply.json())


async def test_a_page_of_another_origin_is_refused(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        before = await thread_count(http)
        refused = await http.options("/threads", headers=preflight(EVIL))
        assert refused.status_code == 403
        assert "access-control-allow-origin" not in refused.headers
        # A "simple" request needs no preflight: it is refused before any route runs.
        simple = await http.post(
            "/threads", content=b"{}", headers={"Origin": EVIL, "Content-Type": "text/plain"}
        )
        assert simple.status_code == 403
        run = await http.post(
            "/runs/wait",
            json={"assistant_id": "lead_agent", "input": {"messages": []}},
            headers={"Origin": EVIL},
        )
        assert run.status_code == 403
        assert await thread_count(http) == before


async def test_studio_and_the_console_itself_are_served(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        allowed = await http.options("/assistants/search", headers=preflight(STUDIO))
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == STUDIO
        search = await http.post("/assistants/search", json={}, headers={"Origin": STUDIO})
        assert search.status_code == 200
        assert search.headers["access-control-allow-origin"] == STUDIO
        # The console's own page (same origin) and a non-browser client (no Origin).
        own = await http.post("/threads", json={}, headers={"Origin": stack.url})
        assert own.status_code == 200
        assert (await http.post("/threads", json={})).status_code == 200


async def test_a_rebound_host_is_refused_and_loopback_or_configured_ones_are_not(
    stack: Stack,
) -> None:
    port = stack.settings.http_port
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
            rebound = await http.post("/assistants/search", json={}, headers={"Host": host})
            assert rebound.status_code == 400, host
            assert "WAYBILL_ALLOWED_HOSTS" in rebound.json()["detail"]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "waybill.test"):
            served = await http.post("/assistants/search", json={}, headers={"Host": host})
            assert served.status_code == 200, host
        # Probes name whatever host they reach the pod by.
        assert (await http.get("/ok", headers={"Host": "10.1.2.3:8080"})).status_code == 200


async def test_the_sandbox_tools_are_off_without_auth_unless_allowed(
    stack: Stack, tmp_path: Path
) -> None:
    client = get_client(url=stack.url, timeout=60)
    try:
        thread = await client.threads.create()
        tid = thread["thread_id"]
        script = tools(("bash", {"command": "echo ran > ran.txt"}))
        created = await client.runs.create(tid, "lead_agent", input=script)
        await after_its_end(client, tid, created["run_id"])
        state = await client.threads.get_state(tid)
    finally:
        await client.aclose()
    [answer] = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    assert answer["status"] == "error" and "bash" in answer["content"]
    assert not (Path(stack.env["WAYBILL_DATA_DIR"]) / "workspaces" / tid / "ran.txt").exists()

    def offered(sandbox: dict[str, object], **env: str) -> bool:
        config = tmp_path / f"config-{len(list(tmp_path.iterdir()))}.yaml"
        config.write_text(yaml.safe_dump({"sandbox": sandbox}))
        return sandbox_offered(Settings(config=config, **env))  # type: ignore[arg-type]

    assert not offered({"provider": "local"})
    assert offered({"provider": "local", "allow_without_auth": True})
    assert offered({"provider": "local"}, api_key="operator-key")


def test_with_auth_on_any_origin_and_host_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WAYBILL_CORS_ORIGINS", "WAYBILL_ALLOWED_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    gateway = TestClient(create_app(Settings(api_key="operator-key")))
    answer = gateway.options("/threads", headers=preflight(EVIL))
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "*"
    # No Host is checked: TestClient's is "testserver" (auth guards the routes).
    rebound = gateway.options("/threads", headers={**preflight(EVIL), "Host": "evil.example"})
    assert rebound.status_code == 200


def test_cors_set_explicitly_is_used_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAYBILL_CORS_ORIGINS", "http://ui.example")
    gateway = TestClient(create_app(Settings()), base_url="http://localhost:8080")
    named = gateway.options("/threads", headers=preflight("http://ui.example"))
    assert named.status_code == 200
    assert named.headers["access-control-allow-origin"] == "http://ui.example"
    other = gateway.options("/threads", headers=preflight(EVIL))
    assert "access-control-allow-origin" not in other.headers
    # The Host is still checked while auth is off.
    rebound = TestClient(create_app(Settings()), base_url="http://evil.example")
    assert rebound.options("/threads", headers=preflight("http://ui.example")).status_code == 400


def test_host_names_are_read_without_their_port() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("example.com") == "example.com"
