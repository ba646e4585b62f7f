"""A run's file tools wait for its workspace snapshot, which is taken when the first
of them asks: a file the run writes is never in its own before-snapshot."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from langchain_core.tools import ToolException

from tests.support.run_scopes import tool_config, tool_scope
from waybill.services.runner.agent.workspace import SnapshotGate, write_file


def run_config_with(workspaces: Path, gate: SnapshotGate | None) -> dict:
    """A tool's config in a run whose scope holds `gate` (None: not verified)."""
    scope = tool_scope(workspaces, run_id=str(uuid.uuid4()), thread_id=str(uuid.uuid4()), gate=gate)
    return tool_config(scope)


def _write_in_a_worker(config: dict) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def write() -> None:
        try:
            outcome.append(write_file.invoke({"path": "a.txt", "content": "x"}, config))
        except ToolException as error:
            outcome.append(error)

    worker = threading.Thread(target=write)
    worker.start()
    return worker, outcome


def test_a_write_asks_for_the_snapshot_and_waits_until_it_is_taken(tmp_path: Path) -> None:
    asked = threading.Event()
    gate = SnapshotGate(asked.set)
    run_config = run_config_with(tmp_path, gate)
    worker, outcome = _write_in_a_worker(run_config)
    assert asked.wait(timeout=5)  # the tool started the snapshot
    worker.join(timeout=0.3)
    written = tmp_path / run_config["configurable"]["thread_id"] / "a.txt"
    assert worker.is_alive() and not written.exists()  # held at the gate
    gate.open()
    worker.join(timeout=5)
    assert outcome == ["wrote 1 characters to a.txt"] and written.read_text() == "x"


def test_a_failed_snapshot_refuses_every_change(tmp_path: Path) -> None:
    gate = SnapshotGate(lambda: None)
    gate.open(failure="no snapshot of it could be taken (AioRpcError)")
    run_config = run_config_with(tmp_path, gate)
    worker, outcome = _write_in_a_worker(run_config)
    worker.join(timeout=5)
    # Raised, or answered as the tool's error message where errors are handled.
    assert "the workspace cannot be changed" in str(outcome[0])
    assert not (tmp_path / run_config["configurable"]["thread_id"] / "a.txt").exists()


def test_a_run_without_a_gate_writes_at_once(tmp_path: Path) -> None:
    run_config = run_config_with(tmp_path, None)
    worker, outcome = _write_in_a_worker(run_config)
    worker.join(timeout=5)
    assert outcome == ["wrote 1 characters to a.txt"]
