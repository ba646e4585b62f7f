"""The gateway's OpenAPI fuzzed on the Postgres stack (Postgres, and Redis for the
journal's fan-out), with the same zero-5xx gate as on SQLite
(tests/e2e/test_openapi_fuzz.py): what only Postgres refuses (a NUL in text, an
int4 overflow, a row-lock cycle between two transactions) and what only many
open streams exhaust (connection pools) shows up here. Bounded to a minute or
so: the fuzzing phase only, a few examples per operation; the full phases run on
SQLite in the other files (and here with WAYBILL_FUZZ_MODE=postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.openapi_fuzzing import (
    API_KEY,
    assert_as_declared,
    assert_runs_made_and_read,
    fuzz,
)
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

EXAMPLES = 4  # per operation


@pytest.fixture(scope="module")
def postgres_stack_fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-fuzz-postgres")
    with stack_in_mode("postgres", data_dir, WAYBILL_API_KEY=API_KEY) as stack:
        yield stack


@pytest.mark.timeout(300)
def test_on_postgres_fuzzing_no_5xx_and_every_answer_as_declared(
    postgres_stack_fuzzed: Stack,
) -> None:
    report = fuzz(postgres_stack_fuzzed.url, {"x-api-key": API_KEY}, EXAMPLES, ["fuzzing"])
    assert_as_declared(report, ["fuzzing"])
    assert len(report.statuses) >= 80, sorted(report.statuses)  # every operation, nearly
    assert_runs_made_and_read(report)
