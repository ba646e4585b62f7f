"""`waybill config reference`: how a field's description is read from its comments,
and the command that writes, checks and prints the reference (no stack needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from tests.support.helpers import WAYBILL
from waybill.cli import config_reference
from waybill.cli.config_reference import (
    ConfigReferenceError,
    class_comments,
    default_text,
    description,
    type_text,
)
from waybill.cli.main import main
from waybill.common.settings import Settings


class Sample(BaseModel):
    plain: int = 1  # a trailing comment
    # ---- a heading of the source, not a description ----
    # A block above a run of fields
    # describes them all,
    first: float = 2.0
    second: str = "x"
    third: bool = True  # but one with its own comment ends the run
    after_own: int = 3

    # A blank line ends a run too.
    blocked: int = 4  # an aside added
    nothing: int | None = None

    unsaid: int = 0

    described: int = Field(default=5, gt=0, le=9, description="said  in\n the field")
    sized_bytes: int = 8 * 1024 * 1024
    long_seconds: float = 7 * 86400.0


def test_descriptions_come_from_the_comments() -> None:
    said = class_comments(Sample).text
    assert said["plain"] == "a trailing comment"
    assert said["first"] == said["second"] == "A block above a run of fields describes them all,"
    assert said["third"] == "but one with its own comment ends the run"
    assert "after_own" not in said
    assert said["blocked"] == "A blank line ends a run too (an aside added)."
    assert said["nothing"] == "A blank line ends a run too."  # the block's, not the aside
    assert description(Sample, "described") == "said in the field"
    assert description(Sample, "unsaid") == description(Sample, "after_own") == ""


def test_types_and_defaults_are_rendered_from_the_field() -> None:
    assert type_text(Sample, "nothing") == "int"
    assert default_text(Sample, "nothing") == "unset"
    assert type_text(Sample, "described") == "int, > 0, ≤ 9"
    assert default_text(Sample, "third") == "`true`"
    assert default_text(Sample, "first") == "`2`"
    assert default_text(Sample, "sized_bytes") == "`8388608` (8 MiB)"
    assert default_text(Sample, "long_seconds") == "`604800` (7 days)"
    assert type_text(Settings, "log_format") == "`auto` \\| `json` \\| `text`"


def test_platform_aliases_are_shown_beside_their_setting() -> None:
    table = config_reference.settings_table()
    assert "| `WAYBILL_DATABASE_URL` (or `DATABASE_URI`) |" in table
    assert "| `WAYBILL_LOG_LEVEL` (or `LOG_LEVEL`) |" in table


def test_a_field_without_a_description_stops_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config_reference, "undescribed", lambda: ["Settings.new_field"])
    with pytest.raises(ConfigReferenceError, match="Settings.new_field.*make docs"):
        config_reference.generated("settings")


def page_with_blocks(path: Path) -> Path:
    blocks = [
        "\n".join([*config_reference.markers(name)]).replace("-->\n", "-->\nstale\n")
        for name in config_reference.BLOCKS
    ]
    path.write_text("# Intro, kept\n\n" + "\n\ntext between\n\n".join(blocks) + "\n\nend\n")
    return path


def test_write_rewrites_the_blocks_and_check_says_when_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = page_with_blocks(tmp_path / "configuration.md")
    assert main(["config", "reference", "--check", str(page)]) == 1
    assert "make docs" in capsys.readouterr().err
    assert main(["config", "reference", "--write", str(page)]) == 0
    text = page.read_text()
    assert "stale" not in text
    assert text.startswith("# Intro, kept\n") and "text between" in text and text.endswith("end\n")
    assert "| `WAYBILL_HTTP_PORT` | int | `8080` |" in text
    assert "| `models[].name` | str | required |" in text
    assert main(["config", "reference", "--check", str(page)]) == 0


def test_a_page_without_markers_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "page.md"
    page.write_text("# no markers\n")
    assert main(["config", "reference", "--write", str(page)]) == 2
    assert "generated: settings" in capsys.readouterr().err
    assert page.read_text() == "# no markers\n"


def test_the_installed_command_prints_the_reference() -> None:
    done = subprocess.run(
        [WAYBILL, "config", "reference"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Settings (environment)\n")
    for field in Settings.model_fields:
        assert f"`WAYBILL_{field.upper()}`" in done.stdout
