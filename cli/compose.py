"""`waybill compose`: a Docker Compose file that serves the project.

    waybill compose [-c langgraph.json] [--wheel dist/waybill-*.whl] > compose.yaml
    docker compose up --build

The file builds the project's image from the Dockerfile `waybill dockerfile` writes
(inline, `build.dockerfile_inline`, so the two cannot differ), with the project's
folder as the context; runs `waybill migrate` once (a one-shot service every other
Waybill service waits for); then the journal, delivery, admission, the runner and
one gateway from that image, beside Postgres and Redis (each with a healthcheck,
started in that order by `depends_on` conditions). Every Waybill container gets the
project's `.env` (`env_file`) and, when the project has one, its `waybill.yaml`
mounted read-only as `WAYBILL_CONFIG`; `WAYBILL_GRAPHS` is the image's own (its copy
of `langgraph.json`). Only the gateway is published, on 127.0.0.1.

Paths in the file are relative to where it is written: `--output`'s folder, or the
current folder when it goes to stdout (so write it in the project's folder, or pass
`-o`).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values

from waybill.cli.image import (
    DEFAULT_BASE_IMAGE,
    add_project_config,
    dockerfile,
    python_image,
    wheel_install,
)
from waybill.common.project import Project, ProjectError

POSTGRES_URL = "postgresql+asyncpg://waybill:waybill@postgres:5432/waybill"
REDIS_URL = "redis://redis:6379/0"
CONFIG_INSIDE = "/etc/waybill/waybill.yaml"
WORKSPACES = "/workspaces"
TOKEN = "WAYBILL_SERVICE_TOKEN"

# Each gRPC service: its compose name, module and port. A container listens on its
# own entry (0.0.0.0:PORT) and dials every peer by service name (deploy/README.md).
GRPC: dict[str, tuple[str, int]] = {
    "admission": ("waybill.services.admission.server", 50151),
    "runner": ("waybill.services.runner.server", 50152),
    "journal": ("waybill.services.journal.server", 50153),
    "delivery": ("waybill.services.delivery.server", 50154),
}
GATEWAY_PORT = 8080

GRPC_PROBE = (
    "import sys, grpc; "
    "from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; "
    "r = g.HealthStub(grpc.insecure_channel(sys.argv[1]))"
    ".Check(h.HealthCheckRequest(), timeout=3); "
    "sys.exit(r.status != h.HealthCheckResponse.SERVING)"
)
HTTP_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3)"
TIMING = {"interval": "5s", "timeout": "5s", "retries": 5, "start_period": "30s"}


def add_compose_command(commands: Any) -> None:
    command = commands.add_parser(
        "compose", help="write a Docker Compose file serving the project (Postgres, Redis)"
    )
    add_project_config(command)
    command.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write here (default: stdout); paths in the file are relative to its folder",
    )
    command.add_argument(
        "--base-image",
        default=DEFAULT_BASE_IMAGE,
        help=f"the Waybill image to start from (default {DEFAULT_BASE_IMAGE})",
    )
    command.add_argument(
        "--wheel",
        type=Path,
        help="a Waybill wheel inside the project's folder: no Waybill image needed",
    )
    command.add_argument("-t", "--tag", help="the project image's name (default <folder>:latest)")
    command.add_argument(
        "--waybill-config",
        type=Path,
        help="the YAML config to mount as WAYBILL_CONFIG (default: the project's "
        "waybill.yaml, when there is one)",
    )
    command.add_argument(
        "--port", type=int, default=GATEWAY_PORT, help="the gateway's port on 127.0.0.1"
    )


def run_compose_command(args: argparse.Namespace) -> int:
    here = (args.output.parent if args.output else Path.cwd()).resolve()
    try:
        project = Project.load(args.config)
        text = compose_file(
            project,
            here,
            base_image=args.base_image,
            wheel=args.wheel,
            tag=args.tag,
            waybill_config=args.waybill_config,
            port=args.port,
        )
    except ProjectError as error:
        print(f"waybill compose: {error}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"waybill compose: wrote {args.output}", file=sys.stderr)
    return 0


def relative(path: Path, here: Path) -> str:
    """`path` as the compose file names it: relative to the file's folder."""
    found = os.path.relpath(path.resolve(), here)
    return found if found == "." or found.startswith(("./", "../")) else f"./{found}"


