"""Mutual TLS between the services: with the three TLS settings, every service
serves only TLS and admits only callers holding a certificate from the CA; the
whole stack still serves a run. The CA and certificates are made here, thrown away
with the test's folder."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from langgraph_sdk import get_client

from tests.support.helpers import says
from tests.support.stacks import free_port, running_stack, stack_env
from waybill.common.launch import Stack
from waybill.common.readiness import RUNNER_WORK_HEALTH

SERVICES = ("admission", "runner", "journal", "delivery")


@dataclass
class Issued:
    key: Path
    cert: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def make_ca(folder: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = folder / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def issue(
    folder: Path, name: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> Issued:
    """A certificate for a service on loopback, usable as server and as client."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path = folder / f"{name}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(_write_key(key, folder / f"{name}.key"), cert_path)


@dataclass
class TlsStack:
    stack: Stack
    ca: Path
    service: Issued
    stranger: Issued  # signed by another CA
    health_ports: dict[str, int]  # each service's plaintext health port


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsStack]:
    folder = tmp_path_factory.mktemp("tls")
    ca_key, ca_cert, ca_path = make_ca(folder, "waybill-test-ca")
    service = issue(folder, "service", ca_key, ca_cert)
    other_key, other_cert, _ = make_ca(folder, "another-ca")
    stranger = issue(folder, "stranger", other_key, other_cert)
    health_ports = {name: free_port() for name in SERVICES}
    env = stack_env(
        folder,
        WAYBILL_TLS_CA_FILE=str(ca_path),
        WAYBILL_TLS_CERT_FILE=str(service.cert),
        WAYBILL_TLS_KEY_FILE=str(service.key),
        **{f"WAYBILL_{name.upper()}_HEALTH_PORT": str(p) for name, p in health_ports.items()},
    )
    with running_stack(env, folder) as stack:
        yield TlsStack(stack, ca_path, service, stranger, health_ports)


def health(channel: grpc.Channel) -> int:
    request = health_pb2.HealthCheckRequest()
    return int(health_pb2_grpc.HealthStub(channel).Check(request, timeout=3).status)


async def test_a_stack_on_mutual_tls_serves_a_run(tls_stack: TlsStack) -> None:
    client = get_client(url=tls_stack.stack.url)
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("over TLS"))
    assert isinstance(result, dict)
    answer = result["messages"][-1]
    assert (answer["type"], answer["content"]) == ("ai", "You said: over TLS")


def test_a_caller_with_the_cas_certificate_is_served(tls_stack: TlsStack) -> None:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls_stack.ca.read_bytes(),
        private_key=tls_stack.service.key.read_bytes(),
        certificate_chain=tls_stack.service.cert.read_bytes(),
    )
    for name in SERVICES:
        with grpc.secure_channel(tls_stack.stack.address_of(name), credentials) as channel:
            assert health(channel) == health_pb2.HealthCheckResponse.SERVING, name


def test_plaintext_and_strangers_get_nothing(tls_stack: TlsStack) -> None:
    no_certificate = grpc.ssl_channel_credentials(root_certificates=tls_stack.ca.read_bytes())
    strangers = grpc.ssl_channel_credentials(
        root_certificates=tls_stack.ca.read_bytes(),
        private_key=tls_stack.stranger.key.read_bytes(),
        certificate_chain=tls_stack.stranger.cert.read_bytes(),
    )
    for name in SERVICES:
        address = tls_stack.stack.address_of(name)
        for channel in (
            grpc.insecure_channel(address),
            grpc.secure_channel(address, no_certificate),
            grpc.secure_channel(address, strangers),
        ):
            with channel, pytest.raises(grpc.RpcError) as refused:
                health(channel)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, name


def test_the_plaintext_health_port_answers_probes_and_nothing_else(tls_stack: TlsStack) -> None:
    """Kubelet's probes hold no certificate: each service's health port answers them in
    plaintext (with the main server's statuses) while its main port refuses plaintext."""
    for name in SERVICES:
        health_address = f"127.0.0.1:{tls_stack.health_ports[name]}"
        with grpc.insecure_channel(health_address) as channel:
            assert health(channel) == health_pb2.HealthCheckResponse.SERVING, name
            # Only the health service is there: a service's own RPC is unknown.
            with pytest.raises(grpc.RpcError) as unknown:
                channel.unary_unary("/waybill.v1.Admission/GetThread")(b"", timeout=3)
            assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED, name
        with grpc.insecure_channel(tls_stack.stack.address_of(name)) as plain:
            with pytest.raises(grpc.RpcError) as refused:
                health(plain)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, name
    # The runner's own status (its work stream to admission) is served there too.
    with grpc.insecure_channel(f"127.0.0.1:{tls_stack.health_ports['runner']}") as channel:
        request = health_pb2.HealthCheckRequest(service=RUNNER_WORK_HEALTH)
        reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=3)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
