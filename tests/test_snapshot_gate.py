"""A run's file tools wait for its workspace snapshot, which is taken when the first
of them asks: a file the run writes is never in its own before-snapshot."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.tools import ToolException

from waybill.common.settings import get_settings
from waybill.services.runner.agent.workspace import SNAPSHOT_GATES, SnapshotGate, write_file


@pytest.fixture
def run_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    monkeypatch.setenv("WAYBILL_WORKSPACES_DIR", str(tmp_path))
    get_settings.cache_clear()
    run_id = str(uuid.uuid4())
    yield {
        "configurable": {"thread_id": str(uuid.uuid4()), "run_id": run_id},
        "metadata": {"run_epoch": 1},  # as the runner's run_config stamps it
    }
    SNAPSHOT_GATES.pop((run_id, 1), None)
    get_settings.cache_clear()


def gate_key(config: dict) -> tuple[str, int]:
    return (config["configurable"]["run_id"], config["metadata"]["run_epoch"])


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


def test_a_write_asks_for_the_snapshot_and_waits_until_it_is_taken(
    run_config: dict, tmp_path: Path
) -> None:
    asked = threading.Event()
    gate = SNAPSHOT_GATES[gate_key(run_config)] = SnapshotGate(asked.set)
    worker, outcome = _write_in_a_worker(run_config)
    assert asked.wait(timeout=5)  # the tool started the snapshot
    worker.join(timeout=0.3)
    written = tmp_path / run_config["configurable"]["thread_id"] / "a.txt"
    assert worker.is_alive() and not written.exists()  # held at the gate
    gate.open()
    worker.join(timeout=5)
    assert outcome == ["wrote 1 characters to a.txt"] and written.read_text() == "x"


def test_a_failed_snapshot_refuses_every_change(run_config: dict, tmp_path: Path) -> None:
    gate = SNAPSHOT_GATES[gate_key(run_config)] = SnapshotGate(lambda: None)
    gate.open(failure="no snapshot of it could be taken (AioRpcError)")
    worker, outcome = _write_in_a_worker(run_config)
    worker.join(timeout=5)
    # Raised, or answered as the tool's error message where errors are handled.
    assert "the workspace cannot be changed" in str(outcome[0])
    assert not (tmp_path / run_config["configurable"]["thread_id"] / "a.txt").exists()


def test_a_run_without_a_gate_writes_at_once(run_config: dict, tmp_path: Path) -> None:
    worker, outcome = _write_in_a_worker(run_config)
    worker.join(timeout=5)
    assert outcome == ["wrote 1 characters to a.txt"]
