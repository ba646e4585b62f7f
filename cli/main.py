"""`waybill`: the command line.

    waybill new DIR [--template T]  write a new project (basic: no model; model: OpenAI)
    waybill up                      serve ./langgraph.json (or the built-in agent) locally
    waybill dev                     the same, restarted when the project's files change
    waybill dockerfile PATH         write a Dockerfile for the project (from the Waybill image)
    waybill build -t TAG            build the project's image with docker
    waybill compose > compose.yaml  a compose file serving the project (Postgres, Redis)
    waybill migrate                 bring every service's schema to this build's head
    waybill runs ls [--thread T]    runs, newest first
    waybill runs show T R           one run, as JSON
    waybill runs cancel T R         cancel a run (--wait, --action rollback)
    waybill runs tail T R           follow a run's events to its end
    waybill threads ls              threads, most recently updated first
    waybill doctor                  check config, database, Redis and every service
    waybill doctor --cluster        a deployment: health, versions, schemas, queue depth
    waybill config reference        every setting and YAML key (--write/--check PAGE)

The API commands talk to the gateway (`--url`, default WAYBILL_URL or the
gateway's own WAYBILL_HTTP_HOST/PORT) with WAYBILL_API_KEY when it is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import MutableMapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from waybill.cli.api import CommandFailed, Gateway
from waybill.cli.compose import add_compose_command
from waybill.cli.config_reference import add_config_command
from waybill.cli.doctor import run_cluster_doctor, run_doctor
from waybill.cli.image import add_image_commands
from waybill.cli.new import add_new_command, new_project
from waybill.cli.tail import Progress, follow
from waybill.common.settings import Settings


def waybill_version() -> str:
    """The installed distribution's version (a source tree without one: "unknown")."""
    try:
        return metadata.version("waybill")
    except metadata.PackageNotFoundError:
        return "unknown"


def default_url(settings: Settings) -> str:
    if os.environ.get("WAYBILL_URL"):
        return os.environ["WAYBILL_URL"]
    host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "::") else settings.http_host
    return f"http://{host}:{settings.http_port}"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="waybill",
        description=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"waybill {waybill_version()}")
    top.add_argument("--url", help="the gateway (default: WAYBILL_URL or WAYBILL_HTTP_HOST:PORT)")
    top.add_argument("--api-key", help="API key (default: WAYBILL_API_KEY)")
    commands = top.add_subparsers(dest="command", required=True, metavar="command")
    up = commands.add_parser(
        "up", help="start the embedded default, every service as a local process"
    )
    add_project_options(up)
    dev = commands.add_parser(
        "dev", help="the embedded default, restarted when a file of the project changes"
    )
    add_project_options(dev)
    dev.add_argument(
        "--debounce",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="changes closer together than this restart once (default 0.5)",
    )
    dev.add_argument("--no-reload", action="store_true", help="do not watch: as `waybill up`")
    add_image_commands(commands)
    add_compose_command(commands)
    add_new_command(commands)
    add_config_command(commands)
    migrate = commands.add_parser(
        "migrate", help="bring every service's schema to this build's head"
    )
    migrate.add_argument(
        "--wait", action="store_true", help="migrate nothing: wait until every schema is migrated"
    )
    doctor = commands.add_parser("doctor", help="check config, database, Redis and every service")
    doctor.add_argument(
        "--cluster",
        action="store_true",
        help="a deployment: each service's health, version and schema, and the queue depth",
    )
    doctor.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="SERVICE=URL",
        help="where a service's /metrics is (default: its address, metrics port)",
    )

    runs = commands.add_parser("runs", help="list, show, cancel and follow runs")
    run_commands = runs.add_subparsers(dest="action", required=True, metavar="action")
    ls = run_commands.add_parser("ls", help="runs, newest first")
    ls.add_argument("--thread", help="only this thread's runs (default: recent threads')")
    ls.add_argument(
        "--status", choices=["pending", "running", "success", "error", "timeout", "interrupted"]
    )
    ls.add_argument("--limit", type=int, default=20)
    ls.add_argument("--json", action="store_true", help="print JSON")
    for name, text in (("show", "one run, as JSON"), ("tail", "follow a run's events")):
        one = run_commands.add_parser(name, help=text)
        one.add_argument("thread_id")
        one.add_argument("run_id")
    cancel = run_commands.add_parser("cancel", help="cancel a run")
    cancel.add_argument("thread_id")
    cancel.add_argument("run_id")
    cancel.add_argument("--wait", action="store_true", help="return once the run has ended")
    cancel.add_argument(
        "--action", dest="cancel_action", choices=["interrupt", "rollback"], default="interrupt"
    )

    threads = commands.add_parser("threads", help="list threads")
    thread_commands = threads.add_subparsers(dest="action", required=True, metavar="action")
    tls = thread_commands.add_parser("ls", help="threads, most recently updated first")
    tls.add_argument("--status", choices=["idle", "busy", "interrupted", "error"])
    tls.add_argument("--limit", type=int, default=20)
    tls.add_argument("--json", action="store_true", help="print JSON")
    return top


def add_project_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--config", help="the project's langgraph.json (sets WAYBILL_GRAPHS)", type=Path
    )
    command.add_argument("--port", type=int, help="the gateway's port (WAYBILL_HTTP_PORT)")
    command.add_argument("--host", help="the gateway's address (WAYBILL_HTTP_HOST)")


