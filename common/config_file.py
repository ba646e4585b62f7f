"""The YAML config file (`WAYBILL_CONFIG`): the sections that are lists and tables
(models, auth, prices, channels, the agent's parts, quotas), each with its own
model. The file is read strictly: an unknown key anywhere in it is refused at
start-up, naming the key and the file.

Each field's comments are its description in docs/configuration.md (see
common/setting_sections.py).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from waybill.common.model_overrides import REASONING_EFFORTS
from waybill.common.setting_sections import SECTIONS
from waybill.common.usage import Price

# The environment's settings: a YAML key named as one of them is pointed there.
ENVIRONMENT_FIELDS = frozenset(name for section in SECTIONS for name in section.model_fields)


class ModelSpec(BaseModel):
    """One entry of the `models` list in the YAML config; its name is allowlisted.

    `provider` is `scripted` or any LangChain chat model provider (see
    services/runner/graphs/model_providers.py); `model: "anthropic:claude-…"` sets both,
    as langchain's `init_chat_model` reads it."""

    model_config = ConfigDict(extra="forbid")  # provider-specific extras go in `options`

    name: str  # what runs ask for (`model_name`)
    provider: str = "scripted"  # scripted | openai | anthropic | … | "package.module:Class"
    model: str | None = None  # provider-side model name
    base_url: str | None = None  # the provider's endpoint (an OpenAI-compatible server…)
    api_key_env: str | None = None  # name of the env var holding the key
    options: dict[str, Any] = Field(default_factory=dict)  # more arguments of its class
    # none | minimal | low | medium | high: OpenAI's `reasoning_effort`, Anthropic's
    # thinking budget (a run or its assistant may ask for another).
    reasoning_effort: str | None = None
    # Request parameters this provider refuses: never sent, whoever set them.
    drop_params: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _provider_prefix(cls, data: Any) -> Any:
        """`model: "provider:model"` without a `provider`: the prefix is the provider."""
        if isinstance(data, dict) and "provider" not in data:
            provider, colon, model = str(data.get("model") or "").partition(":")
            if colon and provider and model:
                return {**data, "provider": provider, "model": model}
        return data

    @model_validator(mode="after")
    def _known_effort(self) -> ModelSpec:
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}")
        return self


DEFAULT_MODELS = [ModelSpec(name="scripted", provider="scripted")]


class PrincipalSpec(BaseModel):
    """One entry of `auth.principals` in the YAML config: an API key's owner.

    Only the key's SHA-256 is stored (`key_sha256`, hex). Without `scopes`, the
    role's defaults apply (see `gateway/auth.py`)."""

    model_config = ConfigDict(extra="forbid")

    user_id: str  # whom its threads and runs belong to
    role: str = "user"  # admin | user
    scopes: list[str] | None = None  # unset: the role's
    key_sha256: str  # the SHA-256 of its API key, in hex


class PriceSpec(Price):
    """One entry of the YAML `prices` table (a misspelt rate is refused, not free)."""

    model_config = ConfigDict(extra="forbid")


class AuthSection(BaseModel):
    """The YAML `auth` section."""

    model_config = ConfigDict(extra="forbid")

    principals: list[PrincipalSpec] = Field(default_factory=list)  # API keys' owners
    role_tools: dict[str, list[str]] = Field(default_factory=dict)  # role -> its only tools


class MemorySection(BaseModel):
    """The YAML `memory` section: facts about each user, extracted by the model after
    their runs of the lead agent and shown in their next runs' system prompt."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False  # true: each user's facts remembered
    model: str | None = None  # a `models` name; default: `default_model`
    max_facts: int = Field(default=100, ge=1, le=1000)  # the oldest go beyond it


class SummarizationSection(BaseModel):
    """The YAML `summarization` section: a long history summarized, not trimmed."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False  # true: a long history summarized
    model: str | None = None  # a `models` name; default: the run's model
    # Summarize when the history is estimated above this many tokens (or longer
    # than WAYBILL_HISTORY_LIMIT messages).
    trigger_tokens: int = Field(default=100_000, ge=1)
    keep_messages: int = Field(default=20, ge=1)  # the newest, shown as they are


