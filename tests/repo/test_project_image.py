"""`waybill dockerfile` / `waybill build`: the project's image, from Waybill's.
No Docker engine here: the generated file is parsed and checked against its
build context, and `build` runs a fake `docker` that records what it was given."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import WAYBILL, ok

INSTRUCTIONS = {"FROM", "RUN", "COPY", "ENV", "WORKDIR", "USER", "ARG", "LABEL"}


def waybill(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WAYBILL, *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_project(root: Path, **extra: Any) -> Path:
    """A project with each kind of dependency: itself, a local package, a local
    folder with requirements, PyPI specs; and a pip config."""
    (root / "agent.py").write_text("graph = None\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "0.1"\n')
    (root / "tools").mkdir()
    (root / "tools" / "requirements.txt").write_text("requests\n")
    (root / "pip.conf").write_text("[global]\n")
    config = {
        "graphs": {"agent": "./agent.py:graph"},
        "dependencies": [".", "./pkg", "./tools", "langchain-openai>=1.0", "httpx"],
        "dockerfile_lines": [
            "RUN apt-get update && apt-get install -y --no-install-recommends git"
        ],
        "pip_config_file": "./pip.conf",
        **extra,
    }
    manifest = root / "langgraph.json"
    manifest.write_text(json.dumps(config))
    return manifest


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        found.append((keyword, arguments.strip()))
        pending = ""
    assert not pending, "a continuation line at the end"
    return found


def container_to_context(instructions_: list[tuple[str, str]]) -> dict[str, str]:
    """Where each COPY puts its source: container path -> context path."""
    copies = {}
    for keyword, arguments in instructions_:
        if keyword == "COPY":
            source, destination = shlex.split(arguments)
            copies[destination] = source
    return copies


def in_context(path: str, copies: dict[str, str], context: Path) -> Path:
    """The context file a container path comes from (through a COPY)."""
    for destination, source in copies.items():
        if path == destination or path.startswith(destination.rstrip("/") + "/"):
            return (context / source / path[len(destination) :].lstrip("/")).resolve()
    raise AssertionError(f"{path} is not copied into the image")


def test_the_dockerfile_installs_the_project_on_the_waybill_image(tmp_path: Path) -> None:
    root = tmp_path / "my-agent"
    root.mkdir()
    write_project(root)
    ok(waybill("dockerfile", "Dockerfile", cwd=root))
    steps = instructions((root / "Dockerfile").read_text())

    assert all(keyword in INSTRUCTIONS for keyword, _ in steps), steps
    assert steps[0] == ("FROM", "waybill:latest")
    assert steps[1] == ("USER", "root")  # the base image's user cannot write its venv
    assert steps[-1] == ("USER", "10001:10001")  # and back to it
    # dockerfile_lines come right after the base image, before any install.
    assert steps[2] == ("RUN", "apt-get update && apt-get install -y --no-install-recommends git")

    copies = container_to_context(steps)
    for source in copies.values():
        assert (root / source).exists(), source
    runs = [arguments for keyword, arguments in steps if keyword == "RUN"]
    pip_runs = [run for run in runs if "pip install" in run]
    # Every install uses the pip config and keeps Waybill's own packages where they are.
    assert pip_runs and all(
        run.startswith("PIP_CONFIG_FILE=/pipconfig.txt pip install") for run in pip_runs
    )
    assert all("-c /opt/waybill-constraints.txt" in run for run in pip_runs)
    assert in_context("/pipconfig.txt", copies, root) == root / "pip.conf"
    assert any(run.endswith("'langchain-openai>=1.0' httpx") for run in pip_runs)
    package = next(run.split(" -e ")[1] for run in pip_runs if " -e " in run)
    assert (in_context(package, copies, root) / "pyproject.toml").is_file()
    requirements = next(run.split(" -r ")[1] for run in pip_runs if " -r " in run)
    assert in_context(requirements, copies, root) == root / "tools" / "requirements.txt"
    # The copied langgraph.json is the project: its relative paths resolve as here.
    env = dict(arguments.split("=", 1) for keyword, arguments in steps if keyword == "ENV")
    assert in_context(env["WAYBILL_GRAPHS"], copies, root) == root / "langgraph.json"
    workdir = next(arguments for keyword, arguments in steps if keyword == "WORKDIR")
    assert in_context(workdir, copies, root) == root


def test_the_base_image_can_be_chosen(tmp_path: Path) -> None:
    write_project(tmp_path)
    ok(waybill("dockerfile", "out", "--base-image", "registry.example/waybill:1.2", cwd=tmp_path))
    assert instructions((tmp_path / "out").read_text())[0] == (
        "FROM",
        "registry.example/waybill:1.2",
    )


def python_check(root: Path) -> list[str]:
    ok(waybill("dockerfile", "Dockerfile", cwd=root))
    steps = instructions((root / "Dockerfile").read_text())
    checks = [json.loads(args) for keyword, args in steps if keyword == "RUN" and args[0] == "["]
    assert len(checks) == 1
    return list(checks[0])


def test_a_python_version_other_than_the_image_s_stops_the_build(tmp_path: Path) -> None:
    here = "{}.{}".format(*sys.version_info[:2])
    other = "3.99"
    (tmp_path / "same").mkdir()
    (tmp_path / "other").mkdir()
    write_project(tmp_path / "same", python_version=here)
    write_project(tmp_path / "other", python_version=other)
    # The check the image runs, run here with this Python standing for the image's.
    same = subprocess.run([sys.executable, *python_check(tmp_path / "same")[1:]], check=False)
    assert same.returncode == 0
    refused = subprocess.run(
        [sys.executable, *python_check(tmp_path / "other")[1:]], capture_output=True, text=True
    )
    assert refused.returncode == 1
    assert f"asks for Python {other}; the base image has Python {here}" in refused.stderr


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"dependencies": ["../elsewhere"]}, "is outside"),
        ({"dependencies": ["./missing"]}, "project/missing: no such folder"),
        ({"pip_config_file": "./nope.conf"}, "./nope.conf is not a file"),
        ({"dockerfile_lines": "RUN x"}, "dockerfile_lines: Input should be a valid list"),
        ({"python_version": 3.11}, "python_version: Input should be a valid string"),
    ],
)
def test_a_project_that_cannot_be_built_is_refused(
    tmp_path: Path, extra: dict[str, Any], reason: str
) -> None:
    (tmp_path / "elsewhere").mkdir()
    root = tmp_path / "project"
    root.mkdir()
    write_project(root, **extra)
    done = waybill("dockerfile", "Dockerfile", cwd=root)
    assert done.returncode == 2
    assert reason in done.stderr
    assert not (root / "Dockerfile").exists()


FAKE_DOCKER = """#!/bin/sh
printf '%s\\n' "$@" > "$RECORD.args"
cat > "$RECORD.stdin"
"""


def test_build_runs_docker_build_with_the_generated_dockerfile(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    write_project(root)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER)
    (fake / "docker").chmod(stat.S_IRWXU)
    record = tmp_path / "record"
    path = f"{fake}:{os.environ['PATH']}"

    ok(
        waybill(
            "build",
            "-t",
            "me/agent:1",
            "--platform",
            "linux/amd64",
            cwd=root,
            PATH=path,
            RECORD=str(record),
        )
    )
    args = Path(f"{record}.args").read_text().splitlines()
    assert args == ["build", "-f", "-", "-t", "me/agent:1", "--platform", "linux/amd64", str(root)]
    ok(waybill("dockerfile", "expected", cwd=root))
    assert Path(f"{record}.stdin").read_text() == (root / "expected").read_text()


def test_build_fails_with_the_docker_exit_status_and_without_docker(tmp_path: Path) -> None:
    write_project(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\ncat > /dev/null\nexit 7\n")
    (fake / "docker").chmod(stat.S_IRWXU)
    failed = waybill("build", "-t", "x", cwd=tmp_path, PATH=f"{fake}:/usr/bin:/bin")
    assert failed.returncode == 7
    missing = waybill("build", "-t", "x", cwd=tmp_path, PATH=str(tmp_path / "empty"))
    assert missing.returncode == 1
    assert "docker is not on PATH" in missing.stderr
