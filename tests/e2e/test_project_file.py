"""The whole `langgraph.json` (WAYBILL_GRAPHS): graphs in both forms, graph factories
of every kind LangGraph Platform accepts, `dependencies`, `env`, keys Waybill does not
use (warned about), and broken files (start-up refused with the reason).

The factory project is `tests/fixtures/factory_project/`: real files, served by a real stack.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError

from tests.support.paths import FIXTURES
from tests.support.stacks import eventually, running_stack, stack_env, stack_in_mode
from waybill.common.launch import Stack
from waybill.common.project import Project, ProjectError

FACTORY_PROJECT = FIXTURES / "factory_project"
FACTORY_GRAPHS = [
    "no_argument",
    "async_no_argument",
    "from_config",
    "from_runtime",
    "from_both",
    "held",
    "held_sync",
]
HELD_DESCRIPTION = "An async context manager: entered for each use, exited after it."


# ---- the factory project, on one stack ----------------------------------------------


@pytest.fixture(scope="module")
def factory_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the project's factories write each call, enter and exit."""
    return tmp_path_factory.mktemp("factory-log") / "calls.jsonl"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, factory_log: Path) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack-project")
    env = stack_env(
        data_dir,
        WAYBILL_GRAPHS=str(FACTORY_PROJECT / "langgraph.json"),
        FACTORY_PROJECT_LOG=str(factory_log),
    )
    with running_stack(env, data_dir) as running:
        yield running


def calls(log: Path, graph_id: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line for line in lines if line["graph"] == graph_id]


def run_calls(log: Path, graph_id: str) -> list[dict[str, Any]]:
    return [c for c in calls(log, graph_id) if c.get("access_context") == "threads.create_run"]


@pytest.mark.parametrize("graph_id", FACTORY_GRAPHS)
async def test_every_kind_of_factory_serves_runs_and_reads(
    client: LangGraphClient, graph_id: str
) -> None:
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], graph_id, input={"text": "hi"})
    # shout() comes from ./lib, exclaim() from ./pkg/src: the dependencies import.
    assert result["text"] == "HI!"
    assert result["seen"].split(":")[0] == graph_id

    state = await client.threads.get_state(thread["thread_id"])
    assert state["values"]["text"] == "HI!"
    schemas = await client.assistants.get_schemas(graph_id)
    assert "text" in schemas["input_schema"]["properties"]
    drawable = await client.assistants.get_graph(graph_id)
    assert {node["id"] for node in drawable["nodes"]} == {"__start__", "respond", "__end__"}


async def test_a_config_factory_gets_the_runs_config(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    config = {"configurable": {"flavour": "lime"}}
    result = await client.runs.wait(
        thread["thread_id"], "from_config", input={"text": "x"}, config=config
    )
    assert result["seen"] == "from_config:lime"


async def test_a_runtime_factory_gets_the_context_only_when_it_executes_a_run(
    client: LangGraphClient, factory_log: Path
) -> None:
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"], "from_runtime", input={"text": "x"}, context={"flavour": "mint"}
    )
    await client.threads.get_state(thread["thread_id"])
    await client.threads.update_state(thread["thread_id"], {"text": "edited"})
    await client.assistants.get_schemas("from_runtime")

    seen = {c["access_context"]: c for c in calls(factory_log, "from_runtime")}
    assert set(seen) >= {"threads.create_run", "threads.read", "threads.update", "assistants.read"}
    executing = seen.pop("threads.create_run")
    assert executing["executing"] is True
    assert executing["context"]["flavour"] == "mint"
    for reading in seen.values():  # reads get the read-only runtime: no context
        assert reading["executing"] is False
        assert reading["context"] is None
    for call in calls(factory_log, "from_runtime"):
        assert call["user"] == "local"  # auth off: the one local user
        assert call["has_store"] is True


async def test_a_factory_taking_runtime_and_config_gets_both(
    client: LangGraphClient, factory_log: Path
) -> None:
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "from_both",
        input={"text": "x"},
        config={"configurable": {"flavour": "plum"}},
    )
    executed = run_calls(factory_log, "from_both")[-1]
    assert executed["flavour"] == "plum"
    assert executed["executing"] is True


async def test_a_context_manager_is_entered_for_each_run_and_exited_before_it_ends(
    client: LangGraphClient, factory_log: Path
) -> None:
    before = len(run_calls(factory_log, "held"))
    for _ in range(2):
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "held", input={"text": "x"})
    # Exited before the run was reported ended: no waiting needed.
    events = [c["event"] for c in run_calls(factory_log, "held")[before:]]
    assert events == ["enter", "exit", "enter", "exit"]


