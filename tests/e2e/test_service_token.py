"""One trust boundary: a service trusts a caller for its service token, not for
reaching its port (common/service_token.py).

Every RPC of every service, read from the proto descriptors, is refused without
the token (UNAUTHENTICATED) and not refused for that with it; the health service
answers anyone. The attack it closes: a local process (a sandboxed command with
`network: true`, any user on the machine) calling admission's gRPC without a
principal, which a service took for another service and answered with every
user's threads. The embedded launcher makes the token (0600, in the data
directory); a scaled service without a credential refuses to start; an embedded
one listens on loopback alone.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.auth_stack import auth_stack_in_mode
from tests.support.stacks import free_port, fresh_postgres_database, stack_env
from waybill import v1
from waybill.common.grpc_channels import open_channel
from waybill.common.grpc_server import listen_address
from waybill.common.launch import PYTHON, Stack
from waybill.common.service_token import CREDENTIAL_EXIT_CODE, SERVICE_TOKEN_KEY
from waybill.common.settings import Settings
from waybill.v1 import (
    admission_pb2,
    admission_pb2_grpc,
    channels_pb2,
    delivery_pb2,
    journal_pb2,
    runner_pb2,
)

KEYS = {"alice": "alice-key-trust", "bob": "bob-key-trust"}
# Which process serves each gRPC service of the protos.
SERVED_BY = {
    "waybill.v1.Admission": "admission",
    "waybill.v1.Runner": "runner",
    "waybill.v1.Journal": "journal",
    "waybill.v1.Delivery": "delivery",
    "waybill.v1.Channels": "delivery",
}
PROTO_MODULES = (admission_pb2, runner_pb2, journal_pb2, delivery_pb2, channels_pb2)
CALL_SECONDS = 3.0  # a call with the token may wait (a stream); it is cut after this


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("service-token")
    # No token configured: the launcher makes the data directory's.
    with auth_stack_in_mode("sqlite", data_dir, KEYS, {}, WAYBILL_SERVICE_TOKEN="") as running:
        yield running


def every_rpc() -> list[tuple[str, str, bool, bool]]:
    """(service, method, client streaming, server streaming) of every proto."""
    found = []
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append(
                    (
                        service.full_name,
                        method.name,
                        method.client_streaming,
                        method.server_streaming,
                    )
                )
    return found


def test_the_protos_list_no_service_this_test_does_not_know() -> None:
    generated = {p.stem for p in Path(v1.__file__).parent.glob("*_pb2.py")}
    assert generated == {m.__name__.rsplit(".", 1)[1] for m in PROTO_MODULES} | {"common_pb2"}
    assert {service for service, *_ in every_rpc()} == set(SERVED_BY)


async def call_status(channel: grpc.aio.Channel, rpc: tuple[str, str, bool, bool]) -> str:
    """How one call of `rpc` with an empty request ends: its status code's name."""
    service, method, client_streaming, server_streaming = rpc
    path = f"/{service}/{method}"
    plain = {"request_serializer": None, "response_deserializer": None}
    empty = b""
    try:
        if not client_streaming and not server_streaming:
            await channel.unary_unary(path, **plain)(empty, timeout=CALL_SECONDS)
        elif not client_streaming:
            async for _ in channel.unary_stream(path, **plain)(empty, timeout=CALL_SECONDS):
                pass
        elif not server_streaming:
            await channel.stream_unary(path, **plain)(iter([]), timeout=CALL_SECONDS)
        else:
            # No request message: a message sent while the server refuses the call
            # fails on the client's side (INTERNAL) instead of reporting the refusal.
            call = channel.stream_stream(path, **plain)(iter([]), timeout=CALL_SECONDS)
            async for _ in call:
                pass
    except grpc.aio.AioRpcError as error:
        return str(error.code().name)
    return "OK"


