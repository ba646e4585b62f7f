"""`waybill doctor`: is this installation able to work? One line per check
(`ok`, `FAIL` or `skip`, what was checked, what was found) and a non-zero exit
when any check fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import grpc
import httpx

from waybill.common.extras import MissingExtra, needs_redis
from waybill.common.grpc_channels import blocking_channel
from waybill.common.launch import grpc_serving
from waybill.common.migrate import UPGRADES, schema_of, schema_verdict
from waybill.common.settings import Settings
from waybill.v1 import channels_pb2, channels_pb2_grpc

GRPC_SERVICES = ("admission", "runner", "journal", "delivery")


@dataclass(frozen=True)
class Finding:
    verdict: str  # ok | FAIL | skip
    check: str
    detail: str


def check_config(settings: Settings) -> list[Finding]:
    """The YAML config, the graphs manifest and the auth setup can be read."""
    found = []
    try:
        models = [model.name for model in settings.models()]
        settings.principals()
        settings.prices()
        where = str(settings.config) if settings.config else "built-in defaults"
        found.append(Finding("ok", "config", f"{where}; models: {', '.join(models)}"))
    except Exception as error:  # any broken config is the finding itself
        found.append(Finding("FAIL", "config", str(error)))  # it names the file
    try:
        graphs = sorted(settings.graph_specs())
        found.append(Finding("ok", "graphs", ", ".join(graphs)))
    except Exception as error:
        found.append(Finding("FAIL", "graphs", f"{settings.graphs}: {error}"))
    if found[0].verdict == "ok":  # auth is read from the config
        auth = "on" if settings.auth_enabled else "off (every request is the one local user)"
        found.append(Finding("ok", "auth", auth))
        found.append(quota_finding(settings))
    return found


def quota_finding(settings: Settings) -> Finding:
    """What the YAML `quotas` section limits (read already: a bad one failed `config`)."""
    quotas = settings.quotas()
    parts = []
    default = quotas.default.model_dump(exclude_none=True)
    if default:
        parts.append("default " + ", ".join(f"{key} {value}" for key, value in default.items()))
    if quotas.roles or quotas.principals:
        parts.append(f"{len(quotas.roles)} role(s), {len(quotas.principals)} principal(s) own")
    if default or quotas.roles or quotas.principals:
        parts.append(f"day resets {quotas.reset_hour_utc:02d}:00 UTC")
    if quotas.gateway.requests_per_second is not None:
        parts.append(f"{quotas.gateway.requests_per_second:g} requests/s per key per gateway")
    budget = quotas.run.model_dump(exclude_none=True)
    if budget:
        parts.append("run budget " + ", ".join(f"{key} {value:g}" for key, value in budget.items()))
    if not parts:
        return Finding("skip", "quotas", "none configured (no limits)")
    return Finding("ok", "quotas", "; ".join(parts))


async def _schema_findings(settings: Settings) -> list[Finding]:
    found = []
    for service in UPGRADES:
        check = f"database {service}"
        try:
            verdict = await schema_verdict(settings, service)
        except Exception as error:  # unreachable database, bad URL, no such file
            found.append(Finding("FAIL", check, f"{type(error).__name__}: {error}"))
            continue
        if verdict is None:
            found.append(Finding("ok", check, f"schema at {schema_of(service).head()}"))
        else:
            found.append(Finding("FAIL", check, verdict))
    return found


def check_database(settings: Settings) -> list[Finding]:
    """Each service's database answers and its schema is at this build's head."""
    kind = "Postgres" if settings.database_url else f"SQLite under {settings.data_dir}"
    if not settings.database_url and not settings.data_dir.exists():
        return [Finding("FAIL", "database", f"{kind}: no data directory (run `waybill migrate`)")]
    try:
        schemas = asyncio.run(_schema_findings(settings))
    except MissingExtra as missing:  # a Postgres URL without the `postgres` extra
        return [Finding("FAIL", "database", str(missing))]
    return [Finding("ok", "database", kind), *schemas]


def check_redis(settings: Settings) -> list[Finding]:
    if not settings.redis_url:
        return [Finding("skip", "redis", "not configured (in-memory fan-out, one journal)")]
    try:
        with needs_redis():
            import redis
    except MissingExtra as missing:
        return [Finding("FAIL", "redis", str(missing))]

    client = redis.Redis.from_url(settings.redis_url, socket_timeout=3, socket_connect_timeout=3)
    try:
        client.ping()
        return [Finding("ok", "redis", f"{_without_password(settings.redis_url)} answers PING")]
    except redis.RedisError as error:
        return [Finding("FAIL", "redis", f"{_without_password(settings.redis_url)}: {error}")]
    finally:
        client.close()


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest


def check_services(settings: Settings, gateway_url: str) -> list[Finding]:
    """Each gRPC service answers grpc.health.v1 SERVING; the gateway answers /ok."""
    found = []
    for service in GRPC_SERVICES:
        address = str(getattr(settings, f"{service}_addr"))
        if grpc_serving(address, settings):
            found.append(Finding("ok", service, f"{address} SERVING"))
        else:
            found.append(Finding("FAIL", service, f"{address} not serving (grpc.health.v1)"))
    try:
        reply = httpx.get(f"{gateway_url}/ok", timeout=3)
        verdict = "ok" if reply.status_code == 200 else "FAIL"
        found.append(Finding(verdict, "gateway", f"{gateway_url}/ok answered {reply.status_code}"))
    except httpx.HTTPError as error:
        found.append(Finding("FAIL", "gateway", f"{gateway_url}/ok: {error}"))
    return found


def check_channels(settings: Settings) -> list[Finding]:
    """Each chat channel's platform answers and takes its credentials, as the
    delivery process (which holds them) asks it (`Channels.Check`)."""
    try:
        configured = bool(settings.config_file().channels)
    except Exception:  # a broken config is check_config's finding
        return []
    if not configured:
        return [Finding("skip", "channels", "none configured")]
    with blocking_channel(settings.delivery_addr, settings) as channel:
        try:
            reply = channels_pb2_grpc.ChannelsStub(channel).Check(
                channels_pb2.ChannelCheckRequest(),
                timeout=settings.channel_http_timeout_seconds + 5,
            )
        except grpc.RpcError as error:
            return [Finding("FAIL", "channels", f"delivery did not answer: {error.code().name}")]
    return [
        Finding(
            "ok" if found.ok else "FAIL",
            f"channel {found.channel}",
            f"{found.platform}: {found.detail}",
        )
        for found in reply.channels
    ]


def check_sandbox(settings: Settings) -> list[Finding]:
    """The local sandbox's confinement holds on this machine, as this user (run the
    doctor as the runner's user: root and another user are allowed different things)."""
    try:
        spec = settings.sandbox()
    except Exception:  # a broken config is check_config's finding
        return []
    if spec is None:
        return [Finding("skip", "sandbox", "not configured (no `bash`/`python` tools)")]
    if spec.provider != "local":
        return [Finding("skip", "sandbox", f"{spec.provider} provider (checked at its lease)")]
    from waybill.services.runner.sandbox.confinement import check
    from waybill.services.runner.sandbox.provider import Limits

    refused, not_enforced = check(Limits.of(spec))
    if refused is not None:
        return [Finding("FAIL", "sandbox", f"confinement {spec.confinement}: {refused}")]
    if spec.confinement == "unconfined":
        said = "unconfined (asked for): commands read host files and reach the network"
        return [Finding("ok", "sandbox", said)]
    if not_enforced:
        said = f"best_effort: not enforced: {', '.join(not_enforced)}"
        return [Finding("ok", "sandbox", said)]
    return [Finding("ok", "sandbox", f"local, {spec.confinement}: bubblewrap, seccomp, a cgroup")]