async def test_a_sync_context_manager_is_exited_after_each_use(
    client: LangGraphClient, factory_log: Path
) -> None:
    before = len(calls(factory_log, "held_sync"))
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "held_sync", input={"text": "x"})
    await client.threads.get_state(thread["thread_id"])
    events = [c["event"] for c in calls(factory_log, "held_sync")[before:]]
    # The run, then our read (and the server's own reads: schemas, `wait`'s answer),
    # each entered and exited before the next.
    assert len(events) >= 4
    assert events == ["enter", "exit"] * (len(events) // 2)


async def test_a_context_manager_is_exited_when_the_run_fails(
    client: LangGraphClient, factory_log: Path
) -> None:
    before = len(run_calls(factory_log, "held"))
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "held", input={"text": "fail"})
    await client.runs.join(thread["thread_id"], run["run_id"])
    ended = await client.runs.get(thread["thread_id"], run["run_id"])
    assert ended["status"] == "error"
    events = [c["event"] for c in run_calls(factory_log, "held")[before:]]
    assert events == ["enter", "exit"]


async def test_a_context_manager_is_exited_when_the_run_is_cancelled(
    client: LangGraphClient, factory_log: Path
) -> None:
    before = len(run_calls(factory_log, "held"))
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "held", input={"text": "slow"})

    async def entered() -> bool:
        return len(run_calls(factory_log, "held")) > before

    await eventually(entered, "the run's graph entered")
    await client.runs.cancel(thread["thread_id"], run["run_id"], wait=True)
    ended = await client.runs.get(thread["thread_id"], run["run_id"])
    assert ended["status"] == "interrupted"
    events = [c["event"] for c in run_calls(factory_log, "held")[before:]]
    assert events == ["enter", "exit"]


async def test_a_factory_that_raises_ends_the_run_in_error_on_its_stream(
    client: LangGraphClient,
) -> None:
    thread = await client.threads.create()
    parts = [
        part
        async for part in client.runs.stream(
            thread["thread_id"], "fails_to_build", input={"text": "x"}
        )
    ]
    errors = [part.data for part in parts if part.event == "error"]
    assert errors == [{"error": "RuntimeError", "message": "no API key for the model"}]
    [run] = await client.runs.list(thread["thread_id"])
    assert run["status"] == "error"
    # Its receipt was written before its end, as a graph's failure's is.
    receipt = await client.http.get(f"/threads/{thread['thread_id']}/runs/{run['run_id']}/receipt")
    assert receipt["outcome"] == "error"
    assert receipt["error"] == {"error": "RuntimeError", "message": "no API key for the model"}


async def test_a_graph_reads_a_variable_set_only_in_the_env_file(
    client: LangGraphClient,
) -> None:
    assert "PROJECT_GREETING" not in os.environ
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "greeter", input={})
    assert result == {"text": "hello from project.env"}


async def test_a_graph_description_reaches_its_system_assistant(
    client: LangGraphClient,
) -> None:
    held = await client.assistants.get("held")
    assert held["description"] == HELD_DESCRIPTION
    found = {a["graph_id"]: a for a in await client.assistants.search(limit=100)}
    assert found["held"]["description"] == HELD_DESCRIPTION
    assert found["no_argument"]["description"] is None
    # Waybill's built-in graphs are listed beside the project's by default.
    assert "lead_agent" in found


# ---- built-ins off, env as a mapping, keys Waybill does not use --------------------


def write_small_project(root: Path, description: str) -> Path:
    shutil.copy(FACTORY_PROJECT / "agent" / "greeter.py", root / "greeter.py")
    manifest = root / "langgraph.json"
    manifest.write_text(
        json.dumps(
            {
                "dependencies": ["."],
                "env": {"PROJECT_GREETING": "hello from the env mapping"},
                "graphs": {"greeter": {"path": "./greeter.py:graph", "description": description}},
                "python_version": "3.11",  # build only: no warning
                "dockerfile_lines": [],  # build only: no warning
                "webhooks": {"env_prefix": "LG_WEBHOOK_"},  # not supported
                "checkpointer": {"path": "./saver.py:make_saver"},  # not supported
                "dependancies": [],  # a typo
            }
        )
    )
    return manifest


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def small_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, Path]]:
    manifest = write_small_project(tmp_path_factory.mktemp("small-project"), "Says hello.")
    data_dir = tmp_path_factory.mktemp(f"stack-small-{request.param}")
    extra = {"WAYBILL_GRAPHS": str(manifest), "WAYBILL_BUILTIN_GRAPHS": "false"}
    with stack_in_mode(request.param, data_dir, **extra) as running:
        yield running, manifest


