"""The Kubernetes sandbox provider: a pod per sandbox, commands by `exec`.

A lease creates a pod (`pod_manifest`) in the configured namespace and waits
until it runs; each command is a `pods/exec` call (the WebSocket channel
protocol, `v4.channel.k8s.io`: stdout on channel 1, stderr on 2, the exit
status on 3); the release deletes the pod. The pod mounts the thread's
workspace (a `subPath` of the workspaces claim) at `/workspace` and nothing
else; it runs as a non-root user without capabilities or privilege
escalation, on a read-only root with a small `/tmp`, without the service
account's token, and under CPU, memory and storage limits. Each command is
further limited by `prlimit` (CPU time, address space, processes, file size)
and `timeout`. Egress is cut by a NetworkPolicy selecting the label
`waybill.dev/sandbox-network: none` (docs/sandbox.md). `activeDeadlineSeconds`
ends a pod whose runner died before releasing it.

The runner's service account needs `create`, `get` and `delete` on `pods` and
`create` on `pods/exec` in that namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from waybill.common.config_file import KubernetesSandboxSpec
from waybill.services.runner.sandbox.provider import (
    SIGNAL_EXIT,
    WORKSPACE_MOUNT,
    ExecResult,
    LeaseRequest,
    Limits,
    Output,
    Sandbox,
    SandboxUnavailable,
    limit_hit,
)

CONTAINER = "sandbox"
CHANNEL_PROTOCOL = "v4.channel.k8s.io"
STDOUT, STDERR, STATUS = 1, 2, 3
SANDBOX_UID = 65532  # "nonroot" of distroless images; any uid without a name will do
TIMEOUT_EXIT = 124  # coreutils `timeout`: the command ran out of time
# The pod's own deadline, beyond the run's: a pod whose runner died ends anyway.
DEADLINE_MARGIN_SECONDS = 300


def pod_manifest(
    name: str,
    request: LeaseRequest,
    spec: KubernetesSandboxSpec,
    limits: Limits,
    run_timeout_seconds: float,
) -> dict[str, Any]:
    """The pod a lease creates (validated against the Kubernetes schemas in tests)."""
    memory = f"{limits.memory_bytes // (1024 * 1024)}Mi"
    deadline = int(run_timeout_seconds) + DEADLINE_MARGIN_SECONDS
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": {
                "app.kubernetes.io/name": "waybill-sandbox",
                "app.kubernetes.io/part-of": "waybill",
                "waybill.dev/run-id": request.run_id,
                "waybill.dev/thread-id": request.thread_id,
                "waybill.dev/sandbox-network": "allowed" if limits.network else "none",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "activeDeadlineSeconds": deadline,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "fsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CONTAINER,
                    "image": spec.image,
                    "command": ["sleep", "infinity"],
                    "workingDir": WORKSPACE_MOUNT,
                    "env": [{"name": "HOME", "value": WORKSPACE_MOUNT}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {
                        "requests": {"cpu": "100m", "memory": memory},
                        "limits": {"cpu": "1", "memory": memory, "ephemeral-storage": "1Gi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "workspace",
                            "mountPath": WORKSPACE_MOUNT,
                            "subPath": request.thread_id,
                        },
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "workspace",
                    "persistentVolumeClaim": {"claimName": spec.workspaces_claim},
                },
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            ],
        },
    }


def limited(argv: list[str], limits: Limits) -> list[str]:
    """A command under the sandbox's per-command limits, inside the pod."""
    return [
        "timeout",
        "-s",
        "KILL",
        f"{limits.timeout_seconds:g}",
        "prlimit",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        "--",
        *argv,
    ]


