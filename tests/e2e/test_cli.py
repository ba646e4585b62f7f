"""The `waybill` command, run as a subprocess (the installed console script)
against a real stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import WAYBILL, Completed, ok, says
from tests.support.stacks import free_port, http_ok, stack_env, wait_until
from waybill.common.launch import Stack
from waybill.common.migrate import schema_of


def waybill(stack: Stack | None, *args: str, timeout: float = 60, **env: str) -> Completed:
    base = {**os.environ, **(stack.env if stack else {}), **env}
    return subprocess.run(
        [WAYBILL, *args], env=base, capture_output=True, text=True, timeout=timeout
    )


async def test_doctor_passes_on_a_healthy_stack(stack: Stack) -> None:
    out = ok(waybill(stack, "doctor"))
    for line in (
        "ok    config",
        f"ok    database journal    schema at {schema_of('journal').head()}",
        f"ok    database runner     schema at {schema_of('runner').head()}",
        "ok    admission",
        "ok    runner",
        "ok    journal",
        "ok    delivery",
        "ok    gateway",
        "all checks passed",
    ):
        assert line in out, out
    assert ("ok    redis" if stack.env.get("WAYBILL_REDIS_URL") else "skip  redis") in out


async def test_doctor_says_what_is_broken_and_fails(stack: Stack) -> None:
    dead_runner = f"127.0.0.1:{free_port()}"
    done = waybill(
        stack,
        "doctor",
        WAYBILL_RUNNER_ADDR=dead_runner,
        WAYBILL_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
    )
    assert done.returncode == 1, done.stdout
    assert f"FAIL  runner              {dead_runner} not serving" in done.stdout
    assert "FAIL  redis" in done.stdout
    assert "ok    admission" in done.stdout
    assert "2 check(s) failed" in done.stdout


async def test_threads_and_runs_listed_shown_and_tailed(
    stack: Stack, client: LangGraphClient
) -> None:
    thread = await client.threads.create(metadata={"cli": "yes"})
    tid = thread["thread_id"]
    await client.runs.wait(tid, "lead_agent", input=says("hello cli"))
    [run] = await client.runs.list(tid)

    threads = ok(waybill(stack, "threads", "ls", "--limit", "100"))
    [line] = [line for line in threads.splitlines() if tid in line]
    assert line.split()[1] == "idle" and '"cli": "yes"' in line, threads
    listed = ok(waybill(stack, "runs", "ls", "--thread", tid)).splitlines()
    assert listed[0].split() == ["RUN", "THREAD", "STATUS", "ASSISTANT", "CREATED"]
    assert listed[1].split()[:4] == [run["run_id"], tid, "success", run["assistant_id"]]
    assert run["run_id"] in ok(waybill(stack, "runs", "ls", "--limit", "100"))
    as_json = json.loads(ok(waybill(stack, "runs", "ls", "--thread", tid, "--json")))
    assert [r["run_id"] for r in as_json] == [run["run_id"]]

    shown = json.loads(ok(waybill(stack, "runs", "show", tid, run["run_id"])))
    assert shown["status"] == "success" and shown["thread_id"] == tid

    tail = ok(waybill(stack, "runs", "tail", tid, run["run_id"]))
    assert f"run {run['run_id']} attempt 1" in tail
    assert "answer: You said: hello cli" in tail
    assert f"run {run['run_id']} success" in tail


async def test_tail_follows_a_live_run_to_its_end(stack: Stack, client: LangGraphClient) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"],
        "lead_agent",
        input=says('/tool wait {"seconds": 2}'),
        stream_mode=["updates", "values"],
    )
    tail = ok(waybill(stack, "runs", "tail", thread["thread_id"], run["run_id"]))
    lines = tail.splitlines()
    assert "step agent → tool wait" in lines
    assert lines.index("step agent → tool wait") < lines.index("step tools")
    assert lines[-1].startswith(f"run {run['run_id']} success")


async def test_cancel_ends_a_run_and_tail_says_so(stack: Stack, client: LangGraphClient) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "lead_agent", input=says('/tool wait {"seconds": 30}'))
    out = ok(waybill(stack, "runs", "cancel", tid, run["run_id"], "--wait"))
    assert f"run {run['run_id']}: cancel done; interrupted" in out
    done = waybill(stack, "runs", "tail", tid, run["run_id"])
    assert done.returncode == 1
    assert f"run {run['run_id']} interrupted" in done.stdout


async def test_bad_input_is_a_message_not_a_traceback(stack: Stack) -> None:
    done = waybill(stack, "runs", "show", "not-a-uuid", "x")
    assert done.returncode == 1
    assert done.stderr.startswith("waybill: GET /threads/not-a-uuid/runs/x: 422")
    assert "Traceback" not in done.stderr
    down = waybill(stack, "threads", "ls", WAYBILL_URL=f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1
    assert "cannot reach the gateway" in down.stderr and "waybill up" in down.stderr


def test_the_api_key_comes_from_waybill_api_key(stack: Stack) -> None:
    port = free_port()
    name = f"gateway-auth-{port}"
    stack.start_one(
        name, "waybill.gateway.server", {"WAYBILL_HTTP_PORT": str(port), "WAYBILL_API_KEY": "k1"}
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: http_ok(url), "the gateway with a key")
        refused = waybill(stack, "threads", "ls", WAYBILL_URL=url)
        assert refused.returncode == 1
        assert ": 401 " in refused.stderr and "WAYBILL_API_KEY" in refused.stderr
        ok(waybill(stack, "threads", "ls", WAYBILL_URL=url, WAYBILL_API_KEY="k1"))
        ok(waybill(stack, "--api-key", "k1", "threads", "ls", WAYBILL_URL=url))
    finally:
        process = stack.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        process.wait(30)


@pytest.mark.timeout(180)
def test_up_starts_the_embedded_default_and_migrate_is_part_of_it(tmp_path: Path) -> None:
    env = {**os.environ, **stack_env(tmp_path)}
    up = subprocess.Popen(
        [WAYBILL, "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert up.stdout is not None
        lines = []
        for line in up.stdout:
            lines.append(line)
            if "ready at" in line:
                break
        url = f"http://127.0.0.1:{env['WAYBILL_HTTP_PORT']}"
        assert any(f"ready at {url}" in line for line in lines), lines
        assert "waybill migrate: done\n" in lines
        assert http_ok(url)
        assert "all checks passed" in ok(waybill(None, "doctor", **stack_env_of(env)))
        again = ok(waybill(None, "migrate", **stack_env_of(env)))
        assert f"admission: schema at {schema_of('admission').head()}" in again
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0


def stack_env_of(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("WAYBILL_")}
