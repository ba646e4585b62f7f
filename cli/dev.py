"""`waybill dev`: the embedded stack, restarted where the project changes.

Like `langgraph dev`: every service as a local process (as `waybill up`), and a
watch (`watchfiles`) on the project's folder and its local `dependencies`. A
change restarts the runner (the graphs), the gateway too when the project has
an `http.app` or `auth` it imports, and admission as well when `langgraph.json`
itself changed (the graphs' assistants). Changes are debounced. An edit that
breaks the project is reported and nothing is restarted again until the next
change: the old process comes back once the file is fixed, never a crash loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

import watchfiles

from waybill.common.launch import (
    SERVICES,
    Stack,
    local_stack,
    ready_lines,
    refuse_busy_http_port,
)
from waybill.common.project import Project, ProjectError

# The files of a project that matter: code, the manifest, env and requirements.
WATCHED_EXTENSIONS = (".json", ".env", ".txt", ".toml", ".yaml", ".yml")


def processes_for(changed: Iterable[Path], project: Project) -> list[str]:
    """Which processes a change concerns, in start order."""
    names = {"runner"}
    if project.section("http") or project.section("auth"):
        names.add("gateway")  # they import the project's code too
    if project.manifest in {path.resolve() for path in changed}:
        names |= {"admission", "gateway"}
    return [name for name in SERVICES if name in names]


def watch_filter(data_dir: Path) -> watchfiles.PythonFilter:
    """Python files and the project's other files; never the stack's own data."""
    return watchfiles.PythonFilter(
        ignore_paths=[data_dir.resolve()], extra_extensions=WATCHED_EXTENSIONS
    )


class DevLoop:
    def __init__(self, stack: Stack, project: Project, debounce_seconds: float) -> None:
        self.stack = stack
        self.project = project
        self.debounce_seconds = debounce_seconds
        self.reported: set[str] = set()  # dead processes already told about
        self.stop = threading.Event()

    def say(self, text: str) -> None:
        print(f"waybill dev: {text}", flush=True)

    def start(self) -> None:
        self.stack.migrate()
        for name, module in SERVICES.items():
            self.stack.start_one(name, module)
        self.settle(list(SERVICES))

    def settle(self, names: list[str]) -> None:
        """Wait until the (re)started processes answer; a broken one is reported."""
        try:
            self.stack.wait_ready(names)
        except (RuntimeError, TimeoutError) as failure:
            self.say(f"{failure}: fix the error above; it starts again on the next change")
            self.reported |= {name for name, _ in self.stack.dead()}
            return
        self.reported.clear()
        self.say(f"watching {self.project.root}")
        print("\n".join(ready_lines(self.stack.url)), flush=True)

    def restart(self, names: list[str]) -> None:
        for name in reversed(names):
            self.stop_one(name)
        for name in names:
            self.stack.start_one(name)
        self.settle(names)

    def stop_one(self, name: str) -> None:
        process = self.stack.processes.get(name)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self.stack.settings.shutdown_grace_seconds + 5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def report_deaths(self) -> None:
        for name, code in self.stack.dead():
            if name not in self.reported:
                self.reported.add(name)
                self.say(f"{name} exited with code {code}; it starts again on the next change")

    def changes(self) -> Iterable[set[tuple[watchfiles.Change, str]]]:
        return watchfiles.watch(
            self.project.root,
            *self.project.local_dependencies(),
            watch_filter=watch_filter(self.stack.settings.data_dir),
            debounce=int(self.debounce_seconds * 1000),
            rust_timeout=1000,  # a turn every second to notice a process that died
            yield_on_timeout=True,
            stop_event=self.stop,
        )

    def reread_manifest(self, changed: list[Path]) -> None:
        """A changed langgraph.json may add `http` or `auth`; a broken one is left to
        the processes to report, and the last good one kept here."""
        if self.project.manifest not in {path.resolve() for path in changed}:
            return
        with contextlib.suppress(ProjectError):
            self.project = Project.load(self.project.manifest)

    def shown(self, path: Path) -> str:
        root = self.project.root
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    def run(self) -> None:
        watching = False
        for batch in self.changes():
            if not watching:
                # The watch's first turn has begun it: only now does the stack start
                # and say it is ready, so an edit made once it is ready is always
                # seen (one made while it starts is read by the start, or restarts it).
                watching = True
                self.start()
                continue
            if not batch:
                self.report_deaths()
                continue
            changed = [Path(path) for _, path in batch]
            self.reread_manifest(changed)
            names = processes_for(changed, self.project)
            names += [n for n, _ in self.stack.dead() if n not in names]
            names = [n for n in SERVICES if n in names]
            shown = ", ".join(sorted(self.shown(path) for path in changed))
            self.say(f"{shown} changed: restarting {', '.join(names)}")
            self.restart(names)


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(debounce_seconds: float) -> int:
    """Run the loop on the project WAYBILL_GRAPHS names (the caller set it)."""
    manifest = os.environ.get("WAYBILL_GRAPHS")
    if not manifest:
        print("waybill dev: no project: pass --config path/to/langgraph.json")
        return 2
    try:
        project = Project.load(Path(manifest))
    except ProjectError as error:
        print(f"waybill dev: {error}")
        return 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    stack = local_stack(os.environ)
    refuse_busy_http_port(stack)
    loop = DevLoop(stack, project, debounce_seconds)
    try:
        loop.run()
    except KeyboardInterrupt:
        print("\nwaybill dev: stopping", flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop
        loop.stop.set()
        stack.stop()
    return 0
