"""A Kubernetes API server on loopback, as far as the sandbox provider uses it.

`POST …/pods` validates the pod strictly against the Kubernetes JSON schemas
(kubernetes-validate) and refuses (422) what a real API server would; a pod
reads `Pending` once, then `Running`; `DELETE` removes it; `…/exec` speaks the
`v4.channel.k8s.io` WebSocket protocol and runs the command on this machine in
the pod's workspace (the thread's, by the pod's `subPath`), standing in for the
container. Every call is recorded, with its bearer token.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse

from tests.support.stacks import free_port

VERSION = kubernetes_validate.latest_version()


@dataclass
class FakeKubernetes:
    workspaces: Path
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, token
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # live pods by name
    created: list[dict[str, Any]] = field(default_factory=list)  # every manifest accepted
    commands: list[list[str]] = field(default_factory=list)
    url: str = ""

    def app(self) -> FastAPI:
        app = FastAPI()
        polls: dict[str, int] = {}

        def seen(method: str, path: str, headers: Any) -> None:
            self.calls.append((method, path, headers.get("authorization", "")))

        @app.post("/api/v1/namespaces/{namespace}/pods")
        async def create(namespace: str, request: Request) -> JSONResponse:
            seen("POST", request.url.path, request.headers)
            pod = await request.json()
            try:
                kubernetes_validate.validate(pod, VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                return JSONResponse({"kind": "Status", "message": str(error)}, 422)
            if pod["metadata"].get("namespace") != namespace:
                return JSONResponse({"kind": "Status", "message": "namespace"}, 400)
            self.pods[pod["metadata"]["name"]] = pod
            self.created.append(pod)
            return JSONResponse({**pod, "status": {"phase": "Pending"}}, 201)

        @app.get("/api/v1/namespaces/{namespace}/pods/{name}")
        async def read(namespace: str, name: str, request: Request) -> JSONResponse:
            seen("GET", request.url.path, request.headers)
            if name not in self.pods:
                return JSONResponse({"kind": "Status", "reason": "NotFound"}, 404)
            polls[name] = polls.get(name, 0) + 1
            phase = "Pending" if polls[name] == 1 else "Running"
            return JSONResponse({**self.pods[name], "status": {"phase": phase}})

        @app.delete("/api/v1/namespaces/{namespace}/pods/{name}")
        async def delete(namespace: str, name: str, request: Request) -> JSONResponse:
            seen("DELETE", request.url.path, request.headers)
            if self.pods.pop(name, None) is None:
                return JSONResponse({"kind": "Status", "reason": "NotFound"}, 404)
            return JSONResponse({"kind": "Status", "status": "Success"})

        @app.websocket("/api/v1/namespaces/{namespace}/pods/{name}/exec")
        async def execute(websocket: WebSocket, namespace: str, name: str) -> None:
            seen("EXEC", websocket.url.path, websocket.headers)
            asked = websocket.headers.get("sec-websocket-protocol", "")
            if name not in self.pods or "v4.channel.k8s.io" not in asked:
                await websocket.close(code=1008)
                return
            await websocket.accept(subprotocol="v4.channel.k8s.io")
            command = websocket.query_params.getlist("command")
            self.commands.append(command)
            mount = self.pods[name]["spec"]["containers"][0]["volumeMounts"][0]
            workspace = self.workspaces / mount["subPath"]
            workspace.mkdir(parents=True, exist_ok=True)
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=workspace,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await process.communicate()
            await websocket.send_bytes(b"\x01" + out)
            await websocket.send_bytes(b"\x02" + err)
            await websocket.send_bytes(b"\x03" + json.dumps(_status(process.returncode)).encode())
            await websocket.close()

        return app


def _status(code: int | None) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    shown = 128 - code if code is not None and code < 0 else code
    return {
        "metadata": {},
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(shown)}]},
    }


@contextmanager
def running_fake_kubernetes(workspaces: Path) -> Iterator[FakeKubernetes]:
    fake = FakeKubernetes(workspaces)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError("the fake Kubernetes API did not start")
        time.sleep(0.05)
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(10)
