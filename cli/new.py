"""`waybill new DIR [--template basic|model]`: a project that `waybill up` serves.

As `langgraph new` does, a folder with a `langgraph.json`, a graph, a `.env` and a
README: `basic` answers without any model (a context schema and a tool, so the
first run works with no key), `model` calls OpenAI through `OPENAI_API_KEY`.
The files are the package's own (`cli/templates/<template>/`), copied as they are.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

TEMPLATES_DIR = Path(__file__).parent / "templates"
TEMPLATES = ("basic", "model")


def add_new_command(commands: object) -> None:
    new = commands.add_parser(  # type: ignore[attr-defined]
        "new", help="write a new project (langgraph.json, a graph, .env) into DIR"
    )
    new.add_argument("path", type=Path, help="the project's folder (created; must be empty)")
    new.add_argument(
        "--template",
        choices=TEMPLATES,
        default="basic",
        help="basic: no model needed (default); model: OpenAI through OPENAI_API_KEY",
    )


def template_files(template: str) -> list[Path]:
    """The template's files, relative to its folder (`env` becomes `.env`)."""
    root = TEMPLATES_DIR / template
    return sorted(
        path.relative_to(root)
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def target_name(relative: Path) -> Path:
    # Stored without the dot: a wheel or an editor may skip hidden files.
    return relative.with_name(".env") if relative.name == "env" else relative


def new_project(path: Path, template: str) -> int:
    if path.exists() and any(path.iterdir()):
        print(f"waybill new: {path} is not empty; choose a new folder", file=sys.stderr)
        return 2
    root = TEMPLATES_DIR / template
    for relative in template_files(template):
        destination = path / target_name(relative)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, destination)
    print(f"waybill new: wrote a {template} project in {path}")
    print(f"  cd {path} && waybill up")
    return 0