def run_doctor(settings: Settings, gateway_url: str, out: TextIO) -> int:
    checks: list[Callable[[], list[Finding]]] = [
        lambda: check_config(settings),
        lambda: check_sandbox(settings),
        lambda: check_database(settings),
        lambda: check_redis(settings),
        lambda: check_services(settings, gateway_url),
        lambda: check_channels(settings),
    ]
    return _report(checks, out)


def _report(checks: list[Callable[[], list[Finding]]], out: TextIO) -> int:
    failed = 0
    for check in checks:
        for finding in check():
            failed += finding.verdict == "FAIL"
            out.write(f"{finding.verdict:<5} {finding.check:<19} {finding.detail}\n")
            out.flush()
    out.write("all checks passed\n" if not failed else f"{failed} check(s) failed\n")
    return 1 if failed else 0


# ---- a deployment, from its addresses (`waybill doctor --cluster`) ----------------------

# The deploy/ convention: a gRPC service's metrics port is its gRPC port plus 20.
METRICS_PORT_OFFSET = 20


def metrics_url(settings: Settings, service: str) -> str:
    """Where a service serves /metrics: its address's host, on its metrics port
    (`WAYBILL_<SERVICE>_METRICS_PORT`, else the gRPC port + 20 as deploy/ sets it)."""
    address = str(getattr(settings, f"{service}_addr")).rpartition("///")[2]
    host, _, port = address.rpartition(":")
    metrics_port = getattr(settings, f"{service}_metrics_port") or int(port) + METRICS_PORT_OFFSET
    return f"http://{host}:{metrics_port}/metrics"


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """One /metrics page: each series' samples, as (labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return series


def _build(series: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, str]:
    [(labels, _), *_] = series.get("waybill_build_info") or [({}, 0.0)]
    return labels


def check_deployment(
    settings: Settings, gateway_url: str, metrics_urls: dict[str, str]
) -> list[Finding]:
    """Each service's health (gRPC health over the services' TLS, the gateway's /ok),
    the version and schema revision it runs (its `waybill_build_info`), and the queue
    depth admission reports; one version across the deployment."""
    found, versions = [], set()
    admission_series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for service in GRPC_SERVICES:
        address = str(getattr(settings, f"{service}_addr"))
        health = "SERVING" if grpc_serving(address, settings) else "not serving (grpc.health.v1)"
        url = metrics_urls.get(service) or metrics_url(settings, service)
        try:
            series = scrape(url)
        except httpx.HTTPError as error:
            found.append(Finding("FAIL", service, f"{address} {health}; {url}: {error}"))
            continue
        build = _build(series)
        versions.add(build.get("version", "?"))
        if service == "admission":
            admission_series = series
        verdict = "ok" if health == "SERVING" else "FAIL"
        detail = f"{address} {health}; version {build.get('version', '?')}"
        found.append(Finding(verdict, service, f"{detail}, schema {build.get('schema', '?')}"))
    found.append(_gateway_finding(gateway_url, metrics_urls.get("gateway"), versions))
    found.append(_queue_finding(admission_series))
    if len(versions) > 1:
        found.append(Finding("FAIL", "versions", f"mixed: {', '.join(sorted(versions))}"))
    return found


def _gateway_finding(gateway_url: str, url: str | None, versions: set[str]) -> Finding:
    try:
        reply = httpx.get(f"{gateway_url}/ok", timeout=3)
        build = _build(scrape(url or f"{gateway_url}/metrics"))
    except httpx.HTTPError as error:
        return Finding("FAIL", "gateway", f"{gateway_url}: {error}")
    versions.add(build.get("version", "?"))
    verdict = "ok" if reply.status_code == 200 else "FAIL"
    detail = f"{gateway_url}/ok answered {reply.status_code}; version {build.get('version', '?')}"
    return Finding(verdict, "gateway", detail)


def _queue_finding(series: dict[str, list[tuple[dict[str, str], float]]]) -> Finding:
    queued, running = series.get("waybill_runs_queued"), series.get("waybill_runs_running")
    if not queued or not running:
        return Finding("FAIL", "queue", "admission reported no waybill_runs_queued")
    detail = f"{int(queued[0][1])} queued (waiting for a runner), {int(running[0][1])} running"
    return Finding("ok", "queue", detail)


def run_cluster_doctor(
    settings: Settings, gateway_url: str, metrics_urls: dict[str, str], out: TextIO
) -> int:
    """`waybill doctor --cluster`: the deployment's services, from their addresses;
    the database schemas too when this process has the database URL (in a pod)."""
    checks: list[Callable[[], list[Finding]]] = [
        lambda: check_config(settings),
        lambda: check_deployment(settings, gateway_url, metrics_urls),
    ]
    if settings.database_url:
        checks.insert(1, lambda: check_database(settings))
    return _report(checks, out)
