"""The wheel, as a user gets it: built from this tree, installed into a venv that
holds a typical LangGraph project's packages (langgraph-cli[inmem], langchain-openai,
langchain-anthropic, langchain-aws, supabase), then `waybill new demo`, `waybill up`
in it, an SDK run, Ctrl-C.

Downloads are kept in a wheelhouse (~/.cache/waybill-wheels, or
WAYBILL_TEST_WHEELHOUSE) so that a second run installs offline in a minute or two.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.launched import ctrl_c, running
from tests.support.paths import REPO
from tests.support.stacks import free_port

pytestmark = [pytest.mark.distribution, pytest.mark.timeout(900)]

REPO = REPO
WHEELHOUSE = Path(
    os.environ.get("WAYBILL_TEST_WHEELHOUSE", Path.home() / ".cache" / "waybill-wheels")
)
# What a LangGraph project typically has installed already; supabase's realtime
# client caps websockets, botocore (langchain-aws) caps python-dateutil.
PROJECT_PACKAGES = [
    "langgraph-cli[inmem]",
    "langchain-openai",
    "langchain-anthropic",
    "langchain-aws",
    "supabase",
]


def run(*command: str | Path, cwd: Path | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("WAYBILL_")},
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(out: Path) -> Path:
    run(sys.executable, "-m", "build", "--wheel", "--outdir", out, REPO, cwd=REPO)
    (wheel,) = out.glob("waybill-*.whl")
    return wheel


def requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def install_beside_a_project(wheel: Path, venv: Path) -> Path:
    """A fresh venv holding the project's packages, as a user's does, then the wheel
    installed into it. (Resolved all at once, pip meets `langgraph-cli[inmem]` with
    an old langgraph-cli that has no `inmem` extra: no langgraph-api at all.)"""
    run(sys.executable, "-m", "venv", venv)
    pip = venv / "bin" / "pip"
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    for wanted in (PROJECT_PACKAGES, [str(wheel)]):
        # Into the wheelhouse what is not there yet, then an install from it alone.
        run(pip, "wheel", "-q", "--wheel-dir", WHEELHOUSE, "--find-links", WHEELHOUSE, *wanted)
        run(pip, "install", "-q", "--no-index", "--find-links", WHEELHOUSE, *wanted)
    return venv / "bin"


def test_the_wheel_installs_beside_a_project_and_serves_it(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    needs = requirements_of(wheel)
    assert not [r for r in needs if r.startswith("grpcio-tools")]  # build time only
    assert not [r for r in needs if "==" in r.split(";")[0]], needs  # ranges, never pins
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "waybill/gateway/console/index.html" in names
    assert "waybill/cli/templates/basic/langgraph.json" in names

    bin_dir = install_beside_a_project(wheel, tmp_path / "venv")
    run(bin_dir / "python", "-m", "pip", "check")  # every package's requirements hold
    # The project's own LangGraph server still imports beside Waybill's packages.
    run(bin_dir / "python", "-c", "import langgraph_api, langgraph_runtime_inmem")
    assert run(bin_dir / "waybill", "--version").startswith("waybill ")
    run(bin_dir / "waybill", "new", "demo", cwd=tmp_path)

    port = free_port()
    with running(tmp_path / "demo", port, [str(bin_dir / "waybill"), "up"]) as up:

        async def use() -> None:
            client = get_client(url=f"http://127.0.0.1:{port}", timeout=30)
            thread = await client.threads.create()
            values = await client.runs.wait(
                thread["thread_id"],
                "agent",
                input={"messages": [{"role": "user", "content": "one two three"}]},
            )
            assert isinstance(values, dict)
            assert values["messages"][-1]["content"] == "Hello! Your message has 3 words."

        asyncio.run(use())
        assert ctrl_c(up) == 0
