"""The YAML config (`WAYBILL_CONFIG`): a valid file loads, an unknown key is refused
naming the key and the file (at a service's start, not at its first use), and the
environment keeps the flat settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stacks import stack_env
from waybill.common.settings import Settings

VALID = """
default_model: small
models:
  - name: scripted
  - name: small
    provider: openai
    model: gpt-4o-mini
    base_url: http://127.0.0.1:9/v1
    api_key_env: SMALL_KEY
    options: {temperature: 0}
auth:
  principals:
    - user_id: alice
      role: admin
      key_sha256: "00ff"
  role_tools:
    user: [web_search]
prices:
  small: {input_per_million: 0.15, output_per_million: 0.6}
channels:
  - name: support
    platform: webhook
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "waybill.yaml"
    path.write_text(text)
    return path


def test_a_valid_file_loads_every_section(tmp_path: Path) -> None:
    settings = Settings(config=write(tmp_path, VALID))
    assert [model.name for model in settings.models()] == ["scripted", "small"]
    [_, small] = settings.models()
    assert (small.provider, small.model, small.base_url) == (
        "openai",
        "gpt-4o-mini",
        "http://127.0.0.1:9/v1",
    )
    assert (small.api_key_env, small.options) == ("SMALL_KEY", {"temperature": 0})
    assert settings.default_model() == "small"
    [alice] = settings.principals()
    assert (alice.user_id, alice.role, alice.key_sha256) == ("alice", "admin", "00ff")
    assert settings.auth_enabled
    assert settings.role_tools() == {"user": ["web_search"]}
    price = settings.prices()["small"]
    assert (price.input_per_million, price.output_per_million) == (0.15, 0.6)
    assert settings.config_file().channels == [{"name": "support", "platform": "webhook"}]


def test_empty_sections_and_no_file_mean_the_defaults(tmp_path: Path) -> None:
    settings = Settings(config=write(tmp_path, "auth:\nmodels:\n"))
    assert [model.name for model in settings.models()] == ["scripted"]
    assert settings.principals() == [] and not settings.auth_enabled
    assert settings.default_model() == "scripted"
    assert Settings().models() == settings.models()


def test_a_misspelt_section_is_refused_naming_the_key_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  - name: gpt-4o-mini\n    provider: openai\n")
    with pytest.raises(ValueError) as refused:
        Settings(config=path).models()
    message = str(refused.value)
    assert str(path) in message
    assert "unknown key `model` (did you mean `models`?)" in message


def test_unknown_keys_inside_sections_are_refused_too(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "models:\n  - name: m\n    api_key: sk-x\n"
        "prices:\n  m: {input_per_milion: 1}\n"
        "auth:\n  principal: []\n",
    )
    with pytest.raises(ValueError) as refused:
        Settings(config=path).models()
    message = str(refused.value)
    assert "unknown key `models.0.api_key` (did you mean `api_key_env`?)" in message
    assert "unknown key `prices.m.input_per_milion` (did you mean `input_per_million`?)" in message
    assert "unknown key `auth.principal` (did you mean `principals`?)" in message
    assert "sk-x" not in message  # values are never echoed (channel entries hold secrets)


def test_a_flat_setting_in_the_file_is_refused_and_its_variable_named(tmp_path: Path) -> None:
    """The environment holds the flat settings: the file never did (its `http_port`
    was silently ignored), and now says where it goes instead."""
    path = write(tmp_path, "http_port: 9999\n")
    with pytest.raises(ValueError, match="unknown key `http_port`.*WAYBILL_HTTP_PORT"):
        Settings(config=path).models()


def test_the_environment_keeps_the_flat_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAYBILL_CONFIG", str(write(tmp_path, VALID)))
    monkeypatch.setenv("WAYBILL_HTTP_PORT", "9123")
    settings = Settings()
    assert settings.http_port == 9123
    assert settings.default_model() == "small"
    assert Settings(http_port=9124).http_port == 9124  # arguments over the environment


def test_a_file_that_is_not_there_or_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        Settings(config=tmp_path / "missing.yaml").models()
    with pytest.raises(ValueError, match="top level must be a mapping"):
        Settings(config=write(tmp_path, "- models\n")).models()


def test_a_service_with_a_misspelt_config_does_not_start(tmp_path: Path) -> None:
    """Refused at start-up, before it serves: not at the first run that reads the models."""
    path = write(tmp_path, "model:\n  - name: scripted\n")
    env = {**os.environ, **stack_env(tmp_path / "data"), "WAYBILL_CONFIG": str(path)}
    done = subprocess.run(
        [sys.executable, "-m", "waybill.services.journal.server"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"{path}: unknown key `model` (did you mean `models`?)" in done.stderr


def test_doctor_reports_a_misspelt_config_and_goes_on(tmp_path: Path) -> None:
    """`waybill doctor` says what is wrong with the file as a finding, not a traceback."""
    path = write(tmp_path, "model:\n  - name: scripted\n")
    env = {**os.environ, **stack_env(tmp_path / "data"), "WAYBILL_CONFIG": str(path)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "waybill"), "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    config = f"FAIL  config              {path}: unknown key `model` (did you mean `models`?)"
    assert config in done.stdout.splitlines()
    assert "ok    graphs" in done.stdout and "Traceback" not in done.stderr
