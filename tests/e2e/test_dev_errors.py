"""The dev loop shows errors: a node's traceback in the runner's log (and, with
WAYBILL_ERROR_TRACEBACKS, in the run's `error` event), a schema pydantic cannot build
said once in one line, readable logs on a terminal, a log level, and a Ctrl-C that
stops every service in order and exits 0."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import shutil
import sys
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.launched import Launched, ctrl_c, running
from tests.support.paths import FIXTURES
from tests.support.stacks import free_port
from waybill.common import logs
from waybill.services.runner.reporting.frames import RunnerFailure, error_event

PROJECT = FIXTURES / "dev_errors_project"
WAYBILL = str(Path(sys.executable).with_name("waybill"))


def log_lines(launched: Launched) -> list[dict]:
    """The services' JSON log lines (the output is not a terminal)."""
    found = []
    for line in launched.text().splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def schema_warnings(launched: Launched) -> list[dict]:
    return [line for line in log_lines(launched) if "cannot build" in line["msg"]]


def test_errors_show_where_they_are_and_ctrl_c_stops_in_order(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    port = free_port()
    with running(project, port, [WAYBILL, "up"], WAYBILL_ERROR_TRACEBACKS="true") as up:
        url = f"http://127.0.0.1:{port}"

        async def use() -> list:
            client = get_client(url=url, timeout=30)
            thread = await client.threads.create()
            events = [
                part
                async for part in client.runs.stream(
                    thread["thread_id"], "failing", input={"messages": []}
                )
            ]
            for _ in range(3):  # Studio asks for the schemas again and again
                await client.assistants.get_schemas("typed_state")
            return events

        events = asyncio.run(use())
        errors = [part.data for part in events if part.event == "error"]
        assert len(errors) == 1, events
        assert errors[0]["error"] == "ValueError"
        assert "failing.py" in errors[0]["traceback"]
        assert "check_the_order" in errors[0]["traceback"]

        failed = [line for line in log_lines(up) if "failed: ValueError" in line["msg"]]
        assert len(failed) == 1, up.text()[-3000:]
        assert (
            "Traceback" in failed[0]["exc"] and 'raise ValueError("boom in node' in failed[0]["exc"]
        )

        warned = schema_warnings(up)
        assert warned, up.text()[-3000:]
        assert all("exc" not in line for line in warned)  # one line each, no traceback
        assert len({line["msg"] for line in warned}) == len(warned)  # each said once
        assert all(len(line["msg"]) < 400 for line in warned)

        assert ctrl_c(up) == 0
    said = up.text()
    assert "reconnecting" not in said
    assert "Traceback" not in said.split("waybill: stopping", 1)[1]
    order = [s for s in ("Runner stopped", "Admission stopping", "Journal stopping") if s in said]
    assert order == ["Runner stopped", "Admission stopping", "Journal stopping"], said[-3000:]
    assert said.index("Runner stopped") < said.index("Admission stopping")
    assert said.index("Admission stopped") < said.index("Journal stopping")


def test_the_error_event_has_a_traceback_only_when_asked() -> None:
    try:
        raise ValueError("in the project's node")
    except ValueError as error:
        raised = error
    plain = json.loads(error_event(raised)[1])
    assert plain == {"error": "ValueError", "message": "in the project's node"}
    shown = json.loads(error_event(raised, with_traceback=True)[1])
    assert "in the project's node" in shown["traceback"] and "Traceback" in shown["traceback"]
    # Waybill's own failures keep their details in the log.
    ours = json.loads(error_event(RunnerFailure("the runner failed"), with_traceback=True)[1])
    assert "traceback" not in ours


@pytest.mark.parametrize(
    ("tty", "fmt", "human"),
    [(True, "auto", True), (False, "auto", False), (True, "json", False), (False, "text", True)],
)
def test_logs_are_text_on_a_terminal_and_json_elsewhere(
    monkeypatch: pytest.MonkeyPatch, tty: bool, fmt: str, human: bool
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(stream, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.configure_logging("runner", fmt, "WARNING")
        logging.getLogger("waybill").info("not shown below the level")
        logging.getLogger("waybill").warning("shown")
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("{") is not human
    assert "shown" in lines[0]