async def test_every_rpc_is_refused_without_the_token_and_served_with_it(stack: Stack) -> None:
    rpcs = every_rpc()
    assert len(rpcs) > 60  # every service's methods, not a few
    settings = stack.settings
    trusted = {
        name: open_channel(stack.address_of(name), settings=settings) for name in SERVED_BY.values()
    }
    strangers = {
        name: grpc.aio.insecure_channel(stack.address_of(name)) for name in SERVED_BY.values()
    }
    wrong = {
        name: open_channel(stack.address_of(name), settings=Settings(service_token="guess"))
        for name in SERVED_BY.values()
    }
    try:
        without = await asyncio.gather(*(call_status(strangers[SERVED_BY[r[0]]], r) for r in rpcs))
        guessed = await asyncio.gather(*(call_status(wrong[SERVED_BY[r[0]]], r) for r in rpcs))
        with_token = await asyncio.gather(*(call_status(trusted[SERVED_BY[r[0]]], r) for r in rpcs))
    finally:
        for channel in [*trusted.values(), *strangers.values(), *wrong.values()]:
            await channel.close()
    names = [f"{service}/{method}" for service, method, *_ in rpcs]
    assert {n: s for n, s in zip(names, without, strict=True) if s != "UNAUTHENTICATED"} == {}
    assert {n: s for n, s in zip(names, guessed, strict=True) if s != "UNAUTHENTICATED"} == {}
    assert [n for n, s in zip(names, with_token, strict=True) if s == "UNAUTHENTICATED"] == []


def test_the_health_service_answers_anyone(stack: Stack) -> None:
    for name in ("admission", "runner", "journal", "delivery"):
        with grpc.insecure_channel(stack.address_of(name)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


def test_the_launcher_made_the_token_for_its_owner_alone(stack: Stack) -> None:
    path = stack.settings.data_dir / "service.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.getuid()
    token = path.read_text().strip()
    assert len(token) >= 32 and stack.env["WAYBILL_SERVICE_TOKEN"] == token


async def test_a_local_process_cannot_list_another_users_threads(stack: Stack) -> None:
    """The attack: alice's thread, then a process on the machine asking admission for
    every thread with no principal (a service's call, which services trusted)."""
    headers = {"x-api-key": KEYS["alice"]}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as alice:
        created = await alice.post("/threads", json={"metadata": {"topic": "alice's plans"}})
    assert created.status_code == 200, created.text
    thread_id = created.json()["thread_id"]

    async with grpc.aio.insecure_channel(stack.address_of("admission")) as channel:
        admission = admission_pb2_grpc.AdmissionStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            found = await admission.SearchThreads(
                admission_pb2.SearchThreadsRequest(limit=100), timeout=10
            )
            assert thread_id not in [t.thread_id for t in found.threads]
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # Nor does a made-up token pass.
        with pytest.raises(grpc.aio.AioRpcError) as guessed:
            await admission.SearchThreads(
                admission_pb2.SearchThreadsRequest(limit=100),
                metadata=[(SERVICE_TOKEN_KEY, "x" * 43)],
                timeout=10,
            )
        assert guessed.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_scaled_service_without_a_credential_refuses_to_start(tmp_path: Path) -> None:
    with fresh_postgres_database() as url:
        env = {**stack_env(tmp_path, url), "WAYBILL_SERVICE_TOKEN": ""}
        done = subprocess.run(
            [*PYTHON, "-m", "waybill.services.admission.server"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == CREDENTIAL_EXIT_CODE, done.stderr[-2000:]
    said = [line for line in (done.stdout + done.stderr).splitlines() if "refusing" in line]
    assert len(said) == 1 and "WAYBILL_SERVICE_TOKEN" in said[0]


def test_an_embedded_service_listens_on_loopback_alone(tmp_path: Path) -> None:
    port = free_port()
    env = {**stack_env(tmp_path), "WAYBILL_JOURNAL_ADDR": f"0.0.0.0:{port}"}
    stack = Stack(env=env, log_dir=str(tmp_path))
    try:
        stack.start(only=["journal"])
        assert listening_hosts(port) == {"127.0.0.1"}
    finally:
        stack.stop()
    scaled = Settings(database_url="postgresql+asyncpg://x/y")
    assert listen_address("0.0.0.0:1", scaled) == "0.0.0.0:1"


def listening_hosts(port: int) -> set[str]:
    """The local addresses a TCP socket listens on `port` at (/proc/net/tcp{,6})."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.rpartition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    hosts.add(_ipv4(address[-8:]) if address[:-8] in V4_PREFIXES else address)
    return hosts


# An IPv4 address in /proc/net/tcp, or mapped into IPv6 (::ffff:a.b.c.d) in tcp6.
V4_PREFIXES = ("", "0000000000000000FFFF0000")


def _ipv4(little_endian_hex: str) -> str:
    return ".".join(str(int(little_endian_hex[i : i + 2], 16)) for i in (6, 4, 2, 0))


assert sys.byteorder == "little"  # /proc/net/tcp's addresses are in host order
