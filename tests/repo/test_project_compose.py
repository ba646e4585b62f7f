"""`waybill compose`: the Docker Compose file that serves a project.

No Docker engine here, and no Compose v2 (`docker compose`): the file is loaded with
PyYAML and its model checked (services, image and build, env wiring, volumes, start
order with healthchecks, the migration first); `docker compose config` runs only
where Compose v2 is installed. The inline Dockerfile is `waybill dockerfile`'s own
text, whose steps tests/repo/test_project_image.py checks; the chart is rendered with the
image the file's header names (Helm's engine, as tests/repo/test_helm.py does).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helpers import WAYBILL, ok
from tests.support.paths import FIXTURES
from waybill.cli.compose import GRPC
from waybill.cli.new import new_project
from waybill.common.settings import Settings

EXAMPLE = FIXTURES / "example_project"
WAYBILL_SERVICES = ["migrate", "journal", "delivery", "admission", "runner", "gateway"]
# The service keys the file uses, all of them the Compose Spec's.
SPEC_SERVICE_KEYS = {
    "image", "build", "command", "env_file", "environment", "volumes", "ports", "restart",
    "stop_grace_period", "depends_on", "healthcheck",
}  # fmt: skip


def waybill(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WAYBILL, *map(str, args)],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("WAYBILL_")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def written(project: Path, out: Path, *args: str | Path) -> tuple[dict[str, Any], str]:
    """The compose model `waybill compose -o out` writes for `project`, and its text."""
    ok(waybill("compose", "-c", project / "langgraph.json", "-o", out, *args, cwd=out.parent))
    text = out.read_text()
    return dict(yaml.safe_load(text)), text


def inline_dockerfile(service: dict[str, Any]) -> str:
    return str(service["build"]["dockerfile_inline"]).replace("$$", "$")


def at(compose_file: Path, relative: str) -> Path:
    return (compose_file.parent / relative).resolve()


def test_the_example_project_is_served_after_one_migration(tmp_path: Path) -> None:
    out = tmp_path / "compose.yaml"
    model, _ = written(EXAMPLE, out)
    services = model["services"]
    assert set(services) == {"postgres", "redis", *WAYBILL_SERVICES}
    for name, service in services.items():
        assert set(service) <= SPEC_SERVICE_KEYS, name
    assert set(model) == {"name", "services", "volumes"}

    # Backing stores, each with a healthcheck that the others wait for.
    assert services["postgres"]["healthcheck"]["test"][1] == "pg_isready"
    assert services["redis"]["healthcheck"]["test"][1:] == ["redis-cli", "ping"]

    # One migration, first: after Postgres, before every Waybill service.
    migrate = services["migrate"]
    assert migrate["command"] == ["waybill", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    database = "postgresql+asyncpg://waybill:waybill@postgres:5432/waybill"
    assert migrate["environment"]["WAYBILL_DATABASE_URL"] == database

    for name, (module, port) in GRPC.items():
        service = services[name]
        assert service["command"] == ["python", "-m", module]
        assert importlib.util.find_spec(module), module
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        env = service["environment"]
        assert env["WAYBILL_DATABASE_URL"] == database
        # Listens on its own entry, dials every peer by its compose name.
        assert env[f"WAYBILL_{name.upper()}_ADDR"] == f"0.0.0.0:{port}"
        for peer, (_, peer_port) in GRPC.items():
            if peer != name:
                assert env[f"WAYBILL_{peer.upper()}_ADDR"] == f"{peer}:{peer_port}"
        probe = service["healthcheck"]["test"]
        assert probe[:3] == ["CMD", "python", "-c"] and "grpc_health" in probe[3]
        assert probe[4] == f"127.0.0.1:{port}"
    assert services["journal"]["environment"]["WAYBILL_REDIS_URL"] == "redis://redis:6379/0"
    assert services["journal"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    healthy = {"condition": "service_healthy"}
    assert services["runner"]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"},
        "admission": healthy, "journal": healthy, "delivery": healthy,
    }  # fmt: skip
    for name in ("runner", "delivery"):  # the threads' files, shared
        assert services[name]["volumes"] == ["workspaces:/workspaces"]
        assert services[name]["environment"]["WAYBILL_WORKSPACES_DIR"] == "/workspaces"
    assert set(model["volumes"]) == {"postgres-data", "workspaces"}

    # The gateway: its peers, no database; the only port published, on loopback.
    gateway = services["gateway"]
    assert gateway["depends_on"] == {"admission": healthy, "runner": healthy, "journal": healthy}
    assert "WAYBILL_DATABASE_URL" not in gateway["environment"]
    assert gateway["environment"]["WAYBILL_HTTP_HOST"] == "0.0.0.0"
    assert gateway["ports"] == ["127.0.0.1:8080:8080"]
    assert gateway["healthcheck"]["test"][-1] == "http://127.0.0.1:8080/ok"
    assert [name for name, service in services.items() if "ports" in service] == ["gateway"]

    # One image, built from the project's folder with `waybill dockerfile`'s text.
    images = {services[name]["image"] for name in WAYBILL_SERVICES}
    assert images == {"example_project:latest"}
    builds = [services[name]["build"] for name in WAYBILL_SERVICES]
    assert all(build == builds[0] for build in builds)
    assert at(out, builds[0]["context"]) == EXAMPLE
    ok(waybill("dockerfile", tmp_path / "Dockerfile", cwd=EXAMPLE))
    text = inline_dockerfile(migrate)
    assert text == (tmp_path / "Dockerfile").read_text()
    # WAYBILL_GRAPHS is the image's copy of langgraph.json, and nothing overrides it.
    assert "ENV WAYBILL_GRAPHS=/deps/example_project/langgraph.json" in text.splitlines()
    for name in WAYBILL_SERVICES:
        service = services[name]
        assert "WAYBILL_GRAPHS" not in service["environment"]
        assert service["environment"]["WAYBILL_BUILTIN_GRAPHS"] == "false"
        # The project's .env (its `env` key) reaches every process.
        assert [at(out, f) for f in service["env_file"]] == [EXAMPLE / ".env"]
        assert "WAYBILL_CONFIG" not in service["environment"]  # the example has none


def test_one_random_service_token_for_every_service(tmp_path: Path) -> None:
    first, text = written(EXAMPLE, tmp_path / "one.yaml")
    second, _ = written(EXAMPLE, tmp_path / "two.yaml")
    tokens = {
        first["services"][name]["environment"]["WAYBILL_SERVICE_TOKEN"] for name in WAYBILL_SERVICES
    }
    assert len(tokens) == 1
    (token,) = tokens
    assert len(token) >= 32
    assert second["services"]["gateway"]["environment"]["WAYBILL_SERVICE_TOKEN"] != token
    assert "WAYBILL_SERVICE_TOKEN: generated at random into this file" in text


def every_waybill_variable(model: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        name: {k: v for k, v in model["services"][name]["environment"].items()}
        for name in WAYBILL_SERVICES
    }


def test_every_variable_set_is_a_setting_and_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = written(EXAMPLE, tmp_path / "compose.yaml")
    fields = set(Settings.model_fields)
    for name, environment in every_waybill_variable(model).items():
        assert all(key.startswith("WAYBILL_") for key in environment), name
        unknown = [k for k in environment if k.removeprefix("WAYBILL_").lower() not in fields]
        assert not unknown, f"{name}: not settings: {unknown}"
        with monkeypatch.context() as patch:
            for key in list(os.environ):
                if key.startswith("WAYBILL_"):
                    patch.delenv(key)
            for key, value in environment.items():
                patch.setenv(key, value)
            settings = Settings()  # every value parses as its setting's type
        assert settings.service_token and settings.builtin_graphs is False
    dockerfile_env = [
        line.split()[1].split("=")[0]
        for line in inline_dockerfile(model["services"]["migrate"]).splitlines()
        if line.startswith("ENV ")
    ]
    assert dockerfile_env == ["WAYBILL_GRAPHS"]


def test_a_new_project_with_a_config_and_its_token_in_dotenv(tmp_path: Path) -> None:
    assert new_project(tmp_path / "Demo App", "basic") == 0
    root = tmp_path / "Demo App"
    (root / "waybill.yaml").write_text(
        "default_model: scripted\nmodels:\n  - name: scripted\n    provider: scripted\n"
    )
    with (root / ".env").open("a") as env:
        env.write("WAYBILL_SERVICE_TOKEN=from-the-dotenv-file\n")
    # To stdout, in the project's folder: the paths are relative to it.
    done = waybill("compose", cwd=root)
    ok(done)
    model = yaml.safe_load(done.stdout)
    assert model["name"] == "demo-app"  # a valid compose project name
    services = model["services"]
    for name in WAYBILL_SERVICES:
        service = services[name]
        assert service["image"] == "demo-app:latest"
        assert service["build"]["context"] == "."
        assert service["env_file"] == ["./.env"]
        # The token comes from .env through env_file, not from the file.
        assert "WAYBILL_SERVICE_TOKEN" not in service["environment"]
        assert service["environment"]["WAYBILL_CONFIG"] == "/etc/waybill/waybill.yaml"
        assert "./waybill.yaml:/etc/waybill/waybill.yaml:ro" in service["volumes"]
    assert "from-the-dotenv-file" not in done.stdout
    assert "WAYBILL_SERVICE_TOKEN: from the project's .env" in done.stdout
    # The mounted config is one Waybill reads.
    config = Settings(config=root / "waybill.yaml").config_file()
    assert config.default_model == "scripted"


def test_with_a_wheel_no_waybill_image_is_needed(tmp_path: Path) -> None:
    assert new_project(tmp_path / "demo", "basic") == 0
    root = tmp_path / "demo"
    (root / "dist").mkdir()
    (root / "dist" / "waybill-0.1.0-py3-none-any.whl").write_bytes(b"")
    model, _ = written(
        root, root / "compose.yaml", "--wheel", "dist/waybill-0.1.0-py3-none-any.whl"
    )
    text = inline_dockerfile(model["services"]["runner"])
    assert text.splitlines()[2] == "FROM python:3.11-slim"
    assert "RUN pip install --no-cache-dir /tmp/waybill-0.1.0-py3-none-any.whl" in text
    # The runner's and delivery's volume is mounted where the non-root user may write.
    assert "chown 10001:10001 /data /workspaces" in text
    refused = waybill("compose", "--wheel", "../elsewhere.whl", cwd=root)
    assert refused.returncode == 2 and "outside" in refused.stderr


def test_a_dollar_in_the_dockerfile_is_not_interpolated_by_compose(tmp_path: Path) -> None:
    assert new_project(tmp_path / "demo", "basic") == 0
    manifest = tmp_path / "demo" / "langgraph.json"
    config = json.loads(manifest.read_text())
    config["dockerfile_lines"] = ['RUN echo "$HOME ${PATH}"']
    manifest.write_text(json.dumps(config))
    model, text = written(tmp_path / "demo", tmp_path / "demo" / "compose.yaml")
    assert 'RUN echo "$$HOME $${PATH}"' in text
    assert 'RUN echo "$HOME ${PATH}"' in inline_dockerfile(model["services"]["gateway"])


def test_the_chart_serves_the_same_image(tmp_path: Path) -> None:
    from tests.repo.test_helm import render, values_of
    from waybill.cli.compose import helm_image

    model, text = written(EXAMPLE, tmp_path / "compose.yaml", "-t", "registry:5000/me/agent:1.2")
    image = model["services"]["runner"]["image"]
    assert image == "registry:5000/me/agent:1.2"
    assert "--set image.repository=registry:5000/me/agent --set image.tag=1.2" in text
    assert helm_image("registry:5000/me/agent") == {
        "repository": "registry:5000/me/agent",
        "tag": "latest",
    }
    docs = render({**values_of("dev"), "image": {**helm_image(image), "pullPolicy": "Never"}})
    pods = [
        doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] in ("Deployment", "Job", "StatefulSet")
    ]
    containers = [c for pod in pods for c in pod.get("initContainers", []) + pod["containers"]]
    waybills = {c["image"] for c in containers if "postgres" not in c["image"]}
    assert waybills == {image}


def has_docker_compose() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    if not has_docker_compose():
        pytest.skip("docker compose (v2) is not installed here: the model is checked above")
    written(EXAMPLE, tmp_path / "compose.yaml")
    done = subprocess.run(
        ["docker", "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