@pytest.fixture
async def small_client(small_stack: tuple[Stack, Path]) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=small_stack[0].url, timeout=30)
    try:
        yield sdk
    finally:
        await sdk.aclose()


async def test_builtin_graphs_can_be_turned_off(small_client: LangGraphClient) -> None:
    assistants = await small_client.assistants.search()
    assert [a["graph_id"] for a in assistants] == ["greeter"]
    thread = await small_client.threads.create()
    with pytest.raises(UnprocessableEntityError) as refusal:
        await small_client.runs.create(thread["thread_id"], "lead_agent", input={})
    assert "lead_agent" in refusal.value.message


async def test_a_graph_reads_a_variable_set_only_in_the_env_mapping(
    small_client: LangGraphClient,
) -> None:
    thread = await small_client.threads.create()
    result = await small_client.runs.wait(thread["thread_id"], "greeter", input={})
    assert result == {"text": "hello from the env mapping"}


def test_each_unused_key_is_warned_about_once_by_the_runner(
    small_stack: tuple[Stack, Path],
) -> None:
    stack, _ = small_stack
    log = Path(stack.log_dir or "") / "runner.log"
    warnings = [
        json.loads(line)["msg"]
        for line in log.read_text().splitlines()
        if line.startswith("{") and "has no effect" in line
    ]
    assert len(warnings) == 3
    assert any("'webhooks' is not supported by Waybill" in w for w in warnings)
    assert any("'checkpointer.path' is not supported by Waybill" in w for w in warnings)
    assert any("'dependancies'" in w and "did you mean 'dependencies'" in w for w in warnings)


async def test_a_changed_description_reaches_the_assistant_at_restart(
    small_stack: tuple[Stack, Path], small_client: LangGraphClient
) -> None:
    stack, manifest = small_stack
    assert (await small_client.assistants.get("greeter"))["description"] == "Says hello."
    write_small_project(manifest.parent, "Says hello, politely.")
    stack.processes["admission"].terminate()
    stack.processes["admission"].wait()
    stack.start_one("admission")
    stack.wait_ready(["admission"])
    found = await small_client.assistants.search(graph_id="greeter")
    assert found[0]["description"] == "Says hello, politely."


# ---- broken projects stop start-up, with the reason ---------------------------------


