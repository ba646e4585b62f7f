"""The embedded default: every service as a local process, one command.

`python -m waybill.common.launch` (what `make run` runs) migrates the schemas, starts
the five processes, waits until each answers its health check, prints the URL,
and stops them all on Ctrl-C. If one dies, it says which and stops the rest. Tests use `Stack`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from waybill.common.grpc_channels import blocking_channel
from waybill.common.platform_env import PLATFORM_NAMES
from waybill.common.ports import (
    PORT_IN_USE_EXIT_CODE,
    PortInUse,
    embedded_grpc_addresses,
    http_port_free,
)
from waybill.common.service_token import launcher_token
from waybill.common.settings import Settings

# `-P`: the working directory stays off each process's `sys.path`, so a project's
# own top-level packages (`common`, `services`) never meet Waybill's folders.
PYTHON = [sys.executable, "-P"]

# LangGraph Studio's page, pointed at a local server with `?baseUrl=`.
STUDIO_URL = "https://smith.langchain.com/studio/"

# Start order: what a service needs is started before it.
SERVICES = {
    "journal": "waybill.services.journal.server",
    "delivery": "waybill.services.delivery.server",
    "admission": "waybill.services.admission.server",
    "runner": "waybill.services.runner.server",
    "gateway": "waybill.gateway.server",
}


def grpc_serving(address: str, settings: Settings | None = None) -> bool:
    """Whether the service at `address` reports SERVING (over TLS when `settings`
    configure it; plaintext otherwise)."""
    with blocking_channel(address, settings) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _http_ok(url: str, serving_runs: bool = True) -> bool:
    """The gateway's `/ok` says 200 (it can serve a run); or, with `serving_runs`
    false (a stack started without a runner), that it answers at all."""
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=1.0) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError as refusal:
        return not serving_runs and refusal.code == 503
    except OSError:
        return False


@dataclass
class Stack:
    """The five processes of one Waybill installation."""

    env: Mapping[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    log_dir: str | None = None

    @property
    def settings(self) -> Settings:
        overrides = {
            k[len("WAYBILL_") :].lower(): v for k, v in self.env.items() if k.startswith("WAYBILL_")
        }
        return Settings.model_validate(overrides)

    @property
    def url(self) -> str:
        settings = self.settings
        return f"http://{settings.http_host}:{settings.http_port}"

    def start(self, only: list[str] | None = None) -> None:
        """The services in order, the gateway last, once the rest are ready: its `/ok`
        says 200 only when a run can be served."""
        self.migrate()
        wanted = [name for name in SERVICES if only is None or name in only]
        backends = [name for name in wanted if name != "gateway"]
        for name in backends:
            self.start_one(name, SERVICES[name])
        self.wait_ready(backends)
        if "gateway" in wanted:
            self.start_one("gateway", SERVICES["gateway"])
            # Without every service, no run can be served: the gateway answering is enough.
            self.wait_ready(["gateway"], serving_runs=len(wanted) == len(SERVICES))

    def migrate(self) -> None:
        """The deploy's one migration step, before any service starts (they only
        check their schema). Its output goes to `migrate.log` with a log dir."""
        output = None
        if self.log_dir:
            output = open(os.path.join(self.log_dir, "migrate.log"), "ab")  # noqa: SIM115
        try:
            code = subprocess.call(
                [*PYTHON, "-m", "waybill.common.migrate"],
                env={**os.environ, **self.env},
                stdout=output,
                stderr=subprocess.STDOUT if output else None,
            )
        finally:
            if output is not None:
                output.close()
        if code != 0:
            raise RuntimeError(f"migrations failed (exit code {code}){self._last_words('migrate')}")

    def start_one(
        self, name: str, module: str | None = None, extra_env: Mapping[str, str] | None = None
    ) -> None:
        """Start one process; `name` may be a second copy (e.g. "runner-2") of `module`.
        Every process is given the one service token (common/service_token.py)."""
        if not self.env.get("WAYBILL_SERVICE_TOKEN"):
            self.env = {**self.env, "WAYBILL_SERVICE_TOKEN": launcher_token(self.settings)}
        output = None
        if self.log_dir:
            output = open(os.path.join(self.log_dir, f"{name}.log"), "ab")  # noqa: SIM115
        self.processes[name] = subprocess.Popen(
            [*PYTHON, "-m", module or SERVICES[name]],
            env={**os.environ, **self.env, **(extra_env or {})},
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
            # Its own process group: a terminal's Ctrl-C reaches the launcher alone,
            # which stops the services in order (`stop`), not all at once.
            process_group=0,
        )

    def address_of(self, name: str) -> str:
        return str(getattr(self.settings, f"{name}_addr"))

    def wait_ready(self, only: list[str] | None = None, serving_runs: bool = True) -> None:
        """Until each service is ready; the gateway is when its `/ok` says 200 (or, without
        `serving_runs`, when it answers: a stack without a runner serves no run)."""
        deadline = time.monotonic() + self.settings.startup_timeout_seconds
        waiting = [name for name in SERVICES if only is None or name in only]
        while waiting:
            self.raise_if_dead()
            name = waiting[0]
            ready = (
                _http_ok(self.url, serving_runs)
                if name == "gateway"
                else grpc_serving(self.address_of(name), self.settings)
            )
            if ready:
                waiting.pop(0)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not become ready")
            time.sleep(0.1)

    def dead(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.processes.items() if p.poll() is not None]

    def raise_if_dead(self) -> None:
        for name, code in self.dead():
            raise RuntimeError(f"{name} exited with code {code}{self._last_words(name)}")

    def _last_words(self, name: str) -> str:
        """The last line a dead process logged (its reason for refusing to start)."""
        if not self.log_dir:
            return ""  # its output went to the terminal
        try:
            with open(os.path.join(self.log_dir, f"{name}.log"), "rb") as output:
                lines = output.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1]}" if lines else ""

    def stop(self, timeout: float = 15.0) -> None:
        """Every process, in waves the reverse of the start order (the gateways, then
        the runners, …): a runner finishes or hands back its runs while admission,
        the journal and delivery still answer it, so nobody retries a peer that left."""
        deadline = time.monotonic() + timeout
        for wave in self._stop_waves():
            for process in wave:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in wave:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def _stop_waves(self) -> list[list[subprocess.Popen[bytes]]]:
        """The processes grouped by service ("runner-2" with "runner"), last started first."""
        order = list(SERVICES)
        waves: dict[int, list[subprocess.Popen[bytes]]] = {}
        for name, process in self.processes.items():
            service = name.split("-", 1)[0]
            rank = order.index(service) if service in order else len(order)
            waves.setdefault(rank, []).append(process)
        return [waves[rank] for rank in sorted(waves, reverse=True)]


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    """A supervisor's SIGTERM stops every service the way Ctrl-C does."""
    raise KeyboardInterrupt


