"""The JS langgraph-sdk contract: tests/js/contract.mjs calls every method of the
pinned `@langchain/langgraph-sdk` Client (found from its sub-clients' prototypes)
against a real Waybill stack; this checks what each method answered, in the
shapes `langgraph_sdk.schema` declares (the JS SDK's types mirror them).

`JS_CONTRACT` is the documentation of what the JS client gets; the calls
themselves are in tests/js/contract.mjs (`CALLS`). `make setup` installs the SDK
there with `npm ci` from the committed package-lock.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.schema import (
    Assistant,
    AssistantVersion,
    GraphSchema,
    ListNamespaceResponse,
    RunMetadataPayload,
    SearchItemsResponse,
    StreamPart,
    Thread,
    ThreadState,
)

from tests.support.paths import TESTS
from tests.support.sdk_answers import (
    MODE_DATA,
    Answers,
    GetItemAnswers,
    GetStateAnswers,
    PlatformCron,
    PlatformRun,
    PruneAnswer,
    Refused,
    Streams,
    SubgraphSchema,
    ThreadStreamStarted,
    UpdateStateAnswers,
    run_stream,
)
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

JS_DIR = TESTS / "js"

JS_CONTRACT: dict[str, Answers | Streams | Refused] = {
    # assistants
    "assistants.create": Answers(Assistant),
    "assistants.get": Answers(Assistant),
    "assistants.update": Answers(Assistant),
    "assistants.delete": Answers(None),
    "assistants.search": Answers(list[Assistant]),
    "assistants.count": Answers(int),
    "assistants.getVersions": Answers(list[AssistantVersion]),
    "assistants.setLatest": Answers(Assistant),
    "assistants.getGraph": Answers(dict[str, list[dict[str, Any]]]),
    "assistants.getSchemas": Answers(GraphSchema),
    "assistants.getSubgraphs": Answers(dict[str, SubgraphSchema]),
    # threads
    "threads.create": Answers(Thread),
    "threads.get": Answers(Thread),
    "threads.update": Answers(Thread),
    "threads.delete": Answers(None),
    "threads.search": Answers(list[Thread]),
    "threads.count": Answers(int),
    "threads.copy": Answers(Thread),
    "threads.prune": Answers(PruneAnswer),
    "threads.getState": Answers(GetStateAnswers),
    "threads.updateState": Answers(UpdateStateAnswers),
    # LangGraph Platform (langgraph-api 0.16.7) has no PATCH /threads/{id}/state.
    "threads.patchState": Refused(405),
    "threads.getHistory": Answers(list[ThreadState]),
    "threads.joinStream": Streams(
        {"metadata": RunMetadataPayload, **MODE_DATA}, frozenset({"values"})
    ),
    "threads.stream": Answers(ThreadStreamStarted),
    # runs
    "runs.create": Answers(PlatformRun),
    "runs.createBatch": Answers(list[PlatformRun]),
    "runs.wait": Answers(dict[str, Any]),
    "runs.stream": run_stream("values", "updates"),
    "runs.list": Answers(list[PlatformRun]),
    "runs.get": Answers(PlatformRun),
    "runs.join": Answers(dict[str, Any]),
    "runs.joinStream": Streams(
        {"metadata": RunMetadataPayload, "values": dict[str, Any]}, frozenset({"values"})
    ),
    # Called with wait=true: the run's last values once it has ended, as LangGraph
    # Platform answers (the SDK's type says void; it hands on the body it got).
    "runs.cancel": Answers(dict[str, Any]),
    "runs.cancelMany": Answers(None),
    "runs.delete": Answers(None),
    # crons
    "crons.create": Answers(PlatformCron),
    "crons.createForThread": Answers(PlatformCron),
    "crons.update": Answers(PlatformCron),
    "crons.search": Answers(list[PlatformCron]),
    "crons.count": Answers(int),
    "crons.delete": Answers(None),
    # store
    "store.putItem": Answers(None),
    "store.getItem": Answers(GetItemAnswers),
    "store.deleteItem": Answers(None),
    "store.searchItems": Answers(SearchItemsResponse),
    "store.listNamespaces": Answers(ListNamespaceResponse),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One SQLite stack is enough for the contract: the shapes do not depend on storage."""
    with stack_in_mode("sqlite", tmp_path_factory.mktemp("js-sdk-contract")) as running:
        yield running


@pytest.fixture(scope="module")
def js_report(stack: Stack) -> dict[str, Any]:
    """What contract.mjs printed: `methods` (every method the JS SDK has), and
    per method its line ({"result": ...} or {"error": ..., "status": ...})."""
    node = shutil.which("node")
    assert node, "node is needed for the JS SDK contract (Node 20+)"
    done = subprocess.run(
        [node, "contract.mjs", stack.url],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return {"methods": lines[0]["methods"], **{line["method"]: line for line in lines[1:]}}


def answer_errors(expected: Answers | Streams | Refused, line: dict[str, Any]) -> list[str]:
    if isinstance(expected, Refused):
        return expected.errors(line.get("status"))
    if "error" in line:
        return [f"the call failed: {line['error']}"]
    if isinstance(expected, Streams):
        return expected.errors([StreamPart(part["event"], part["data"]) for part in line["result"]])
    return expected.errors(line["result"])


def test_every_js_sdk_method_has_an_entry(js_report: dict[str, Any]) -> None:
    methods = set(js_report["methods"])
    assert methods - JS_CONTRACT.keys() == set(), "JS SDK methods the contract does not check"
    assert JS_CONTRACT.keys() - methods == set(), "entries for methods the JS SDK no longer has"
    assert [m for m in methods if m not in js_report] == [], "methods contract.mjs did not call"


@pytest.mark.parametrize("method", sorted(JS_CONTRACT))
def test_the_js_method_answers_as_the_sdk_declares(js_report: dict[str, Any], method: str) -> None:
    line = js_report[method]
    assert answer_errors(JS_CONTRACT[method], line) == [], f"{method} answered {line!r}"