class TitlesSection(BaseModel):
    """The YAML `titles` section: a new thread's title, made after its first run."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False  # true: each new thread given a title
    model: str | None = None  # a `models` name; default: `default_model`
    max_chars: int = Field(default=80, ge=8, le=500)  # a title's length at most


class KubernetesSandboxSpec(BaseModel):
    """`sandbox.kubernetes`: where and how the Kubernetes provider makes its pods."""

    model_config = ConfigDict(extra="forbid")

    # The API server; unset: the in-cluster one (KUBERNETES_SERVICE_HOST/PORT).
    api_url: str | None = None
    namespace: str = "waybill-sandboxes"  # where its pods are made
    image: str = "python:3.12-slim"  # the pods' image
    # In-cluster defaults: the pod's service account token and CA.
    token_file: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    ca_file: Path | None = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    # The claim holding every thread's workspace (the runner's `/workspaces` volume).
    workspaces_claim: str = "waybill-workspaces"
    ready_seconds: float = Field(default=120.0, gt=0)  # a pod not running by then: the lease fails
    poll_seconds: float = Field(default=0.5, gt=0)  # how often its status is read meanwhile


class SandboxSpec(BaseModel):
    """The YAML `sandbox` section: `bash` and `python` tools run in a sandbox per run."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["local", "kubernetes"] = "local"  # local: bubblewrap; kubernetes: pods
    # strict: a limit that cannot be enforced refuses the sandbox; best_effort: it runs
    # with what holds (the lease record lists the rest); unconfined: a plain subprocess.
    confinement: Literal["strict", "best_effort", "unconfined"] = "strict"
    network: bool = False  # false: the sandbox reaches no network at all
    cpu_seconds: int = Field(default=30, gt=0)  # CPU time of one command
    memory_mb: int = Field(default=512, gt=0)  # memory of the sandbox (and of each process)
    processes: int = Field(default=64, gt=0)  # processes (and threads) at once
    disk_mb: int = Field(default=256, gt=0)  # the local sandbox's /workspace (a tmpfs)
    # local: the cgroup under which each sandbox gets one (a path inside the cgroup
    # tree, delegated to the runner's user); unset: the runner's own cgroup.
    cgroup_parent: str | None = None
    file_mb: int = Field(default=64, gt=0)  # the largest file it may write
    output_bytes: int = Field(default=64 * 1024, gt=0)  # stdout + stderr kept per command
    timeout_seconds: float = Field(default=120.0, gt=0)  # wall clock of one command
    # With auth off the sandbox's tools are offered only when this says so
    # (common/auth_mode.py, docs/security.md).
    allow_without_auth: bool = False
    kubernetes: KubernetesSandboxSpec = Field(default_factory=KubernetesSandboxSpec)


class SubagentSpec(BaseModel):
    """One entry of the YAML `subagents` list: an agent the lead delegates to with `task`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")  # what `task` calls it by
    description: str  # the lead agent reads it to choose
    prompt: str  # the subagent's system prompt
    tools: list[str] = Field(default_factory=list)  # among the run's authorized tools
    model: str | None = None  # a configured model; default: the run's model
    max_turns: int = Field(default=25, gt=0)  # model turns before it must answer

    @model_validator(mode="after")
    def _no_nesting(self) -> SubagentSpec:
        for name in ("task", "ask_clarification"):
            if name in self.tools:
                raise ValueError(f"subagent {self.name!r} may not use `{name}` (runs in a task)")
        return self


class McpServerSpec(BaseModel):
    """One entry of the YAML `mcp_servers` (server name -> this): the connection
    shape langchain-mcp-adapters' `MultiServerMCPClient` takes, and what Waybill
    adds (the `*_env` secrets, tool names, idempotent tools)."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio", "streamable_http"]  # how it is reached
    # stdio: the server's process.
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    # streamable_http: where it listens, the headers it wants, and headers whose
    # values are read from environment variables (header -> variable name).
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, str] = Field(default_factory=dict)
    # true: its tools are named "<server>_<tool>" (two servers may share tool names).
    tool_name_prefix: bool = False
    # Tools that may be called again with the same arguments without harm; every
    # other MCP tool is taken as one that must not be repeated.
    idempotent_tools: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _connection_whole(self) -> McpServerSpec:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio MCP server needs a `command`")
        if self.transport == "streamable_http" and not self.url:
            raise ValueError("a streamable_http MCP server needs a `url`")
        return self


