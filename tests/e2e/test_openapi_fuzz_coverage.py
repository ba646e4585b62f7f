"""The gateway's OpenAPI fuzzed with a key: examples and coverage of every operation
outside /threads (those are in tests/e2e/test_openapi_fuzz.py, which says why the files
are split)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.openapi_fuzzing import (
    API_KEY,
    assert_as_declared,
    fuzz,
    fuzzed_stack_in,
    operations,
    other_paths,
)
from waybill.common.launch import Stack


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-fuzz-coverage")
    with fuzzed_stack_in(data_dir) as stack:
        yield stack


@pytest.mark.timeout(480)
def test_with_a_key_the_other_coverage_no_5xx_and_every_answer_as_declared(
    fuzzed_stack: Stack,
) -> None:
    headers = {"x-api-key": API_KEY}
    report = fuzz(fuzzed_stack.url, headers, 6, ["examples", "coverage"], other_paths)
    assert_as_declared(report, ["examples", "coverage"])
    assert set(report.statuses) == operations(fuzzed_stack.url, other_paths)
