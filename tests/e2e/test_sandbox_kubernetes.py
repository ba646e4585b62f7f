"""The Kubernetes sandbox provider, as far as this machine allows: no cluster.

The pod it would create validates strictly against the Kubernetes JSON schemas
(the oldest version we claim and the newest the validator ships), and a run
through the gateway drives its API calls against a fake API server on
loopback (tests/support/fake_kubernetes.py): the pod created, polled until running,
a command run through `pods/exec` (the WebSocket channel protocol), the pod
deleted at the run's end, every call with the service account's token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from langgraph_sdk.client import LangGraphClient

from tests.support.fake_kubernetes import FakeKubernetes, running_fake_kubernetes
from tests.support.helpers import after_its_end, tools
from tests.support.stacks import stack_in_mode
from waybill.common.config_file import KubernetesSandboxSpec, SandboxSpec
from waybill.common.launch import Stack
from waybill.services.runner.sandbox.kubernetes import exit_code_of, limited, pod_manifest
from waybill.services.runner.sandbox.provider import LeaseRequest, Limits

TOKEN = "sandbox-test-token"
KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def a_pod(network: bool = False) -> dict[str, Any]:
    request = LeaseRequest("run-1", 1, "4b5e0a54-0b8f-4e0e-9d3c-7d6a4b0f2a11", Path("/w"))
    limits = Limits.of(SandboxSpec(provider="kubernetes", network=network))
    return pod_manifest("waybill-sandbox-abc", request, KubernetesSandboxSpec(), limits, 3600.0)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("network", [False, True])
def test_the_pod_validates_strictly(version: str, network: bool) -> None:
    kubernetes_validate.validate(a_pod(network), version, strict=True)


def test_the_pod_sees_its_workspace_only_and_holds_no_privilege() -> None:
    pod = a_pod()
    spec = pod["spec"]
    [container] = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/workspace", "/tmp"]
    assert (
        container["volumeMounts"][0]["subPath"]
        == pod["metadata"]["labels"]["waybill.dev/thread-id"]
    )
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert pod["metadata"]["labels"]["waybill.dev/sandbox-network"] == "none"
    assert a_pod(network=True)["metadata"]["labels"]["waybill.dev/sandbox-network"] == "allowed"
    # A 422 from the API server for a pod the schema refuses: the fake does as it does.
    broken = {**pod, "spec": {**spec, "restartPolicy": "Sometimes", "replicas": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_a_command_runs_under_its_limits_and_its_exit_code_is_read() -> None:
    limits = Limits.of(SandboxSpec(cpu_seconds=3, memory_mb=64, timeout_seconds=9))
    assert limited(["bash", "-c", "ls"], limits)[:5] == ["timeout", "-s", "KILL", "9", "prlimit"]
    assert "--cpu=3:4" in limited(["ls"], limits) and f"--as={64 << 20}" in limited(["ls"], limits)
    assert exit_code_of({"status": "Success"}) == 0
    failure = {"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    assert exit_code_of(failure) == 3


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeKubernetes, Path]]:
    data_dir = tmp_path_factory.mktemp("stack-sandbox-kubernetes")
    with running_fake_kubernetes(data_dir / "workspaces") as served:
        yield served, data_dir


@pytest.fixture(scope="module")
def stack(fake: tuple[FakeKubernetes, Path]) -> Iterator[Stack]:
    served, data_dir = fake
    token = data_dir / "token"
    token.write_text(TOKEN + "\n")
    kubernetes = {"api_url": served.url, "token_file": str(token), "ca_file": None}
    kubernetes |= {"namespace": "sandboxes", "poll_seconds": 0.05}
    config = data_dir / "waybill.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sandbox": {
                    "provider": "kubernetes",
                    "kubernetes": kubernetes,
                    "allow_without_auth": True,  # this stack runs with auth off
                }
            }
        )
    )
    with stack_in_mode("sqlite", data_dir, WAYBILL_CONFIG=str(config)) as running:
        yield running


@pytest.fixture
def client_timeout() -> float:
    return 60  # conftest's `client`, longer: a run here waits on sandboxed commands


async def test_a_run_leases_a_pod_runs_its_commands_there_and_deletes_it(
    client: LangGraphClient, stack: Stack, fake: tuple[FakeKubernetes, Path]
) -> None:
    served, _ = fake
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(
        ("bash", {"command": "echo from the pod; exit 3"}),
        ("python", {"code": "print(6 * 7)"}),
    )
    run = await client.runs.create(tid, "lead_agent", input=script)
    run = await after_its_end(client, tid, run["run_id"])

    assert run["status"] == "success"
    state = await client.threads.get_state(tid)
    bash, python = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    assert bash["content"] == "exit code 3\nstdout:\nfrom the pod\n"
    assert python["content"] == "exit code 0\nstdout:\n42\n"

    [pod] = served.created
    name = pod["metadata"]["name"]
    assert pod["metadata"]["labels"]["waybill.dev/run-id"] == run["run_id"]
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["subPath"] == tid
    path = f"/api/v1/namespaces/sandboxes/pods/{name}"
    assert served.calls == [
        ("POST", "/api/v1/namespaces/sandboxes/pods", f"Bearer {TOKEN}"),
        ("GET", path, f"Bearer {TOKEN}"),  # Pending
        ("GET", path, f"Bearer {TOKEN}"),  # Running
        ("EXEC", f"{path}/exec", f"Bearer {TOKEN}"),
        ("EXEC", f"{path}/exec", f"Bearer {TOKEN}"),
        ("DELETE", path, f"Bearer {TOKEN}"),
    ]
    assert served.pods == {}  # released with the run
    assert served.commands[0][:4] == ["timeout", "-s", "KILL", "120"]
    assert served.commands[0][-3:] == ["/bin/bash", "-c", "echo from the pod; exit 3"]

    async with httpx.AsyncClient(base_url=stack.url) as http:
        reply = await http.get(
            f"/threads/{tid}/runs/{run['run_id']}/events", params={"type": "sandbox"}
        )
    leased, released = [event["data"] for event in reply.json()]
    assert leased["provider"] == "kubernetes" and leased["sandbox_id"] == name
    assert "network-policy" in leased["confinement"] and "non-root" in leased["confinement"]
    assert released == {"action": "released", "sandbox_id": name, "reason": "success"}
