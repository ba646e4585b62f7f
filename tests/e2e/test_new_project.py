"""Adopting Waybill from a project's own folder: `waybill new`, then `waybill up`
there with no `--config`, as with `langgraph new` / `langgraph dev`."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from langgraph_sdk import get_client

from tests.support.launched import ctrl_c, running
from tests.support.stacks import free_port

WAYBILL = str(Path(sys.executable).with_name("waybill"))


def waybill(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WAYBILL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_version_names_the_installed_distribution(tmp_path: Path) -> None:
    from importlib.metadata import version

    said = waybill("--version", cwd=tmp_path)
    assert said.returncode == 0
    assert said.stdout.strip() == f"waybill {version('waybill')}"


def test_new_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep me")
    said = waybill("new", "demo", cwd=tmp_path)
    assert said.returncode == 2 and "not empty" in said.stderr
    assert [p.name for p in (tmp_path / "demo").iterdir()] == ["mine.txt"]


def test_the_model_template_loads_without_a_key(tmp_path: Path) -> None:
    assert waybill("new", "demo", "--template", "model", cwd=tmp_path).returncode == 0
    project = tmp_path / "demo"
    manifest = json.loads((project / "langgraph.json").read_text())
    assert manifest["graphs"]["agent"]["path"] == "./graph.py:graph"
    assert "OPENAI_API_KEY=" in (project / ".env").read_text()
    spec = importlib.util.spec_from_file_location("model_template", project / "graph.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # the model is built per call: no key needed to load
    assert set(module.graph.get_graph().nodes) >= {"model", "tools"}


def test_up_in_a_new_project_serves_it_and_only_it(tmp_path: Path) -> None:
    assert waybill("new", "demo", cwd=tmp_path).returncode == 0
    project = tmp_path / "demo"
    port = free_port()
    with running(project, port, [WAYBILL, "up"]) as up:
        said = up.text()
        url = f"http://127.0.0.1:{port}"
        for line in (
            f"API:     {url}",
            f"Console: {url}/console/",
            f"Studio:  https://smith.langchain.com/studio/?baseUrl={url}",
            f"Docs:    {url}/docs",
        ):
            assert line in said, said

        async def use() -> None:
            client = get_client(url=url, timeout=30)
            graphs = {a["graph_id"] for a in await client.assistants.search(limit=100)}
            assert graphs == {"agent"}  # no built-in lead_agent beside the project
            thread = await client.threads.create()
            values = await client.runs.wait(
                thread["thread_id"],
                "agent",
                input={"messages": [{"role": "user", "content": "hello there"}]},
                context={"greeting": "Ahoy"},
            )
            assert isinstance(values, dict)
            assert values["messages"][-1]["content"] == "Ahoy! Your message has 2 words."

        asyncio.run(use())
        assert ctrl_c(up) == 0
    assert (project / ".waybill").is_dir()  # the project's own data folder


def test_dockerfile_from_the_wheel_needs_no_waybill_image(tmp_path: Path) -> None:
    from tests.repo.test_project_image import instructions

    assert waybill("new", "demo", cwd=tmp_path).returncode == 0
    project = tmp_path / "demo"
    (project / "dist").mkdir()
    (project / "dist" / "waybill-0.1.0-py3-none-any.whl").write_bytes(b"a wheel")
    made = waybill(
        "dockerfile", "Dockerfile", "--wheel", "dist/waybill-0.1.0-py3-none-any.whl", cwd=project
    )
    assert made.returncode == 0, made.stderr
    steps = instructions((project / "Dockerfile").read_text())
    assert steps[0] == ("FROM", "python:3.11-slim")
    assert (
        "COPY",
        "dist/waybill-0.1.0-py3-none-any.whl /tmp/waybill-0.1.0-py3-none-any.whl",
    ) in steps
    assert any(
        k == "RUN" and "pip install --no-cache-dir /tmp/waybill-0.1.0" in a for k, a in steps
    )
    assert not any("waybill:latest" in a for _, a in steps)
    assert steps[-1] == ("USER", "10001:10001")

    outside = waybill("dockerfile", "D2", "--wheel", str(tmp_path / "elsewhere.whl"), cwd=project)
    assert outside.returncode == 2 and "outside" in outside.stderr


def test_dockerfile_from_the_waybill_image_says_how_to_build_it(tmp_path: Path) -> None:
    assert waybill("new", "demo", cwd=tmp_path).returncode == 0
    project = tmp_path / "demo"
    assert waybill("dockerfile", "Dockerfile", cwd=project).returncode == 0
    text = (project / "Dockerfile").read_text()
    assert "docker build -f deploy/Dockerfile -t waybill:latest ." in text
    assert "--wheel" in text
