"""A setting that needs an extra not installed is one line naming the extra."""

from __future__ import annotations

import pytest

from waybill.common.extras import MissingExtra, needs_extra


def test_a_missing_module_names_the_extra_to_install() -> None:
    with pytest.raises(MissingExtra) as raised, needs_extra("otel", "tracing"):
        import waybill_no_such_exporter  # noqa: F401
    said = str(raised.value)
    assert said == (
        "tracing needs the `otel` extra (waybill_no_such_exporter is not installed): "
        "pip install 'waybill[otel]'"
    )
    assert "\n" not in said


def test_other_errors_pass_through() -> None:
    with pytest.raises(ValueError), needs_extra("otel", "tracing"):
        raise ValueError("not an import")
