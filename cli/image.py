"""`waybill dockerfile` / `waybill build`: the project's image, from Waybill's.

As `langgraph dockerfile` / `langgraph build` do for LangGraph Platform's image:
the project's folder (the one holding `langgraph.json`, the build context) is
copied to `/deps/<folder>`; its `dependencies` are installed (PyPI specs with
pip; a local path with a `pyproject.toml` or `setup.py` as a package; a local
path's `requirements.txt`); `dockerfile_lines` are applied, `pip_config_file`
is used for every install, `python_version` is checked against the base image;
`WAYBILL_GRAPHS` names the copied `langgraph.json`, so every path in it
resolves as on the developer's machine. Waybill's own packages keep the
versions the base image has (the installs are constrained to them).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from waybill.common.project import Project, ProjectError

DEFAULT_BASE_IMAGE = "waybill:latest"  # what `docker build -f deploy/Dockerfile -t waybill .` makes
IMAGE_UID = "10001:10001"  # the base image's non-root user (deploy/Dockerfile)
CONSTRAINTS = "/opt/waybill-constraints.txt"
PIP_CONFIG = "/pipconfig.txt"


def add_project_config(command: Any) -> None:
    """`-c/--config`: the project's langgraph.json, as `langgraph build` takes it."""
    command.add_argument(
        "-c",
        "--config",
        type=Path,
        default=Path("langgraph.json"),
        help="the project's langgraph.json (default ./langgraph.json)",
    )


def add_image_commands(commands: Any) -> None:
    dockerfile = commands.add_parser(
        "dockerfile", help="write a Dockerfile for the project, from the Waybill image"
    )
    dockerfile.add_argument("save_path", type=Path, help="where to write the Dockerfile")
    build = commands.add_parser("build", help="build the project's image with docker")
    build.add_argument("-t", "--tag", required=True, help="the image's tag")
    build.add_argument("--platform", help="e.g. linux/amd64,linux/arm64")
    build.add_argument("--no-cache", action="store_true", help="docker build --no-cache")
    for command in (dockerfile, build):
        add_project_config(command)
        command.add_argument(
            "--base-image",
            default=DEFAULT_BASE_IMAGE,
            help=f"the Waybill image to start from (default {DEFAULT_BASE_IMAGE}, built "
            "from Waybill's repository: docker build -f deploy/Dockerfile -t waybill .)",
        )
        command.add_argument(
            "--wheel",
            type=Path,
            help="a Waybill wheel (make dist) inside the project's folder: the image "
            "starts from python:<version>-slim and installs it, no Waybill image needed",
        )


def run_image_command(args: argparse.Namespace) -> int:
    try:
        project = Project.load(args.config)
        if args.wheel is not None:
            text = dockerfile(project, python_image(project), wheel_install(project, args.wheel))
        else:
            text = dockerfile(project, args.base_image)
    except ProjectError as error:
        print(f"waybill {args.command}: {error}", file=sys.stderr)
        return 2
    if args.command == "dockerfile":
        args.save_path.write_text(text)
        print(f"waybill dockerfile: wrote {args.save_path} (build context: {project.root})")
        return 0
    return build(project, text, args)


def build(project: Project, text: str, args: argparse.Namespace) -> int:
    docker = shutil.which("docker")
    if docker is None:
        print("waybill build: docker is not on PATH", file=sys.stderr)
        return 1
    command = build_command(docker, project, args)
    print("waybill build:", shlex.join(command), flush=True)
    return subprocess.run(command, input=text.encode(), check=False).returncode


def build_command(docker: str, project: Project, args: argparse.Namespace) -> list[str]:
    """`docker build` with the Dockerfile on stdin and the project's folder as context."""
    command = [docker, "build", "-f", "-", "-t", args.tag]
    if args.platform:
        command += ["--platform", args.platform]
    if args.no_cache:
        command.append("--no-cache")
    return [*command, str(project.root)]


# ---- the Dockerfile -----------------------------------------------------------------


def dockerfile(project: Project, base_image: str, waybill_install: list[str] | None = None) -> str:
    """The project's image: from Waybill's image, or (`waybill_install`) from a plain
    Python image that installs Waybill's wheel first."""
    home = f"/deps/{project.root.name}"
    pip = pip_command(project)
    base = (
        []
        if waybill_install
        else [
            f"# {base_image} is Waybill's image; build it from Waybill's repository with",
            f"#   docker build -f deploy/Dockerfile -t {base_image} .",
            "# or pass --wheel dist/waybill-*.whl to start from python:<version>-slim instead.",
        ]
    )
    lines = [
        f"# Generated by `waybill dockerfile` from {project.manifest.name};",
        f"# build it with {project.root} as the context (`waybill build` does).",
        *base,
        f"FROM {base_image}",
        "USER root",
        *(waybill_install or []),
        *python_check(project),
        *dockerfile_lines(project),
        *pip_config(project),
        "# Waybill's own packages keep the versions the base image has.",
        f"RUN pip freeze --exclude-editable | grep -v ' @ ' > {CONSTRAINTS}",
        *pypi_installs(project, pip),
        f"COPY . {home}",
        *local_installs(project, pip, home),
        f"ENV WAYBILL_GRAPHS={home}/{project.manifest.name}",
        f"WORKDIR {home}",
        f"USER {IMAGE_UID}",
    ]
    return "\n".join(lines) + "\n"


