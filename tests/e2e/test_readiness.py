"""The gateway's `/ok` says 200 only when a run can be served: every peer answers
its health check and a runner holds its work stream to admission; 503 otherwise."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from tests.support.stacks import stack_env
from waybill.common.launch import SERVICES, Stack


def first_ok(url: str, seconds: float = 60.0) -> float:
    """Poll `/ok` as a start-up script would; return when it first said 200."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return time.monotonic()
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("/ok never said 200")


def test_ok_means_a_run_can_be_served(tmp_path: Path) -> None:
    stack = Stack(env=stack_env(tmp_path), log_dir=str(tmp_path))
    try:
        stack.migrate()
        # Everything at once, the gateway first: its `/ok` alone says when it is ready.
        for name in ["gateway", *(name for name in SERVICES if name != "gateway")]:
            stack.start_one(name)
        first_ok(stack.url)
        with httpx.Client(base_url=stack.url, timeout=60) as client:
            assert client.get("/ok").json() == {"ok": True}
            body = {
                "assistant_id": "lead_agent",
                "input": {"messages": [{"role": "user", "content": "hello"}]},
            }
            reply = client.post("/runs/wait", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.json()["messages"][-1]["content"] == "You said: hello"

            stack.processes["runner"].send_signal(signal.SIGKILL)
            stack.processes["runner"].wait(10)
            down = client.get("/ok")
            assert down.status_code == 503
            assert down.json()["ok"] is False
            assert down.json()["services"]["runner"] == "unhealthy"
            assert down.json()["services"]["admission"] == "healthy"

            stack.start_one("runner")
            first_ok(stack.url)
            assert client.post("/runs/wait", json=body).status_code == 200
    except BaseException:
        for log_file in sorted(tmp_path.glob("*.log")):
            print(f"---- {log_file.name} ----\n{log_file.read_text()[-3000:]}")
        raise
    finally:
        stack.stop()


def test_a_runner_not_yet_connected_to_admission_is_not_ready(tmp_path: Path) -> None:
    """The runner serves, but admission is not up yet: no run could be taken."""
    stack = Stack(env=stack_env(tmp_path), log_dir=str(tmp_path))
    try:
        stack.start(only=["journal", "delivery", "runner", "gateway"])
        with httpx.Client(base_url=stack.url, timeout=30) as client:
            reply = client.get("/ok")
            assert reply.status_code == 503
            assert reply.json()["services"]["runner"] == "unhealthy"
            stack.start_one("admission")
            first_ok(stack.url)
    finally:
        stack.stop()
