"""Running Waybill as a deployment does: a service on Postgres with the container's
read-only root filesystem, and `waybill doctor` against a deployment's addresses."""

from __future__ import annotations

import os
from pathlib import Path

from tests.stacks import fresh_postgres_database, stack_env
from waybill.common.launch import Stack, grpc_serving


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