def apply_project_options(args: argparse.Namespace, default_config: Path | None) -> None:
    """`--config`, `--port`, `--host` become the settings every service reads. A
    project served shows its own graphs only: the built-in lead agent stays out of
    `assistants.search` and Studio unless WAYBILL_BUILTIN_GRAPHS asks for it."""
    config = args.config or default_config
    if config is not None:
        os.environ["WAYBILL_GRAPHS"] = str(config.resolve())
    if os.environ.get("WAYBILL_GRAPHS"):
        os.environ.setdefault("WAYBILL_BUILTIN_GRAPHS", "false")
    if args.port is not None:
        os.environ["WAYBILL_HTTP_PORT"] = str(args.port)
    if args.host:
        os.environ["WAYBILL_HTTP_HOST"] = args.host


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [header, *rows]
    return "\n".join(
        "  ".join(
            str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)
        ).rstrip()
        for line in lines
    )


def list_runs(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    if args.thread:
        thread_ids = [args.thread]
    else:
        recent = gateway.post(
            "/threads/search",
            json={"limit": args.limit, "sort_by": "updated_at", "sort_order": "desc"},
        )
        thread_ids = [thread["thread_id"] for thread in recent]
    runs = [run for tid in thread_ids for run in gateway.get(f"/threads/{tid}/runs", params=params)]
    runs.sort(key=lambda run: str(run.get("created_at")), reverse=True)
    return runs[: args.limit]


def runs_command(gateway: Gateway, args: argparse.Namespace) -> int:
    if args.action == "ls":
        runs = list_runs(gateway, args)
        if args.json:
            print(json.dumps(runs, indent=2))
            return 0
        rows = [
            [r["run_id"], r["thread_id"], r["status"], r["assistant_id"], str(r["created_at"])]
            for r in runs
        ]
        print(table(rows, ["RUN", "THREAD", "STATUS", "ASSISTANT", "CREATED"]))
        return 0
    path = f"/threads/{args.thread_id}/runs/{args.run_id}"
    if args.action == "show":
        print(json.dumps(gateway.get(path), indent=2))
        return 0
    if args.action == "cancel":
        gateway.request(
            "POST",
            f"{path}/cancel",
            params={"wait": str(args.wait).lower(), "action": args.cancel_action},
            timeout=None if args.wait else 30,
        )
        status = gateway.get(path)["status"]
        print(f"run {args.run_id}: cancel {'done' if args.wait else 'requested'}; {status}")
        return 0
    progress = Progress(sys.stdout, sys.stdout.isatty(), args.run_id)
    status = follow(gateway, args.thread_id, args.run_id, progress)
    progress.finish(status)
    return 0 if status == "success" else 1


def threads_command(gateway: Gateway, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"limit": args.limit, "sort_by": "updated_at", "sort_order": "desc"}
    if args.status:
        body["status"] = args.status
    threads = gateway.post("/threads/search", json=body)
    if args.json:
        print(json.dumps(threads, indent=2))
        return 0
    rows = [
        [t["thread_id"], t["status"], str(t["updated_at"]), json.dumps(t.get("metadata") or {})]
        for t in threads
    ]
    print(table(rows, ["THREAD", "STATUS", "UPDATED", "METADATA"]))
    return 0


def open_to_studio(env: MutableMapping[str, str]) -> None:
    """`waybill dev` answers private-network preflights unless told otherwise, as
    `langgraph dev` does, so that Studio's page can call the local gateway."""
    env.setdefault("WAYBILL_ALLOW_PRIVATE_NETWORK", "true")


def show_tracebacks(env: MutableMapping[str, str]) -> None:
    """Under `waybill dev` a failed run's `error` event carries its traceback."""
    env.setdefault("WAYBILL_ERROR_TRACEBACKS", "true")


def start_stack(args: argparse.Namespace) -> int:
    # `up` and `dev` serve ./langgraph.json by default, as `langgraph dev` does.
    here = Path("langgraph.json")
    default = here if here.is_file() and not os.environ.get("WAYBILL_GRAPHS") else None
    apply_project_options(args, default)
    if args.command == "dev":
        open_to_studio(os.environ)
        show_tracebacks(os.environ)
    if args.command == "dev" and not args.no_reload:
        from waybill.cli.dev import main as dev

        return dev(args.debounce)
    from waybill.common.launch import main as launch

    launch()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("up", "dev"):
        return start_stack(args)
    if args.command == "new":
        return new_project(args.path, args.template)
    if args.command in ("dockerfile", "build"):
        from waybill.cli.image import run_image_command

        return run_image_command(args)
    if args.command == "compose":
        from waybill.cli.compose import run_compose_command

        return run_compose_command(args)
    if args.command == "config":
        from waybill.cli.config_reference import run_config_command

        return run_config_command(args)
    if args.command == "migrate":
        from waybill.common.migrate import main as migrate

        return migrate(["--wait"] if args.wait else [])
    settings = Settings()
    url = args.url or default_url(settings)
    if args.command == "doctor" and args.cluster:
        where = dict(item.split("=", 1) for item in args.metrics)
        return run_cluster_doctor(settings, url, where, sys.stdout)
    if args.command == "doctor":
        return run_doctor(settings, url, sys.stdout)
    gateway = Gateway(url, args.api_key or settings.api_key)
    try:
        if args.command == "runs":
            return runs_command(gateway, args)
        return threads_command(gateway, args)
    except CommandFailed as failure:
        print(f"waybill: {failure}", file=sys.stderr)
        return 1
    finally:
        gateway.close()
