"""Running Waybill as a deployment does: a service on Postgres with the container's
read-only root filesystem, and `waybill doctor` against a deployment's addresses."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

from tests.support.helpers import WAYBILL
from tests.support.stacks import free_port, fresh_postgres_database, metrics_url, scrape, stack_env
from waybill.common.launch import Stack, grpc_serving
from waybill.common.migrate import schema_of


def test_delivery_starts_on_postgres_with_a_read_only_data_dir_and_no_webhook_secret(
    tmp_path: Path,
) -> None:
    """In a pod the root filesystem is read-only and `webhook-secret` is optional:
    delivery must start without writing a key file into its data directory."""
    blocker = tmp_path / "read-only"
    blocker.write_text("")  # nothing can be made under a file, not even by root
    workspaces = tmp_path / "workspaces"  # the pod's one writable volume
    with fresh_postgres_database() as url:
        env = stack_env(blocker / "data", url, WAYBILL_WORKSPACES_DIR=str(workspaces))
        assert "WAYBILL_WEBHOOK_SECRET" not in {**os.environ, **env}
        stack = Stack(env=env, log_dir=str(tmp_path))
        try:
            stack.start(only=["delivery"])
            assert grpc_serving(stack.address_of("delivery"))
        finally:
            stack.stop()
    assert "not set: webhooks are signed with a key of this process" in (
        (tmp_path / "delivery.log").read_text()
    )
    assert not list(tmp_path.rglob("webhook.key"))


def waybill(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WAYBILL, *args],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_doctor_reports_a_deployments_health_versions_schemas_and_queue(stack: Stack) -> None:
    """`waybill doctor --cluster` from the deployment's addresses alone: each service
    SERVING with the version and schema it runs (its waybill_build_info), the queue."""
    done = waybill(stack, "--url", stack.url, "doctor", "--cluster")
    assert done.returncode == 0, done.stdout + done.stderr
    version = importlib.metadata.version("waybill")
    for service in ("admission", "runner", "journal", "delivery"):
        line = f"ok    {service:<19} {stack.address_of(service)} SERVING; version {version}"
        assert f"{line}, schema {schema_of(service).head()}\n" in done.stdout, done.stdout
    assert f"ok    gateway             {stack.url}/ok answered 200; version {version}" in (
        done.stdout
    )
    queued = scrape(metrics_url(stack, "admission"))["waybill_runs_queued"]
    assert f"ok    queue               {int(queued)} queued (waiting for a runner)" in done.stdout
    if stack.env.get("WAYBILL_DATABASE_URL"):  # the pod's view: the database is checked too
        assert f"ok    database admission  schema at {schema_of('admission').head()}" in (
            done.stdout
        )
    assert "all checks passed" in done.stdout


def test_doctor_fails_naming_a_service_it_cannot_read(stack: Stack) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/metrics"
    done = waybill(
        stack, "--url", stack.url, "doctor", "--cluster", "--metrics", f"journal={nowhere}"
    )
    assert done.returncode == 1, done.stdout
    assert f"FAIL  journal             {stack.address_of('journal')} SERVING; {nowhere}" in (
        done.stdout
    )
    assert "ok    admission" in done.stdout
    assert "1 check(s) failed" in done.stdout
