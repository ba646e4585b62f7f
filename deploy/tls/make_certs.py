"""Make a throwaway CA and one certificate for Waybill's services, for a cluster
without cert-manager (a dev cluster, a test). Writes ca.crt, tls.crt and tls.key
(the keys of the `waybill-tls` Secret the manifests mount) into a folder:

    python deploy/tls/make_certs.py --namespace waybill-dev --out ./waybill-tls
    kubectl -n waybill-dev create secret generic waybill-tls --from-file=./waybill-tls

For the Helm chart, whose Services are named after the release, add `--prefix
waybill-` (the release name and a dash).

The one certificate serves every service and is every caller's client certificate;
its names are the Services' DNS names, short and qualified by the namespace. The
CA's key is not kept: to add a process later, make a new set and roll every pod.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# The Services peers dial (deploy/k8s/base: runner-pods is the runners' headless one).
SERVICES = ("admission", "runner", "runner-pods", "journal", "delivery", "gateway")


def dns_names(namespace: str, prefix: str = "") -> list[str]:
    names = []
    for service in (prefix + name for name in SERVICES):
        qualified = f"{service}.{namespace}.svc"
        names += [service, f"{service}.{namespace}", qualified, f"{qualified}.cluster.local"]
    return names


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make(namespace: str, days: int, prefix: str = "") -> dict[str, bytes]:
    """{file name: PEM}: the CA's certificate, the services' certificate and key."""
    now = datetime.datetime.now(datetime.UTC)
    valid = {"not_valid_before": now - datetime.timedelta(minutes=5)}
    valid["not_valid_after"] = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"waybill-ca-{namespace}")
    ca = (
        x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, **valid)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names(namespace, prefix)])
    cert = (
        x509.CertificateBuilder(subject_name=_name("waybill"), issuer_name=ca_name, **valid)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(names, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return {
        "ca.crt": ca.public_bytes(pem),
        "tls.crt": cert.public_bytes(pem),
        "tls.key": _pem_key(key),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="waybill")
    parser.add_argument("--prefix", default="", help="the Services' name prefix (Helm: 'RELEASE-')")
    parser.add_argument("--out", type=Path, default=Path("waybill-tls"))
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for file_name, content in make(args.namespace, args.days, args.prefix).items():
        path = args.out / file_name
        path.write_bytes(content)
        path.chmod(0o600)
    print(f"wrote ca.crt, tls.crt and tls.key to {args.out}")


if __name__ == "__main__":
    main()
