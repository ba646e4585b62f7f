"""`waybill config reference`: the configuration reference, generated from the code.

Every field of `Settings` (the environment) and of `ConfigFile` (the YAML config)
becomes a row: its name as it is set (`WAYBILL_…`, with LangGraph Platform's alias;
or the YAML key's path), its type, its default and what it sets. What it sets is
the field's `Field(description=...)` when it has one, else the comments the source
gives it, read with `ast` and `tokenize`:

    # A comment block right above a field describes it, and the fields right
    # below it (no blank line between) that have no comment of their own.
    db_pool_size: int = 5
    db_max_overflow: int = 10
    history_limit: int = 200  # a trailing comment describes its own line's field

A `# ---- section ----` line is a heading of the source, not a description. A field
with none of these has no description, and the reference refuses to be made
without one (`ConfigReferenceError` names it).

docs/configuration.md holds the generated tables between `<!-- generated: NAME -->`
and `<!-- end generated: NAME -->`; `--write PAGE` rewrites them there (the rest of
the page is hand-written), `--check PAGE` says whether they are current, and
tests/repo/test_docs.py fails when they are not. `make docs` writes them.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import math
import re
import sys
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

REGENERATE = "make docs (or: waybill config reference --write docs/configuration.md)"
BLOCKS = ("settings", "yaml")
SECTION_HEADING = re.compile(r"^-{3,}.*-{3,}$")
# A path of the source tree in a comment ("services/runner/effects/model_calls.py",
# "docs/security.md"): linked from the docs page when the file exists.
SOURCE_PATH = re.compile(r"(?<![\w/.`])((?:[a-z_]+/)+[a-z_]+\.(?:py|md))(?![\w/])")
ROOT = Path(__file__).resolve().parent.parent


class ConfigReferenceError(ValueError):
    """The reference cannot be made: a field has no description, or a page lacks
    the markers of a generated block."""


# ---- reading the source: each field's comments ----


@dataclass
class Comments:
    """What the source says of one class's fields: field name -> description (its
    own comments, or those of the block above the run of fields it is in)."""

    text: dict[str, str] = field(default_factory=dict)
    annotation: dict[str, str] = field(default_factory=dict)  # as the source spells it
    own: set[str] = field(default_factory=set)  # described by comments of their own


def _comment_lines(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on it (without `#`)."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def _block_above(lines: list[str], comments: dict[int, str], lineno: int) -> list[str]:
    """The comment lines right above `lineno` (1-based), down to a blank line, code
    or a section heading."""
    block: list[str] = []
    number = lineno - 1
    while number >= 1 and lines[number - 1].strip().startswith("#"):
        text = comments.get(number, "")
        if SECTION_HEADING.match(text):
            break
        block.insert(0, text)
        number -= 1
    return block


def _joined(parts: list[str]) -> str:
    return " ".join(part for part in parts if part).strip()


def _with_own(block: str, own: str) -> str:
    """A block's text with the field's trailing comment as a last aside."""
    if not own:
        return block
    if block.endswith("."):
        return f"{block[:-1]} ({own})."
    return f"{block} ({own})"


def class_comments(cls: type) -> Comments:
    """The comments of the fields `cls` itself defines (not its bases')."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = _comment_lines(source)
    tree = ast.parse(source)
    definition = tree.body[0]
    assert isinstance(definition, ast.ClassDef)
    found = Comments()
    group: str | None = None  # the block a run of uncommented fields shares
    previous_end = -1
    for statement in definition.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            group, previous_end = None, statement.end_lineno or statement.lineno
            continue
        name = statement.target.id
        end = statement.end_lineno or statement.lineno
        own = _joined([comments.get(n, "") for n in range(statement.lineno, end + 1)])
        block = _joined(_block_above(lines, comments, statement.lineno))
        found.annotation[name] = ast.unparse(statement.annotation)
        if block or own:
            found.own.add(name)
        if block:
            group = block
            found.text[name] = _with_own(block, own)
        elif own:
            group = None
            found.text[name] = own
        elif group is not None and previous_end == statement.lineno - 1:
            found.text[name] = group
        else:
            group = None
        previous_end = end
    return found


def _defining_class(model: type[BaseModel], name: str) -> type:
    for cls in model.__mro__:
        if name in getattr(cls, "__annotations__", {}):
            return cls
    raise ConfigReferenceError(f"{model.__name__}.{name}: no class defines it")


_comments_cache: dict[type, Comments] = {}


def _comments_of(cls: type) -> Comments:
    if cls not in _comments_cache:
        _comments_cache[cls] = class_comments(cls)
    return _comments_cache[cls]


def description(model: type[BaseModel], name: str) -> str:
    """What field `name` of `model` sets, from the code: its `description`, else its
    comments; empty when it has neither."""
    info = model.model_fields[name]
    if info.description:
        return " ".join(info.description.split())
    comments = _comments_of(_defining_class(model, name))
    if name in comments.own:
        return comments.text[name]
    section, _ = _model_in(info.annotation)
    if section is not None and section.__doc__:
        return " ".join(section.__doc__.split("\n\n")[0].split())
    return comments.text.get(name, "")


# ---- rendering one field ----


def _plain(annotation: Any) -> Any:
    """`annotation` without `None` in a union."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def type_text(model: type[BaseModel], name: str) -> str:
    """The field's type as the source spells it (without `| None`: its default says
    unset), a `Literal`'s choices, and its bounds."""
    info = model.model_fields[name]
    plain = _plain(info.annotation)
    section, step = _model_in(info.annotation)
    if section is not None:
        text = {"": "section", "[]": "list of entries", ".<name>": "name → entry"}[step]
    elif typing.get_origin(plain) is typing.Literal:
        text = " \\| ".join(f"`{choice}`" for choice in typing.get_args(plain))
    else:
        spelt = _comments_of(_defining_class(model, name)).annotation.get(name, "")
        spelt = re.sub(r"\s*\|\s*None$", "", spelt) if spelt else getattr(plain, "__name__", "")
        text = spelt.replace("|", "\\|")
    bounds = []
    for bound in info.metadata:
        for attribute, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(bound, attribute, None)
            if isinstance(bound, annotated_types.BaseMetadata) and value is not None:
                bounds.append(f"{sign} {_number(value)}")
    return ", ".join([text, *bounds])


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and not math.isinf(value):
        return str(int(value))
    return str(value)


