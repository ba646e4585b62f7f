"""The sandbox's workspace copy, written back into the host folder (issue 31)."""

from __future__ import annotations

import threading
from pathlib import Path

from waybill.services.runner.sandbox import workspace_copy


def test_the_workspace_never_goes_missing_while_a_copy_is_swapped_in(tmp_path: Path) -> None:
    """A host write landing while the workspace was missing made a new, empty one,
    and the copy's rename over it then failed: the thread's files were lost."""
    workspace = tmp_path / "thread"
    workspace.mkdir()
    (workspace / "report.txt").write_text("0")
    missing: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if not workspace.is_dir():
                missing.append(1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for n in range(1, 301):
            incoming = tmp_path / f".thread.in-{n}"
            incoming.mkdir()
            (incoming / "report.txt").write_text(str(n))
            workspace_copy.swap_in(incoming, workspace)
    finally:
        stop.set()
        watcher.join()
    assert missing == []
    assert (workspace / "report.txt").read_text() == "300"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thread"]  # no old copy left
