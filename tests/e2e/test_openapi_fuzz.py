"""The gateway's own OpenAPI, fuzzed by schemathesis against a real stack.

Every operation the gateway documents, through every phase: the schema's examples,
coverage of its edges (each bound, each wrong type), random fuzzing, and stateful
sequences along the links schemathesis infers between operations (a thread created,
then read, patched, run on, deleted). The gate: no request ever gets a 5xx; and
every answer is one the schema declares (its status, its content type, its body).

The stack has an API key: the keyed run reaches every route's own logic (runs are
made, streamed, awaited, cancelled); the run without credentials checks that the
refusal is a declared 401, never a fault. It is embedded (SQLite) by default, which
keeps each file to a couple of minutes on a busy two-core machine;
WAYBILL_FUZZ_MODE=postgres fuzzes the scaled stack instead (where a NUL in JSON and
an int4 overflow were 500s). Generation is derandomized and bounded.

The keyed run is split over three files, each with its stack: the coverage of the
/threads operations here, of the others in tests/e2e/test_openapi_fuzz_coverage.py, and
fuzzing and stateful in tests/e2e/test_openapi_fuzz_fuzzing.py (helpers in
tests/support/openapi_fuzzing.py). `--dist loadfile` gives each file to one worker: one file
of every phase kept one worker fuzzing for minutes while the other idled.

Schemathesis runs here as its command line does (its engine: every phase, the
stateful one included); its pytest plugin's per-operation tests cannot take a
schema from a fixture under pytest 9. Event streams are fuzzed like the rest:
schemathesis reads a `text/event-stream` answer until it ends, `max-stream-events`
events have come, or the request timeout passes (a thread's stream never ends by
itself; its heartbeats are comments, not events, so there the timeout closes it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.openapi_fuzzing import (
    API_KEY,
    assert_as_declared,
    assert_runs_made_and_read,
    fuzz,
    fuzzed_stack_in,
    operations,
    threads_paths,
)
from waybill.common.launch import Stack


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-fuzz")
    with fuzzed_stack_in(data_dir) as stack:
        yield stack


@pytest.mark.timeout(480)
def test_with_a_key_the_threads_coverage_no_5xx_and_every_answer_as_declared(
    fuzzed_stack: Stack,
) -> None:
    """Examples and coverage of the /threads operations (the rest's are in
    tests/e2e/test_openapi_fuzz_coverage.py): every one reached, runs made and read."""
    headers = {"x-api-key": API_KEY}
    report = fuzz(fuzzed_stack.url, headers, 6, ["examples", "coverage"], threads_paths)
    assert_as_declared(report, ["examples", "coverage"])
    assert set(report.statuses) == operations(fuzzed_stack.url, threads_paths)
    assert_runs_made_and_read(report)


# /ok, /livez and /info answer anyone; chat platforms' webhooks carry their own
# signatures.
OPEN = ("GET /ok", "GET /livez", "GET /info", "POST /channels/", "GET /channels/")


@pytest.mark.timeout(240)
def test_without_credentials_no_5xx_and_every_refusal_as_declared(fuzzed_stack: Stack) -> None:
    report = fuzz(fuzzed_stack.url, {}, 3, ["examples", "coverage"])
    assert not report.failures and not report.errors, report.summary()
    for operation, statuses in report.statuses.items():
        if not operation.startswith(OPEN):
            # 401 for all but a request refused before auth is asked: a multipart
            # body that cannot be parsed (400), a malformed path (404), a method a
            # route does not serve (405), a NUL character anywhere in it (422).
            assert statuses <= {400, 401, 404, 405, 422}, (operation, statuses)
            assert 401 in statuses, (operation, statuses)


async def test_a_nul_character_anywhere_in_a_body_is_422_and_writes_nothing(
    fuzzed_stack: Stack,
) -> None:
    """PostgreSQL's JSON cannot hold NUL (\\u0000): fuzzing found 500s for it in thread
    metadata, search filters and assistants. Every envelope refuses it, naming where."""
    async with httpx.AsyncClient(
        base_url=fuzzed_stack.url, headers={"x-api-key": API_KEY}, timeout=30
    ) as http:
        before = (await http.post("/threads/count", json={})).json()
        cases = {"metadata.note": {"note": "a\x00b"}, "metadata.k\\u0000": {"k\x00": 1}}
        for path, metadata in cases.items():
            reply = await http.post("/threads", json={"metadata": metadata})
            assert reply.status_code == 422, reply.text
            message = reply.json()["detail"][0]["msg"]
            assert "NUL" in message and message.split()[2] == path, message
        assert (await http.post("/threads/count", json={})).json() == before
        search = await http.post("/threads/search", json={"values": {"x": ["\x00"]}})
        assert search.status_code == 422 and "values.x[0]" in search.text
        assistant = {"graph_id": "lead_agent", "name": "n\x00"}
        assert (await http.post("/assistants", json=assistant)).status_code == 422
        run = {"assistant_id": "lead_agent", "input": {"messages": [{"content": "\x00"}]}}
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        reply = await http.post(f"/threads/{thread_id}/runs", json=run)
        assert reply.status_code == 422, reply.text
        assert (await http.get(f"/threads/{thread_id}/runs")).json() == []
        # The store's own two: a NUL in a dot-joined namespace, and a depth that
        # PostgresStore's SQL overflows (it adds to it as a 32-bit integer).
        item = await http.get("/store/items", params={"namespace": "a\x00b", "key": "k"})
        assert item.status_code == 422, item.text
        deep = await http.post("/store/namespaces", json={"max_depth": 2**31 - 2})
        assert deep.status_code == 422, deep.text
        fine = await http.post("/threads", json={"metadata": {"note": "a\\u0000b as text"}})
        assert fine.status_code == 200, fine.text