def _in_words(name: str, value: Any) -> str:
    """A large size or duration said in words beside its number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return ""
    if name.endswith("_bytes") and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f" ({int(value) // (1024 * 1024)} MiB)"
    if name.endswith("_seconds") and value >= 3600:
        for unit, seconds in (("day", 86400), ("hour", 3600)):
            if value % seconds == 0:
                count = int(value) // seconds
                return f" ({count} {unit}{'s' if count > 1 else ''})"
    return ""


def default_text(model: type[BaseModel], name: str) -> str:
    info: FieldInfo = model.model_fields[name]
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "empty"
    if isinstance(value, list | dict) and not value:
        return "empty"
    if isinstance(value, int | float):
        return f"`{_number(value)}`{_in_words(name, value)}"
    return f"`{value}`"


def linked(text: str, links: bool = True) -> str:
    """`text` for a table cell of a page in docs/: pipes escaped, paths of the source
    tree linked (a comment names them from the repository's root; a bare module
    path such as `common/sealed.py` is one too)."""

    def link(match: re.Match[str]) -> str:
        path = match.group(1)
        if links and (ROOT / path).is_file():
            target = path[len("docs/") :] if path.startswith("docs/") else f"../{path}"
            return f"[{path}]({target})"
        return path

    parts = re.split(r"(`[^`]*`)", text)  # code spans keep their `<` as it is
    for index in range(0, len(parts), 2):
        parts[index] = SOURCE_PATH.sub(link, parts[index].replace("<", "&lt;"))
    return "".join(parts).replace("|", "\\|")


# ---- the tables ----


@dataclass
class Row:
    names: list[str]
    types: list[str]
    defaults: list[str]
    text: str


def _cell(values: list[str]) -> str:
    return values[0] if len(set(values)) == 1 else ", ".join(values)


def _table(header: list[str], rows: list[Row], links: bool) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            ", ".join(row.names),
            _cell(row.types),
            _cell(row.defaults),
            linked(row.text, links),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _grouped(rows: Iterator[Row]) -> list[Row]:
    """Consecutive fields that share one description share one row."""
    grouped: list[Row] = []
    for row in rows:
        if grouped and grouped[-1].text == row.text:
            last = grouped[-1]
            last.names += row.names
            last.types += row.types
            last.defaults += row.defaults
        else:
            grouped.append(row)
    return grouped


def env_names(name: str) -> list[str]:
    """The environment names that set `Settings.name`: `WAYBILL_<NAME>` (or the
    field's own alias), then LangGraph Platform's."""
    from waybill.common.platform_env import PLATFORM_NAMES
    from waybill.common.settings import Settings

    info = Settings.model_fields[name]
    alias = info.validation_alias or info.alias
    prefix = Settings.model_config.get("env_prefix", "")
    own = alias.upper() if isinstance(alias, str) else f"{prefix}{name}".upper()
    return [own, *(platform for platform, field in PLATFORM_NAMES.items() if field == name)]


def undescribed() -> list[str]:
    """The fields of `Settings` and of the YAML config that have no description."""
    missing = []
    for model, name, _ in _yaml_fields():
        if not description(model, name):
            missing.append(f"{model.__name__}.{name}")
    from waybill.common.settings import Settings

    missing += [f"Settings.{n}" for n in Settings.model_fields if not description(Settings, n)]
    return missing


def settings_table(links: bool = True) -> str:
    """Every `Settings` field, one table per section (common/setting_sections.py):
    its environment names, type, default, description."""
    from waybill.common.setting_sections import SECTIONS
    from waybill.common.settings import Settings

    def rows(names: Iterable[str]) -> Iterator[Row]:
        for name in names:
            own, *aliases = env_names(name)
            shown = f"`{own}`" + "".join(f" (or `{alias}`)" for alias in aliases)
            yield Row(
                [shown],
                [type_text(Settings, name)],
                [default_text(Settings, name)],
                description(Settings, name),
            )

    tables = []
    for section in SECTIONS:
        title = section.__name__.removesuffix("Settings")
        said = " ".join((section.__doc__ or "").split())
        table = _table(
            ["variable", "type", "default", "what it sets"],
            _grouped(rows(section.model_fields)),
            links,
        )
        tables.append(f"**{title}.** {said}\n\n{table}")
    return "\n\n".join(tables)


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a YAML key holds and how its path goes on: `.key` (the model
    itself), `[].key` (a list of them), `.<name>.key` (a table of them)."""
    plain = _plain(annotation)
    if isinstance(plain, type) and issubclass(plain, BaseModel):
        return plain, ""
    origin, args = typing.get_origin(plain), typing.get_args(plain)
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    if origin is dict and len(args) == 2:
        inner = _plain(args[1])
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner, ".<name>"
    return None, ""


def _yaml_fields(
    model: type[BaseModel] | None = None, prefix: str = ""
) -> Iterator[tuple[type[BaseModel], str, str]]:
    """(model, field, YAML key path) for every key of the YAML config, depth first."""
    if model is None:
        from waybill.common.config_file import ConfigFile

        model = ConfigFile
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield model, name, path
        inner, step = _model_in(info.annotation)
        if inner is not None:
            yield from _yaml_fields(inner, f"{path}{step}.")


def yaml_table(links: bool = True) -> str:
    """Every key of the YAML config (`WAYBILL_CONFIG`): its path, type, default and
    description; a key holding a section or a list of entries is followed by theirs."""

    def rows() -> Iterator[Row]:
        for model, name, path in _yaml_fields():
            yield Row(
                [f"`{path}`"],
                [type_text(model, name)],
                [default_text(model, name)],
                description(model, name),
            )

    return _table(["key", "type", "default", "what it sets"], list(rows()), links)


def generated(block: str, links: bool = True) -> str:
    """One generated table; `links`: the source paths it names linked, as from docs/."""
    missing = undescribed()
    if missing:
        raise ConfigReferenceError(
            "no description for "
            + ", ".join(missing)
            + ": give each a comment in the source (common/setting_sections.py), or a comment "
            "block above a run of fields, then run " + REGENERATE
        )
    return settings_table(links) if block == "settings" else yaml_table(links)


# ---- the page ----


def markers(block: str) -> tuple[str, str]:
    return (
        f"<!-- generated: {block} (from the code by `waybill config reference`; "
        "do not edit, run `make docs`) -->",
        f"<!-- end generated: {block} -->",
    )


def rendered(page: str) -> str:
    """`page` with each generated block made anew from the code."""
    for block in BLOCKS:
        begin, end = markers(block)
        start, stop = page.find(begin), page.find(end)
        if start == -1 or stop < start:
            raise ConfigReferenceError(f"the page has no `{begin}` … `{end}` block")
        page = page[: start + len(begin)] + "\n" + generated(block) + "\n" + page[stop:]
    return page


def reference() -> str:
    """Both tables, for a terminal (the installed version's reference)."""
    return (
        "# Settings (environment)\n\n"
        + generated("settings", links=False)
        + "\n\n# The YAML config (WAYBILL_CONFIG)\n\n"
        + generated("yaml", links=False)
        + "\n"
    )


def add_config_command(commands: Any) -> None:
    config = commands.add_parser("config", help="the configuration reference")
    actions = config.add_subparsers(dest="action", required=True, metavar="action")
    ref = actions.add_parser(
        "reference",
        help="every setting and YAML key: name, type, default, description (markdown)",
    )
    where = ref.add_mutually_exclusive_group()
    where.add_argument(
        "--write", type=Path, metavar="PAGE", help="rewrite the generated blocks of PAGE"
    )
    where.add_argument(
        "--check", type=Path, metavar="PAGE", help="exit 1 if PAGE's generated blocks are stale"
    )


def run_config_command(args: argparse.Namespace) -> int:
    try:
        if args.write is None and args.check is None:
            sys.stdout.write(reference())
            return 0
        page = args.write or args.check
        text = page.read_text()
        fresh = rendered(text)
    except (ConfigReferenceError, OSError) as error:
        print(f"waybill: {error}", file=sys.stderr)
        return 2
    if args.check is not None:
        if fresh != text:
            print(f"{page} is stale: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        page.write_text(fresh)
        print(f"{page}: generated blocks rewritten")
    return 0