def local_stack(environ: Mapping[str, str]) -> Stack:
    """The stack `waybill up` / `dev` start on this machine: the WAYBILL_ settings,
    and gRPC addresses of its own for those not given (see common/ports.py)."""
    env = {k: v for k, v in environ.items() if k.startswith("WAYBILL_")}
    for name, field_name in PLATFORM_NAMES.items():  # DATABASE_URI…, as the services read them
        if environ.get(name):
            env.setdefault(f"WAYBILL_{field_name.upper()}", environ[name])
    env.update(embedded_grpc_addresses(env))
    return Stack(env=env)


def refuse_busy_http_port(stack: Stack) -> None:
    """Said before any service starts: the gateway, last to start, would say it late."""
    settings = stack.settings
    if not http_port_free(settings.http_host, settings.http_port):
        busy = PortInUse(
            f"{settings.http_host}:{settings.http_port}", "WAYBILL_HTTP_PORT or --port"
        )
        print(f"waybill: {busy}", file=sys.stderr, flush=True)
        raise SystemExit(PORT_IN_USE_EXIT_CODE)


def ready_lines(url: str) -> list[str]:
    """Where to go once the stack is up: the API, the console, Studio and the docs."""
    local = url.replace("://0.0.0.0:", "://127.0.0.1:")
    return [
        f"waybill: ready at {local}  (Ctrl-C stops every service)",
        f"  API:     {local}",
        f"  Console: {local}/console/",
        f"  Studio:  {STUDIO_URL}?baseUrl={local}",
        f"  Docs:    {local}/docs",
    ]


def main() -> None:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    stack = local_stack(os.environ)
    settings = stack.settings
    refuse_busy_http_port(stack)
    if not settings.database_url:
        print(f"waybill: embedded mode, SQLite files under {settings.data_dir.resolve()}")
    try:
        stack.start()
        print("\n".join(ready_lines(stack.url)), flush=True)
        while True:
            time.sleep(0.5)
            for name, code in stack.dead():
                print(f"waybill: {name} exited with code {code}; stopping the others", flush=True)
                raise SystemExit(1)
    except KeyboardInterrupt:
        print("\nwaybill: stopping", flush=True)
    except RuntimeError as failure:  # a service refused to start: its reason, one line
        print(f"waybill: {failure}", file=sys.stderr, flush=True)
        busy = any(code == PORT_IN_USE_EXIT_CODE for _, code in stack.dead())
        raise SystemExit(PORT_IN_USE_EXIT_CODE if busy else 1) from None
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop
        stack.stop()


if __name__ == "__main__":
    main()
