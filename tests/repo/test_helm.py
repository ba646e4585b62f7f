"""deploy/helm/waybill: Helm's own engine (Helm's Go SDK, through helm-python-sdk:
no binary, no network) lints the chart and renders each values profile in
`ci/`, as `helm lint` and `helm template` do; every rendered object is validated
strictly against the Kubernetes JSON schemas, and the wiring is checked as for the
kustomize tree. CRD objects (ServiceMonitor, ScaledObject, Certificate) have no
schema there: their fields are checked by hand."""

from __future__ import annotations

import base64
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from sqlalchemy.engine import make_url

from tests.repo.test_deploy import (
    GRPC_SERVICES,
    HEALTH_PORTS,
    KUBERNETES_VERSIONS,
    TLS_FILES,
    container,
    env_of,
    metrics_ports_are_set_and_reachable,
    of_kind,
    project_is_mounted_and_loads,
)
from tests.support.paths import REPO

CHART = REPO / "deploy" / "helm" / "waybill"
PROFILES = sorted(path.stem.removesuffix("-values") for path in (CHART / "ci").glob("*.yaml"))
RELEASE, NAMESPACE = "waybill", "waybill"
CRDS = {"ServiceMonitor", "ScaledObject", "Certificate"}
# Helm's lint severities: 1 info ("icon is recommended"), 2 warning, 4 error.
LINT_WARNING = 2


def values_of(profile: str) -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "ci" / f"{profile}-values.yaml").read_text()))