def exit_code_of(status: dict[str, Any]) -> int:
    """The exit code in a `pods/exec` status (channel 3): 0 on Success."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message") or 1)
    return 1


@dataclass(frozen=True)
class ApiServer:
    url: str
    token: str | None
    verify: ssl.SSLContext | bool

    @classmethod
    def of(cls, spec: KubernetesSandboxSpec) -> ApiServer:
        url = spec.api_url
        if url is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise SandboxUnavailable(
                    "sandbox.kubernetes.api_url is unset and this is not a pod (no "
                    "KUBERNETES_SERVICE_HOST)"
                )
            url = f"https://{host}:{port}"
        token = spec.token_file.read_text().strip() if spec.token_file.is_file() else None
        verify: ssl.SSLContext | bool = True
        if spec.ca_file is not None and spec.ca_file.is_file():
            verify = ssl.create_default_context(cafile=str(spec.ca_file))
        return cls(url.rstrip("/"), token, verify)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def websocket_url(self, path: str, query: list[tuple[str, str]]) -> str:
        parts = urlsplit(self.url + path)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urlunsplit((scheme, parts.netloc, parts.path, urlencode(query), ""))


class KubernetesSandbox:
    def __init__(
        self, name: str, api: ApiServer, spec: KubernetesSandboxSpec, limits: Limits
    ) -> None:
        self.name = name
        self.api = api
        self.spec = spec
        self.limits = limits

    @property
    def sandbox_id(self) -> str:
        return self.name

    @property
    def confinement(self) -> list[str]:
        found = ["pod", "non-root", "no-capabilities", "read-only-root", "rlimits"]
        return found if self.limits.network else [*found, "network-policy"]

    @property
    def lease_details(self) -> dict[str, object]:
        # The pod's resources hold memory, processes and disk for the pod as a whole.
        return {"mode": "strict", "not_enforced": [], "cgroup": "pod", "workspace": "volume"}

    def _pod_path(self) -> str:
        return f"/api/v1/namespaces/{self.spec.namespace}/pods/{self.name}"

    async def execute(self, argv: list[str]) -> ExecResult:
        query = [("container", CONTAINER), ("stdout", "true"), ("stderr", "true")]
        query += [("command", part) for part in limited(argv, self.limits)]
        url = self.api.websocket_url(self._pod_path() + "/exec", query)
        ssl_context = self.api.verify if isinstance(self.api.verify, ssl.SSLContext) else None
        stdout, stderr = Output(self.limits.output_bytes), Output(self.limits.output_bytes)
        status: dict[str, Any] = {}
        try:
            async with connect(
                url,
                subprotocols=[CHANNEL_PROTOCOL],  # type: ignore[list-item]
                additional_headers=self.api.headers(),
                ssl=ssl_context if url.startswith("wss") else None,
                max_size=None,
                proxy=None,
            ) as stream:
                async for frame in stream:
                    data = frame.encode() if isinstance(frame, str) else frame
                    if not data:
                        continue
                    channel, payload = data[0], data[1:]
                    if channel == STDOUT:
                        stdout.add(payload)
                    elif channel == STDERR:
                        stderr.add(payload)
                    elif channel == STATUS and payload:
                        status = json.loads(payload)
        except (OSError, InvalidHandshake, ConnectionClosed) as error:
            raise SandboxUnavailable(f"exec in pod {self.name} failed: {error}") from error
        code = exit_code_of(status)
        timed_out = code in (TIMEOUT_EXIT, SIGNAL_EXIT + 9) and "CPU time" not in stderr.text()
        dropped = stdout.dropped + stderr.dropped
        return ExecResult(
            exit_code=code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            limit_hit=limit_hit(code, stderr.text(), timed_out, dropped),
            output_dropped=dropped,
        )

    async def close(self) -> None:
        async with _client(self.api) as client:
            reply = await client.delete(self._pod_path(), params={"gracePeriodSeconds": 0})
        if reply.status_code not in (200, 202, 404):
            raise SandboxUnavailable(f"deleting pod {self.name}: HTTP {reply.status_code}")


def _client(api: ApiServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=api.url, headers=api.headers(), verify=api.verify)


class KubernetesProvider:
    name = "kubernetes"

    def __init__(
        self, spec: KubernetesSandboxSpec, limits: Limits, run_timeout_seconds: float
    ) -> None:
        self.spec = spec
        self.limits = limits
        self.run_timeout_seconds = run_timeout_seconds  # a pod outlives no run

    async def lease(self, request: LeaseRequest) -> Sandbox:
        api = ApiServer.of(self.spec)
        name = f"waybill-sandbox-{uuid.uuid4().hex[:12]}"
        manifest = pod_manifest(name, request, self.spec, self.limits, self.run_timeout_seconds)
        pods = f"/api/v1/namespaces/{self.spec.namespace}/pods"
        sandbox = KubernetesSandbox(name, api, self.spec, self.limits)
        async with _client(api) as client:
            created = await client.post(pods, json=manifest)
            if created.status_code not in (200, 201, 202):
                raise SandboxUnavailable(
                    f"creating pod {name}: HTTP {created.status_code}: {created.text[:500]}"
                )
            try:
                await self._until_running(client, f"{pods}/{name}")
            except BaseException:
                await sandbox.close()  # never leave a pod behind a failed lease
                raise
        return sandbox

    async def _until_running(self, client: httpx.AsyncClient, path: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.spec.ready_seconds
        while True:
            reply = await client.get(path)
            phase = reply.json().get("status", {}).get("phase") if reply.is_success else None
            if phase == "Running":
                return
            if phase in ("Failed", "Succeeded"):
                raise SandboxUnavailable(f"sandbox pod ended before it ran ({phase})")
            if loop.time() > deadline:
                raise SandboxUnavailable(
                    f"sandbox pod not running after {self.spec.ready_seconds:g} s ({phase})"
                )
            await asyncio.sleep(self.spec.poll_seconds)
