"""The docs cannot drift: docs/configuration.md's tables are what the code generates
(`make docs`), every setting is in them under the name the environment gives it and
every YAML key under its path, every relative link of README.md and docs/*.md leads to a
file that exists (and a heading, when it names one), the README stays short, and
the example configs load."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from tests.support.paths import REPO
from waybill.cli import config_reference
from waybill.common.config_file import ConfigFile
from waybill.common.platform_env import PLATFORM_NAMES
from waybill.common.settings import Settings

ROOT = REPO
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# [text](target) and ![alt](target); a target may carry a "title" after a space.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def env_names(field: str) -> list[str]:
    """The environment names that set `field`: `WAYBILL_<FIELD>`, or its alias."""
    info = Settings.model_fields[field]
    alias = info.validation_alias or info.alias
    if isinstance(alias, str):
        return [alias.upper()]
    prefix = Settings.model_config.get("env_prefix", "")
    return [f"{prefix}{field}".upper()]


def settings_table() -> str:
    """docs/configuration.md's `## Settings` section."""
    text = CONFIGURATION.read_text()
    start = text.index("\n## Settings\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_settings_are_read_with_the_waybill_prefix() -> None:
    assert Settings.model_config.get("env_prefix") == "WAYBILL_"
    assert len(Settings.model_fields) > 100  # the class, not an empty stand-in


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_documented(field: str) -> None:
    text = settings_table()
    for name in env_names(field):
        assert re.search(rf"`{re.escape(name)}`", text), (
            f"{name} (Settings.{field}) is not in docs/configuration.md's settings table"
        )


def test_documented_settings_exist() -> None:
    """A `WAYBILL_*` name in the settings table is a setting (or one the launcher
    reads itself), so a renamed or removed setting leaves no stale row."""
    known = {name for field in Settings.model_fields for name in env_names(field)}
    launcher = {"WAYBILL_GRPC_BASE_PORT"}  # read by the embedded launcher, not Settings
    rows = [line for line in settings_table().splitlines() if line.startswith("| `")]
    names = (re.findall(r"`(WAYBILL_[A-Z0-9_]+)`", row.split("|")[1]) for row in rows)
    documented = {name for row_names in names for name in row_names}
    assert documented - known - launcher == set()


@pytest.mark.parametrize("name", sorted(PLATFORM_NAMES))
def test_platform_names_are_documented(name: str) -> None:
    assert f"`{name}`" in settings_table()


def test_the_configuration_reference_is_generated() -> None:
    """The tables between the page's markers are exactly what the generator makes
    from the code now: a setting added, renamed or re-commented shows here."""
    page = CONFIGURATION.read_text()
    assert page == config_reference.rendered(page), (
        f"docs/configuration.md's generated tables are stale: run {config_reference.REGENERATE}"
    )


def test_every_field_has_a_description() -> None:
    assert config_reference.undescribed() == [], (
        "give each field a comment in common/setting_sections.py, then run "
        + config_reference.REGENERATE
    )


def generated_block(name: str) -> str:
    begin, end = config_reference.markers(name)
    text = CONFIGURATION.read_text()
    return text[text.index(begin) : text.index(end)]


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_in_the_generated_table(field: str) -> None:
    rows = [line for line in generated_block("settings").splitlines() if line.startswith("| `")]
    for name in env_names(field):
        found = [row for row in rows if f"`{name}`" in row.split(" | ")[0]]
        assert found, f"{name} (Settings.{field}): no row of its own; run " + (
            config_reference.REGENERATE
        )


def yaml_keys(model: type[Any], prefix: str = "") -> list[str]:
    """Every key path of the YAML config, walked here apart from the generator."""
    keys = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        keys.append(path)
        origin, args = get_origin(info.annotation), get_args(info.annotation)
        step = "[]" if origin is list else ".<name>" if origin is dict else ""
        for inner, then in ((info.annotation, ""), *((arg, step) for arg in args)):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                keys += yaml_keys(inner, f"{path}{then}.")
                break
    return keys


def test_every_yaml_key_is_in_the_generated_table() -> None:
    keys = yaml_keys(ConfigFile)
    assert {"models[].name", "sandbox.kubernetes.image", "mcp_servers.<name>.url"} <= set(keys)
    block = generated_block("yaml")
    missing = [key for key in keys if f"| `{key}` |" not in block]
    assert missing == [], f"not in docs/configuration.md: {missing}; run " + (
        config_reference.REGENERATE
    )


def links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def leads_somewhere(file: Path, anchor: str) -> bool:
    if not file.exists():
        return False
    return not anchor or file.suffix != ".md" or anchor in anchors(file)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # a URL, a mail address
        path, _, anchor = target.partition("#")
        file = page.parent / path if path else page
        if not leads_somewhere(file, anchor):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_link_check_sees_links() -> None:
    assert "docs/README.md" in links(README)
    assert "configuration.md" in links(DOCS / "README.md")


def test_every_docs_page_is_in_the_contents() -> None:
    contents = links(DOCS / "README.md")
    pages = [p.name for p in DOCS.glob("*.md") if p.name != "README.md"]
    missing = [name for name in pages if name not in contents]
    assert missing == []


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"
    assert "## Two commands" in lines
    assert "make run" in README.read_text() and "make test" in README.read_text()


def yaml_blocks(page: Path) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", page.read_text(), re.S | re.M)


@pytest.mark.parametrize("page", [README, CONFIGURATION], ids=lambda p: p.name)
def test_example_configs_load(page: Path) -> None:
    """The model examples are whole configs: they load, and a real provider whose key
    comes from the environment is their default, the scripted model beside it."""
    blocks = [b for b in yaml_blocks(page) if "default_model:" in b]
    assert blocks, f"{page.name} has no example config"
    for block in blocks:
        config = ConfigFile.model_validate(yaml.safe_load(block))
        default = next(m for m in config.models if m.name == config.default_model)
        assert default.provider != "scripted" and default.api_key_env
        assert any(m.provider == "scripted" for m in config.models)