def render(values: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return tuple(
        doc
        for path, text in sorted(files.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    )


@cache
def rendered(profile: str) -> tuple[dict[str, Any], ...]:
    return render(values_of(profile))


def named(service: str) -> str:
    return f"{RELEASE}-{service}"


def config_of(docs: tuple[dict[str, Any], ...]) -> dict[str, str]:
    return dict(of_kind(docs, "ConfigMap")[named("env")]["data"])


def test_there_are_profiles() -> None:
    assert {"dev", "production", "keda"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_chart_lints_clean(profile: str) -> None:
    found = helm.lint(str(CHART), values_of(profile), strict=True, namespace=NAMESPACE)
    assert found["errors"] == []
    assert [m for m in found["messages"] if m["severity"] >= LINT_WARNING] == []


def test_lint_does_report_a_broken_chart(tmp_path: Path) -> None:
    broken = tmp_path / "waybill"
    broken.mkdir()
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: waybill\n")  # no version
    found = helm.lint(str(broken), strict=True)
    assert found["errors"] or [m for m in found["messages"] if m["severity"] >= LINT_WARNING]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_renders_objects_that_validate_strictly(profile: str, version: str) -> None:
    docs = rendered(profile)
    assert len(of_kind(docs, "Deployment")) == 5
    for doc in docs:
        if doc["kind"] in CRDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_service_is_probed_secured_and_configured(profile: str) -> None:
    docs = rendered(profile)
    deployments, config = of_kind(docs, "Deployment"), config_of(docs)
    assert set(deployments) == {named(s) for s in [*GRPC_SERVICES, "gateway"]}
    for name, port in GRPC_SERVICES.items():
        deployment = deployments[named(name)]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        box = container(deployment)
        assert box["securityContext"]["readOnlyRootFilesystem"] is True
        assert box["command"] == ["python", "-m", f"waybill.services.{name}.server"]
        env = env_of(box)
        assert env[f"WAYBILL_{name.upper()}_ADDR"] == f"0.0.0.0:{port}"
        assert config[f"WAYBILL_{name.upper()}_ADDR"] == f"{named(name)}:{port}"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert box[probe]["grpc"]["port"] == HEALTH_PORTS[name]
        assert env[f"WAYBILL_{name.upper()}_HEALTH_PORT"] == str(HEALTH_PORTS[name])
        assert env["WAYBILL_DATABASE_URL"]["secretKeyRef"]["key"] == "database-url"
        [init] = pod["initContainers"]
        assert init["command"] == ["waybill", "migrate", "--wait"]
    gateway = container(deployments[named("gateway")])
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/ok"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/livez"  # asks no peer
    assert "WAYBILL_DATABASE_URL" not in env_of(gateway)
    delivery = env_of(container(deployments[named("delivery")]))
    assert delivery["WAYBILL_WEBHOOK_SECRET"]["secretKeyRef"]["key"] == "webhook-secret"
    [job] = of_kind(docs, "Job").values()
    assert container(job)["command"] == ["waybill", "migrate"]
    assert config["WAYBILL_RUNNER_READ_TARGET"] == f"dns:///{named('runner-pods')}:50152"
    assert named("runner-pods") in of_kind(docs, "Service")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_grpc_service_serves_metrics_where_a_scraper_reaches_it(profile: str) -> None:
    docs = rendered(profile)
    metrics_ports_are_set_and_reachable(docs, named, config_of(docs))


def test_the_service_monitor_scrapes_every_service() -> None:
    docs = rendered("production")
    [monitor] = of_kind(docs, "ServiceMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    ports = {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}
    for service in [*GRPC_SERVICES, "gateway"]:
        found = of_kind(docs, "Service")[named(service)]
        assert selector.items() <= found["metadata"]["labels"].items(), service
        assert ports & {p["name"] for p in found["spec"]["ports"]}, service
    assert "ServiceMonitor" not in {d["kind"] for d in rendered("dev")}


def test_runners_scale_on_queue_depth_with_keda() -> None:
    docs = rendered("keda")
    [scaled] = of_kind(docs, "ScaledObject").values()
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == named("runner")
    prometheus, cpu = scaled["spec"]["triggers"]
    assert prometheus["type"] == "prometheus"
    assert "waybill_runs_queued" in prometheus["metadata"]["query"]
    assert cpu["type"] == "cpu"
    # KEDA owns the runner's autoscaler; the gateway's stays on CPU.
    assert set(of_kind(docs, "HorizontalPodAutoscaler")) == {named("gateway")}
    assert "replicas" not in of_kind(docs, "Deployment")[named("runner")]["spec"]


def test_replicas_and_autoscalers_per_profile() -> None:
    production = of_kind(rendered("production"), "Deployment")
    for service in ("admission", "journal", "delivery"):
        assert production[named(service)]["spec"]["replicas"] == 2
    assert production[named("journal")]["spec"]["strategy"]["type"] == "RollingUpdate"
    scalers = of_kind(rendered("production"), "HorizontalPodAutoscaler")
    assert scalers[named("runner")]["spec"]["maxReplicas"] == 20
    dev = of_kind(rendered("dev"), "Deployment")
    assert {d["spec"]["replicas"] for d in dev.values()} == {1}
    assert dev[named("journal")]["spec"]["strategy"]["type"] == "Recreate"  # no Redis
    assert of_kind(rendered("dev"), "HorizontalPodAutoscaler") == {}


@pytest.mark.parametrize("profile", PROFILES)
def test_budgets_select_their_pods(profile: str) -> None:
    docs = rendered(profile)
    budgets = of_kind(docs, "PodDisruptionBudget")
    for name, deployment in of_kind(docs, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("profile", PROFILES)
def test_only_the_releases_pods_reach_the_grpc_ports(profile: str) -> None:
    docs = rendered(profile)
    policy = of_kind(docs, "NetworkPolicy")[named("services")]["spec"]
    [rule, _scrape] = policy["ingress"]
    assert rule["ports"] == [{"port": "grpc"}]
    [peer] = rule["from"]
    for name in GRPC_SERVICES:
        labels = of_kind(docs, "Deployment")[named(name)]["spec"]["template"]["metadata"]["labels"]
        assert peer["podSelector"]["matchLabels"].items() <= labels.items()
        for expression in policy["podSelector"]["matchExpressions"]:
            assert labels[expression["key"]] in expression["values"], name


@pytest.mark.parametrize("profile", PROFILES)
def test_every_process_talks_mutual_tls(profile: str) -> None:
    docs = rendered(profile)
    config = config_of(docs)
    for name, workload in of_kind(docs, "Deployment").items():
        pod = workload["spec"]["template"]["spec"]
        [tls] = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert tls["secret"] == {"secretName": "waybill-tls", "defaultMode": 0o440}, name
        [mount] = [m for m in container(workload)["volumeMounts"] if m["name"] == "tls"]
        for setting, key in TLS_FILES.items():
            assert config[setting] == f"{mount['mountPath']}/{key}"


def test_cert_manager_names_every_service() -> None:
    docs = rendered("production")
    [certificate] = of_kind(docs, "Certificate").values()
    assert certificate["spec"]["secretName"] == "waybill-tls"
    assert set(certificate["spec"]["usages"]) == {"server auth", "client auth"}
    for service in of_kind(docs, "Service"):
        assert {service, f"{service}.{NAMESPACE}.svc"} <= set(certificate["spec"]["dnsNames"])


def test_the_dev_profile_mounts_a_config_with_real_models_and_a_webhook_secret() -> None:
    docs = rendered("dev")
    [secret] = of_kind(docs, "Secret").values()
    keys = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert keys["webhook-secret"] == "dev-webhook-secret"
    assert make_url(keys["database-url"]).host == "postgres"
    project = of_kind(docs, "ConfigMap")[named("project")]
    settings = project_is_mounted_and_loads(docs, config_of(docs), project, named)
    assert {m.name for m in settings.models()} == {"scripted", "gpt-4o-mini"}
    for name in ("admission", "runner"):
        box = container(of_kind(docs, "Deployment")[named(name)])
        assert {"secretRef": {"name": "waybill-model-keys", "optional": True}} in box["envFrom"]
    [claim] = of_kind(docs, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_a_project_graph_and_principals_are_mounted_and_served(tmp_path: Path) -> None:
    docs = rendered("keda")
    project = of_kind(docs, "ConfigMap")[named("project")]
    settings = project_is_mounted_and_loads(docs, config_of(docs), project, named, tmp_path)
    assert sorted(settings.graph_specs()) == ["echo"]  # builtinGraphs: false
    assert [p.user_id for p in settings.principals()] == ["alice"]


def test_without_a_given_webhook_secret_one_is_generated() -> None:
    values = {"database": {"url": "postgresql+asyncpg://w:w@db:5432/w"}}
    [secret] = of_kind(render(values), "Secret").values()
    assert len(base64.b64decode(secret["data"]["webhook-secret"])) == 48


@pytest.mark.parametrize("profile", PROFILES)
def test_every_process_presents_a_generated_service_token(profile: str) -> None:
    docs = rendered(profile)
    for name, deployment in of_kind(docs, "Deployment").items():
        env = env_of(container(deployment))
        assert env["WAYBILL_SERVICE_TOKEN"]["secretKeyRef"]["key"] == "service-token", name
    if not values_of(profile).get("secrets", {}).get("existingSecret"):
        [secret] = of_kind(docs, "Secret").values()
        assert len(base64.b64decode(secret["data"]["service-token"])) == 48
    given = {"database": {"url": "postgresql+asyncpg://w:w@db:5432/w"}}
    given["secrets"] = {"serviceToken": "given-token"}
    [chosen] = of_kind(render(given), "Secret").values()
    assert base64.b64decode(chosen["data"]["service-token"]) == b"given-token"


def test_an_existing_secret_replaces_the_charts() -> None:
    docs = rendered("production")
    assert of_kind(docs, "Secret") == {}
    env = env_of(container(of_kind(docs, "Deployment")[named("admission")]))
    assert env["WAYBILL_DATABASE_URL"]["secretKeyRef"]["name"] == "waybill-secrets"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({}, "database.url is required"),
        (
            {"database": {"url": "postgresql+asyncpg://w@db/w"}, "journal": {"replicas": 2}},
            "needs redis.url",
        ),
    ],
)
def test_values_that_cannot_work_are_refused(values: dict[str, Any], says: str) -> None:
    with pytest.raises(helm.HelmError, match=says):
        render(values)


def test_the_certificate_script_names_the_charts_services(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(CHART.parent.parent / "tls" / "make_certs.py")]
        + ["--namespace", NAMESPACE, "--prefix", f"{RELEASE}-", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = {name.value for name in names}
    for service in of_kind(rendered("dev"), "Service"):
        assert {service, f"{service}.{NAMESPACE}.svc"} <= dns, service