class QuotaLimits(BaseModel):
    """One set of limits in the YAML `quotas` section (`default`, a role's, a
    principal's). Unset: no limit of that kind (or the wider set's, see
    `QuotasSection.limits_for`)."""

    model_config = ConfigDict(extra="forbid")

    max_active_runs: int | None = Field(default=None, ge=0)  # pending + running at once
    max_pending_runs: int | None = Field(default=None, ge=0)  # waiting for a runner at once
    runs_per_minute: int | None = Field(default=None, ge=1)  # creations, GCRA over the minute
    # How many creations may come at once within runs_per_minute; unset: the whole minute's.
    burst: int | None = Field(default=None, ge=1)
    tokens_per_day: int | None = Field(default=None, ge=0)  # the ledger's tokens since the reset
    cost_per_day: float | None = Field(default=None, ge=0)  # the ledger's cost, in `prices` units


class RunBudget(BaseModel):
    """The YAML `quotas.run`: one run's own budget, enforced by the runner (a run
    past it stops at its next boundary); a request may lower it (common/run_budget.py)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1)  # tokens one run may spend
    max_cost: float | None = Field(default=None, gt=0)  # cost one run may spend, in `prices` units


class GatewayQuota(BaseModel):
    """The YAML `quotas.gateway`: per API key, counted by each gateway process alone."""

    model_config = ConfigDict(extra="forbid")

    requests_per_second: float | None = Field(default=None, gt=0)  # every route, per key


QUOTA_LIMIT_NAMES = tuple(QuotaLimits.model_fields)


class QuotasSection(BaseModel):
    """The YAML `quotas` section (docs/configuration.md, "Quotas"): limits checked
    where every run is admitted, exact across admission replicas."""

    model_config = ConfigDict(extra="forbid")

    default: QuotaLimits = Field(default_factory=QuotaLimits)  # everyone's
    roles: dict[str, QuotaLimits] = Field(default_factory=dict)  # role -> over the default
    principals: dict[str, QuotaLimits] = Field(default_factory=dict)  # user id -> over its role's
    run: RunBudget = Field(default_factory=RunBudget)
    gateway: GatewayQuota = Field(default_factory=GatewayQuota)
    reset_hour_utc: int = Field(default=0, ge=0, le=23)  # when a day's tokens and cost start again

    def limits_for(self, user_id: str, role: str) -> QuotaLimits:
        """The default, then the role's, then the principal's: each key set wins."""
        merged = self.default.model_dump(exclude_none=True)
        for wider in (self.roles.get(role), self.principals.get(user_id)):
            if wider is not None:
                merged.update(wider.model_dump(exclude_none=True))
        return QuotaLimits(**merged)


class ConfigFile(BaseSettings):
    """The YAML config file (`WAYBILL_CONFIG`). Read from that file alone (its
    sections are no environment variables), and strictly: see `read_config_file`."""

    model_config = SettingsConfigDict(extra="forbid")

    default_model: str | None = None  # a `models` name; default: the first of them
    models: list[ModelSpec] = Field(default_factory=list)  # empty: `scripted` alone
    auth: AuthSection = Field(default_factory=AuthSection)  # who may call the API (docs/auth.md)
    prices: dict[str, PriceSpec] = Field(default_factory=dict)  # model name -> its price
    # Chat platforms that start runs (docs/channels.md), checked by the delivery
    # service, which knows the platforms (services/delivery/channels/config.py).
    channels: list[dict[str, Any]] = Field(default_factory=list)
    memory: MemorySection = Field(default_factory=MemorySection)
    summarization: SummarizationSection = Field(default_factory=SummarizationSection)
    titles: TitlesSection = Field(default_factory=TitlesSection)
    # Per-user limits on runs and spend, and per key at the gateway ("Quotas" below).
    quotas: QuotasSection = Field(default_factory=QuotasSection)

    def _model_names(self) -> set[str]:
        """The names a section may give as its model: those of `models`, or the default's."""
        return {spec.name for spec in self.models or DEFAULT_MODELS}

    @model_validator(mode="after")
    def _harness_models_configured(self) -> ConfigFile:
        """A model named by `memory`, `summarization` or `titles` must be configured."""
        names = self._model_names()
        for section in ("memory", "summarization", "titles"):
            model = getattr(self, section).model
            if model is not None and model not in names:
                known = ", ".join(sorted(names))
                raise ValueError(f"{section}.model: '{model}' is not in `models` ({known})")
        return self

    sandbox: SandboxSpec | None = None  # unset: no `bash` / `python` tools
    subagents: list[SubagentSpec] = Field(default_factory=list)  # empty: no `task` tool

    @model_validator(mode="after")
    def _subagents_known(self) -> ConfigFile:
        names = [agent.name for agent in self.subagents]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"subagents: each name once ({', '.join(twice)} repeated)")
        models = self._model_names()
        for agent in self.subagents:
            if agent.model is not None and agent.model not in models:
                raise ValueError(
                    f"subagent {agent.name!r}: model {agent.model!r} is not in `models` "
                    f"({', '.join(sorted(models))})"
                )
        return self

    # The lead agent's MCP servers: name -> connection (services/runner/agent/mcp_tools.py).
    mcp_servers: dict[str, McpServerSpec] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """`auth:` with nothing under it is YAML's null: an empty section, not an error."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Its sections are never environment variables (those are `Settings`).
        return (init_settings,)


class ConfigError(ValueError):
    """The YAML config cannot be used; the message names the file and what is wrong."""


def read_config_file(path: Path) -> ConfigFile:
    """The YAML file at `path`, validated; `ConfigError` on an unknown key, a value
    of the wrong shape, a file that is not YAML or not there."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (WAYBILL_CONFIG)")
    try:
        return ConfigFile.model_validate(YamlConfigSettingsSource(ConfigFile, yaml_file=path)())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    except ValidationError as error:
        raise ConfigError(f"{path}: " + "; ".join(map(_problem, error.errors()))) from None
    except (TypeError, ValueError):  # the top level is a list or a scalar
        raise ConfigError(f"{path}: the top level must be a mapping of sections") from None


def _problem(error: Any) -> str:
    """One validation error, said without its input (a channel entry holds secrets)."""
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] != "extra_forbidden":
        return f"{where}: {error['msg']}"
    said = f"unknown key `{where}`"
    known = _known_keys(error["loc"])
    close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
    if close:
        return f"{said} (did you mean `{close[0]}`?)"
    if len(error["loc"]) == 1 and str(error["loc"][0]) in ENVIRONMENT_FIELDS:
        return f"{said}: it is a setting of the environment, WAYBILL_{str(error['loc'][0]).upper()}"
    return f"{said} (known: {', '.join(known)})"


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model that refused the last part of `loc` knows."""
    model: Any = ConfigFile
    for part in loc[:-1]:
        if model is not None and part in model.model_fields:  # else a list index or dict key
            model = _model_in(model.model_fields[part].annotation)
    return sorted(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> Any:
    """The pydantic model a field holds, itself or in a list or a dict's values."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()):
        found = _model_in(argument)
        if found is not None:
            return found
    return None
