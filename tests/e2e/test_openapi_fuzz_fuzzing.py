"""The gateway's OpenAPI fuzzed with a key: the fuzzing and the stateful phases, on
the whole schema (tests/e2e/test_openapi_fuzz.py says why the files are split)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.openapi_fuzzing import (
    API_KEY,
    assert_as_declared,
    assert_runs_made_and_read,
    fuzz,
    fuzzed_stack_in,
)
from waybill.common.launch import Stack


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-fuzz-fuzzing")
    with fuzzed_stack_in(data_dir) as stack:
        yield stack


@pytest.mark.timeout(480)
def test_with_a_key_fuzzing_no_5xx_and_every_answer_as_declared(fuzzed_stack: Stack) -> None:
    report = fuzz(fuzzed_stack.url, {"x-api-key": API_KEY}, 6, ["fuzzing"])
    assert_as_declared(report, ["fuzzing"])
    assert len(report.statuses) >= 80, sorted(report.statuses)  # every operation, nearly
    assert_runs_made_and_read(report)


@pytest.mark.timeout(480)
def test_with_a_key_stateful_no_5xx_and_every_answer_as_declared(fuzzed_stack: Stack) -> None:
    """Sequences along the schema's links (schemathesis labels them all as one)."""
    report = fuzz(fuzzed_stack.url, {"x-api-key": API_KEY}, 6, ["stateful"])
    assert_as_declared(report, ["stateful"])
    assert report.requests > 0