def python_image(project: Project) -> str:
    """The official slim image of the project's `python_version` (default: 3.11)."""
    wanted = project.section("python_version") or "3.11"
    return f"python:{wanted}-slim"


def wheel_install(project: Project, wheel: Path) -> list[str]:
    """Waybill from its wheel, and the non-root user Waybill's own image has."""
    inside = context_path(project, str(wheel), "--wheel", file=True)
    user, group = IMAGE_UID.split(":")
    return [
        f"COPY {inside} /tmp/{Path(inside).name}",
        f"RUN pip install --no-cache-dir /tmp/{Path(inside).name} && rm /tmp/{Path(inside).name}",
        f"RUN groupadd --gid {group} waybill && useradd --uid {user} --gid {group} "
        "--create-home waybill",
        "ENV WAYBILL_HTTP_HOST=0.0.0.0 WAYBILL_DATA_DIR=/data",
        # /workspaces as in Waybill's image: a named volume mounted there (compose's
        # runner and delivery) takes this directory's owner, so the user can write it.
        f"RUN mkdir -p /data /workspaces && chown {IMAGE_UID} /data /workspaces",
        'CMD ["waybill", "up"]',
    ]


def pip_command(project: Project) -> str:
    prefix = f"PIP_CONFIG_FILE={PIP_CONFIG} " if project.section("pip_config_file") else ""
    return f"{prefix}pip install --no-cache-dir -c {CONSTRAINTS}"


def python_check(project: Project) -> list[str]:
    """The image's Python must be the one the project asks for: the build stops if not."""
    wanted = project.section("python_version")
    if wanted is None:
        return []
    if not isinstance(wanted, str) or wanted.count(".") != 1:
        raise ProjectError(f'python_version {wanted!r}: must be "3.X", e.g. "3.11"')
    script = (
        "import sys; v = '%d.%d' % sys.version_info[:2]; "
        f"sys.exit(0 if v == '{wanted}' else "
        f"'langgraph.json asks for Python {wanted}; the base image has Python ' + v)"
    )
    return [f"RUN {json.dumps(['python', '-c', script])}"]  # exec form: no shell quoting


def dockerfile_lines(project: Project) -> list[str]:
    lines = project.section("dockerfile_lines") or []
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ProjectError("dockerfile_lines: must be a list of strings")
    return list(lines)


def pip_config(project: Project) -> list[str]:
    config = project.section("pip_config_file")
    if config is None:
        return []
    return [f"COPY {context_path(project, str(config), 'pip_config_file', file=True)} {PIP_CONFIG}"]


def dependencies(project: Project) -> list[str]:
    found = project.section("dependencies") or []
    if not isinstance(found, list) or not all(isinstance(d, str) for d in found):
        raise ProjectError("dependencies: must be a list of strings")
    return list(found)


def pypi_installs(project: Project, pip: str) -> list[str]:
    specs = [d for d in dependencies(project) if not d.startswith(".")]
    return [f"RUN {pip} {shlex.join(specs)}"] if specs else []


def local_installs(project: Project, pip: str, home: str) -> list[str]:
    """A local dependency with a pyproject.toml or setup.py is installed as a
    package; one without is importable as it is (the runner puts it on its
    path), and its requirements.txt is installed."""
    lines = []
    for dependency in dependencies(project):
        if not dependency.startswith("."):
            continue
        relative = context_path(project, dependency, "dependencies")
        folder = project.root / relative
        inside = home if relative == "." else f"{home}/{relative}"
        if (folder / "pyproject.toml").is_file() or (folder / "setup.py").is_file():
            lines.append(f"RUN {pip} -e {inside}")
        elif (folder / "requirements.txt").is_file():
            lines.append(f"RUN {pip} -r {inside}/requirements.txt")
    return lines


def context_path(project: Project, location: str, key: str, file: bool = False) -> str:
    """`location` relative to the build context; outside it, or missing, is refused."""
    path = (project.root / location).resolve()
    if not path.is_relative_to(project.root):
        raise ProjectError(
            f"{key}: {location} is outside {project.root}, the build context; "
            "move it into the project's folder"
        )
    if not (path.is_file() if file else path.is_dir()):
        kind = "file" if file else "folder"
        raise ProjectError(f"{key}: {location} is not a {kind} ({path})")
    return path.relative_to(project.root).as_posix()