def refused_start(tmp_path: Path, manifest: Path, service: str) -> str:
    """Start only `service` (after the migrations) and return why it refused to start."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    stack = Stack(env=stack_env(data_dir, WAYBILL_GRAPHS=str(manifest)), log_dir=str(data_dir))
    try:
        with pytest.raises(RuntimeError) as refusal:
            stack.start(only=[service])
    finally:
        stack.stop()
    return str(refusal.value)


def project_with(root: Path, manifest: dict[str, Any] | str) -> Path:
    (root / "graph.py").write_text((FACTORY_PROJECT / "agent" / "greeter.py").read_text())
    path = root / "langgraph.json"
    path.write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return path


def test_a_file_that_is_not_json_stops_start_up(tmp_path: Path) -> None:
    manifest = project_with(tmp_path, '{"graphs": {"g": "./graph.py:graph"},}')
    reason = refused_start(tmp_path, manifest, "admission")
    assert "migrations failed (exit code 4)" in reason  # the first process to read it
    assert "not valid JSON" in reason


def test_a_value_of_the_wrong_type_stops_start_up(tmp_path: Path) -> None:
    manifest = project_with(tmp_path, {"graphs": {"g": "./graph.py:graph"}, "env": ["A=1"]})
    reason = refused_start(tmp_path, manifest, "admission")
    assert "langgraph.json: env: Input should be a valid dictionary or a valid string" in reason


def test_a_graph_file_that_does_not_exist_stops_start_up(tmp_path: Path) -> None:
    manifest = project_with(tmp_path, {"graphs": {"g": "./missing.py:graph"}})
    reason = refused_start(tmp_path, manifest, "admission")
    assert "graph 'g': no such file" in reason and "missing.py" in reason


def test_a_missing_attribute_stops_the_runner(tmp_path: Path) -> None:
    manifest = project_with(tmp_path, {"graphs": {"g": "./graph.py:nope"}})
    reason = refused_start(tmp_path, manifest, "runner")
    assert "runner exited with code 4" in reason
    assert "has no attribute 'nope'" in reason


def test_a_package_dependency_not_installed_is_named_with_its_install_command(
    tmp_path: Path,
) -> None:
    manifest = project_with(
        tmp_path,
        {"dependencies": [".", "waybill-no-such-package>=1"], "graphs": {"g": "./graph.py:graph"}},
    )
    reason = refused_start(tmp_path, manifest, "runner")
    assert "dependencies not installed: waybill-no-such-package>=1" in reason
    assert "pip install 'waybill-no-such-package>=1'" in reason


# ---- the file itself, read in one process -------------------------------------------


def load(root: Path, manifest: dict[str, Any]) -> Project:
    return Project.load(project_with(root, manifest))


def test_keys_for_building_images_are_not_warned_about(tmp_path: Path) -> None:
    build_only = {
        "python_version": "3.12",
        "pip_config_file": "pip.conf",
        "pip_installer": "uv",
        "dockerfile_lines": ["RUN true"],
        "base_image": "python:3.12",
        "image_distro": "wolfi",
        "node_version": "20",
        "keep_pkg_tools": ["pip"],
    }
    project = load(tmp_path, {"graphs": {"g": "./graph.py:graph"}, **build_only})
    assert project.unsupported_keys() == []


def test_unsupported_nested_keys_are_named(tmp_path: Path) -> None:
    project = load(
        tmp_path,
        {
            "graphs": {"g": "./graph.py:graph"},
            "auth": {"path": "./auth.py:auth", "cache": {"ttl_seconds": 5}},
            "checkpointer": {"ttl": {"default_ttl": 5}, "serde": {}},
            "store": {"indx": {}},
        },
    )
    assert project.unsupported_keys() == [
        "'auth.cache' is not supported by Waybill and has no effect",
        "'checkpointer.serde' is not supported by Waybill and has no effect",
        "'store.indx' is not a langgraph.json key (did you mean 'store.index'?) and has no effect",
    ]


def test_warnings_go_to_the_log_once_per_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = load(tmp_path, {"graphs": {"g": "./graph.py:graph"}, "ui": {}, "encryption": {}})
    with caplog.at_level(logging.WARNING, logger="waybill.project"):
        project.warn_unsupported()
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        "'encryption' is not supported by Waybill and has no effect",
        "'ui' is not supported by Waybill and has no effect",
    ]


def test_no_graphs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="no graphs"):
        load(tmp_path, {"dependencies": ["."]})


def test_a_graph_without_an_attribute_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="must be './path/to/file.py:attribute'"):
        load(tmp_path, {"graphs": {"g": "./graph.py"}})


def test_a_local_dependency_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="dependency .*/nowhere: no such folder"):
        load(tmp_path, {"dependencies": ["./nowhere"], "graphs": {"g": "./graph.py:graph"}})


def test_an_env_file_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="env: no such file"):
        load(tmp_path, {"env": ".env", "graphs": {"g": "./graph.py:graph"}})


def test_graph_paths_resolve_against_the_files_folder(tmp_path: Path) -> None:
    project = load(
        tmp_path,
        {
            "graphs": {
                "by_file": "./graph.py:graph",
                "by_module": "my_package.agent:graph",
                "described": {"path": "./graph.py:graph", "description": "Greets."},
            }
        },
    )
    graphs = project.graphs()
    assert graphs["by_file"].target == f"{tmp_path.resolve()}/graph.py:graph"
    assert graphs["by_module"].target == "my_package.agent:graph"
    assert graphs["described"].description == "Greets."
    assert graphs["by_file"].description is None


def test_the_env_file_is_parsed_and_waybill_settings_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "project.env").write_text(
        textwrap.dedent(
            """
            # a comment
            export PROJECT_A=one
            PROJECT_B="two words"
            WAYBILL_HTTP_PORT=1
            """
        )
    )
    project = load(tmp_path, {"env": "./project.env", "graphs": {"g": "./graph.py:graph"}})
    for key in ("PROJECT_A", "PROJECT_B"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WAYBILL_HTTP_PORT", "8080")
    project.apply_env()
    assert os.environ["PROJECT_A"] == "one"
    assert os.environ["PROJECT_B"] == "two words"
    assert os.environ["WAYBILL_HTTP_PORT"] == "8080"


def test_a_src_layout_package_is_importable_from_its_src_folder() -> None:
    project = Project.load(FACTORY_PROJECT / "langgraph.json")
    assert project.import_paths() == [
        FACTORY_PROJECT / "lib",
        FACTORY_PROJECT / "pkg",
        FACTORY_PROJECT / "pkg" / "src",
    ]


def test_installed_packages_pass_the_check(tmp_path: Path) -> None:
    project = load(
        tmp_path,
        {"dependencies": ["langgraph>=0.1", "langchain_core"], "graphs": {"g": "./graph.py:graph"}},
    )
    assert project.missing_packages() == []
    too_new = load(
        tmp_path, {"dependencies": ["langgraph>=999"], "graphs": {"g": "./graph.py:graph"}}
    )
    assert too_new.missing_packages() == ["langgraph>=999"]