def env_file(project: Project) -> Path | None:
    """The project's `.env`: its `env` key when that names a file, else `./.env`."""
    named = project.env_file()
    path = named if named is not None else project.root / ".env"
    return path if path.is_file() else None


def config_file(project: Project, given: Path | None) -> Path | None:
    if given is not None:
        if not given.is_file():
            raise ProjectError(f"--waybill-config: {given} is not a file")
        return given.resolve()
    default = project.root / "waybill.yaml"
    return default if default.is_file() else None


def compose_model(
    project: Project,
    here: Path,
    *,
    base_image: str = DEFAULT_BASE_IMAGE,
    wheel: Path | None = None,
    tag: str | None = None,
    waybill_config: Path | None = None,
    port: int = GATEWAY_PORT,
    token: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The compose model, and the lines of the file's header comment."""
    if wheel is not None:
        image_text = dockerfile(project, python_image(project), wheel_install(project, wheel))
    else:
        image_text = dockerfile(project, base_image)
    name = re.sub(r"[^a-z0-9_-]", "-", project.root.name.lower()).strip("-_") or "project"
    image = tag or f"{name}:latest"
    dotenv = env_file(project)
    config = config_file(project, waybill_config)

    shared_env: dict[str, str] = {
        "WAYBILL_BUILTIN_GRAPHS": "false",  # the project's graphs only, as `waybill up`
        "WAYBILL_SHUTDOWN_GRACE_SECONDS": "10",
    }
    header = [
        f"Generated by `waybill compose` for {relative(project.manifest, here)}.",
        "  docker compose up --build -d",
        f"  curl http://127.0.0.1:{port}/ok",
        f"The image {image} is built from the project's folder with the Dockerfile",
        "`waybill dockerfile` writes (inline below); the same image serves Helm:",
        "  " + " ".join(f"--set image.{k}={v}" for k, v in helm_image(image).items()),
    ]
    if wheel is None:
        header += [
            f"It starts from {base_image}, Waybill's image: build that first, in Waybill's",
            f"repository: docker build -f deploy/Dockerfile -t {base_image} .",
            "(or write this file with --wheel dist/waybill-*.whl: no Waybill image needed).",
        ]
    in_dotenv = dotenv is not None and bool(dotenv_values(dotenv).get(TOKEN))
    if in_dotenv:
        header.append(f"{TOKEN}: from the project's .env (env_file), the same in every service.")
    else:
        shared_env[TOKEN] = token or secrets.token_urlsafe(32)
        header += [
            f"{TOKEN}: generated at random into this file (set it in the project's .env",
            "instead and write the file again to keep it out of here).",
        ]
    if config is not None:
        shared_env["WAYBILL_CONFIG"] = CONFIG_INSIDE
    header.append(
        "Development credentials for Postgres (user/password waybill): not for production."
    )

    def waybill_service(command: list[str], **extra: Any) -> dict[str, Any]:
        # Every one carries the same build (written once, an anchor), so that `up
        # --build` works for any subset; all but the first build are cache hits.
        service: dict[str, Any] = {"image": image, "build": build, "command": command}
        if dotenv is not None:
            service["env_file"] = [relative(dotenv, here)]
        service.update(extra)
        if config is not None:
            volumes = service.setdefault("volumes", [])
            volumes.append(f"{relative(config, here)}:{CONFIG_INSIDE}:ro")
        return service

    build = {
        "context": relative(project.root, here),
        # `$` is compose's interpolation: the Dockerfile's own `$` are escaped.
        "dockerfile_inline": image_text.replace("$", "$$"),
    }
    database = {**shared_env, "WAYBILL_DATABASE_URL": POSTGRES_URL, **peers()}
    after_migrate = {"migrate": {"condition": "service_completed_successfully"}}
    services: dict[str, Any] = {
        "postgres": {
            "image": "postgres:16",
            "restart": "unless-stopped",
            "environment": {
                "POSTGRES_USER": "waybill",
                "POSTGRES_PASSWORD": "waybill",
                "POSTGRES_DB": "waybill",
            },
            "volumes": ["postgres-data:/var/lib/postgresql/data"],
            "healthcheck": {
                "test": ["CMD", "pg_isready", "-h", "127.0.0.1", "-U", "waybill", "-d", "waybill"],
                **TIMING,
            },
        },
        "redis": {
            "image": "redis:7",
            "restart": "unless-stopped",
            "healthcheck": {"test": ["CMD", "redis-cli", "ping"], **TIMING},
        },
    }
    services["migrate"] = waybill_service(
        ["waybill", "migrate"],
        restart="no",
        environment=dict(database),
        depends_on={"postgres": {"condition": "service_healthy"}},
    )
    for service, needs in (
        ("journal", {"redis": {"condition": "service_healthy"}}),
        ("delivery", {}),
        ("admission", {}),
        (
            "runner",
            {
                peer: {"condition": "service_healthy"}
                for peer in ("admission", "journal", "delivery")
            },
        ),
    ):
        module, grpc_port = GRPC[service]
        environment = {**database, f"WAYBILL_{service.upper()}_ADDR": f"0.0.0.0:{grpc_port}"}
        extra: dict[str, Any] = {}
        if service == "journal":
            environment["WAYBILL_REDIS_URL"] = REDIS_URL
        if service in ("runner", "delivery"):
            environment["WAYBILL_WORKSPACES_DIR"] = WORKSPACES
            extra["volumes"] = [f"workspaces:{WORKSPACES}"]
        services[service] = waybill_service(
            ["python", "-m", module],
            restart="unless-stopped",
            stop_grace_period="30s" if service == "runner" else "20s",
            environment=environment,
            depends_on={**after_migrate, **needs},
            healthcheck={
                "test": ["CMD", "python", "-c", GRPC_PROBE, f"127.0.0.1:{grpc_port}"],
                **TIMING,
            },
            **extra,
        )
    services["gateway"] = waybill_service(
        ["python", "-m", "waybill.gateway.server"],
        restart="unless-stopped",
        stop_grace_period="20s",
        # The gateway needs its peers, not the database.
        environment={
            **shared_env,
            **{k: v for k, v in peers().items() if "DELIVERY" not in k},
            "WAYBILL_HTTP_HOST": "0.0.0.0",
            "WAYBILL_HTTP_PORT": str(GATEWAY_PORT),
        },
        ports=[f"127.0.0.1:{port}:{GATEWAY_PORT}"],
        depends_on={
            peer: {"condition": "service_healthy"} for peer in ("admission", "runner", "journal")
        },
        healthcheck={
            "test": ["CMD", "python", "-c", HTTP_PROBE, f"http://127.0.0.1:{GATEWAY_PORT}/ok"],
            **TIMING,
        },
    )
    model = {
        "name": name,
        "services": services,
        "volumes": {"postgres-data": {}, "workspaces": {}},
    }
    return model, header


def helm_image(image: str) -> dict[str, str]:
    """The chart's `image.repository` and `image.tag` naming `image`."""
    repository, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:  # no tag (a registry's port is not one)
        return {"repository": image, "tag": "latest"}
    return {"repository": repository, "tag": tag}


def peers() -> dict[str, str]:
    return {
        f"WAYBILL_{service.upper()}_ADDR": f"{service}:{port}"
        for service, (_, port) in GRPC.items()
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the inline Dockerfile) as literal blocks, readable; the
    shared build written once, as the anchor `build`, and nothing else aliased."""

    def ignore_aliases(self, data: Any) -> bool:
        return not (isinstance(data, dict) and "dockerfile_inline" in data)

    def generate_anchor(self, node: Any) -> str:
        return "build"


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def compose_file(project: Project, here: Path, **options: Any) -> str:
    model, header = compose_model(project, here, **options)
    comment = "".join(f"# {line}\n" for line in header)
    body = yaml.dump(model, Dumper=_Dumper, sort_keys=False, width=100)
    return comment + "\n" + body
