"""Settings, read once from the environment (prefix `WAYBILL_`) and the YAML config.

The environment holds the flat settings (ports, addresses, timers); the YAML file
(`WAYBILL_CONFIG`) holds the sections that are lists and tables: models, auth,
prices, channels. Each has its own model below, and the file's is strict: an
unknown key anywhere in it is refused at start-up, naming the key and the file.

Every timer lives here so that tests can shorten it. Each field's comments are its
description in docs/configuration.md, which `make docs` generates from them
(cli/config_reference.py): a comment block above a run of fields describes them all.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from waybill.common.model_overrides import REASONING_EFFORTS
from waybill.common.platform_env import PlatformEnvSource, postgresql_driver_url
from waybill.common.project import GraphSpec, Project, ProjectError
from waybill.common.usage import Price

BUILTIN_GRAPHS = {"lead_agent": "waybill.services.runner.lead_agent:build_lead_agent"}


class ModelSpec(BaseModel):
    """One entry of the `models` list in the YAML config; its name is allowlisted.

    `provider` is `scripted` or any LangChain chat model provider (see
    services/runner/model_providers.py); `model: "anthropic:claude-…"` sets both,
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
    if len(error["loc"]) == 1 and str(error["loc"][0]) in Settings.model_fields:
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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WAYBILL_", extra="ignore")
    _config_file: ConfigFile | None = PrivateAttr(default=None)
    _project: Project | None = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # LangGraph Platform's names (DATABASE_URI…), after the WAYBILL_ ones.
        platform = PlatformEnvSource(settings_cls)
        return (init_settings, env_settings, platform, dotenv_settings, file_secret_settings)

    http_port: int = 8080  # the gateway's HTTP port
    http_host: str = "127.0.0.1"  # the gateway's bind address
    data_dir: Path = Path(".waybill")  # the SQLite files (one per service), the checkpoints
    # Postgres for every service and the checkpointer (postgres://, postgresql://,
    # postgresql+asyncpg://…); unset: SQLite files in the data directory.
    database_url: str | None = None
    # Redis for the journal: run numbering and live fan-out shared by any number of
    # journal replicas; unset: one journal replica, fan-out in memory.
    redis_url: str | None = None
    # Each service's Postgres connections: this many kept, and up to overflow more.
    db_pool_size: int = 5
    db_max_overflow: int = 10
    # A pooled Postgres connection idle this long is pinged before use (sql.py): any
    # restart of the server takes longer, so a connection it killed is found.
    db_ping_idle_seconds: float = 0.1
    graphs: Path | None = None  # a langgraph.json whose `graphs` section is served
    builtin_graphs: bool = True  # false: only the project's graphs (no lead_agent)
    config: Path | None = None  # the YAML config: models, auth, the agent's parts, channels
    # Comma-separated origins a browser may call the API from (named ones may send
    # credentials, `*` may not); with auth off and this unset: gateway/browser_guard.py.
    cors_origins: str = "*"
    # With auth off, the Host names the gateway answers besides loopback ones
    # (comma-separated; ".example.com" adds subdomains); any other Host is refused.
    allowed_hosts: str = ""
    # The largest HTTP request body the gateway takes (413 beyond it, before any
    # service is called); uploads are limited per file by upload_max_bytes instead.
    max_request_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    # Every gRPC channel and server's largest message. Well above the request limit:
    # a run's input is copied into its state, and its state into events.
    grpc_max_message_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # Answer a browser's private-network preflight (Chrome's Private Network Access:
    # a public page, such as LangGraph Studio, calling a loopback or LAN server).
    # `waybill dev` turns it on, as `langgraph dev` sets ALLOW_PRIVATE_NETWORK.
    allow_private_network: bool = False
    # Auth is on when this or internal_token is set, or the YAML config lists
    # `auth.principals`.
    api_key: str | None = None  # quick start: one admin principal with this key
    # The channel adapters' and scheduler's token; they act on behalf of an owner.
    internal_token: str | None = None
    # The services' credential on every gRPC call (common/service_token.py); the
    # embedded default makes one in the data directory, a scaled deployment sets it.
    service_token: str | None = None
    # Fernet key sealing `context.secrets` at rest (see common/sealed.py).
    secrets_key: str | None = None

    # Mutual TLS between the services (see common/grpc_channels.py): the CA that
    # signs every service's certificate, and this process's own. All three or none.
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Each gRPC service's plaintext health port: the standard health service alone,
    # for probes that cannot present a client certificate (kubelet's). Unset: none.
    admission_health_port: int | None = None
    runner_health_port: int | None = None
    journal_health_port: int | None = None
    delivery_health_port: int | None = None
    health_host: str = "127.0.0.1"  # the health ports' address (0.0.0.0 in a container)

    # Where each gRPC service listens and is dialled. The embedded launcher picks
    # free loopback ports for those unset, or WAYBILL_GRPC_BASE_PORT and the next
    # three (common/ports.py); a port in use stops the stack at once.
    admission_addr: str = "127.0.0.1:50151"
    runner_addr: str = "127.0.0.1:50152"
    journal_addr: str = "127.0.0.1:50153"
    delivery_addr: str = "127.0.0.1:50154"
    # Where the gateway sends graph-side reads (state, history, graphs): any runner
    # can answer. A gRPC target such as "ipv4:10.0.0.1:50152,10.0.0.2:50152" or
    # "dns:///runner:50152"; round-robin over the healthy ones. Default: runner_addr.
    runner_read_target: str | None = None
    # A graph-side read refused because its runner died is retried on another
    # runner after this (doubling, 4 tries in all).
    runner_read_backoff_seconds: float = 0.2

    idempotency_seconds: float = 86400.0  # how long an Idempotency-Key is remembered
    runner_slots: int = 10  # runs one runner executes at once (N_JOBS_PER_WORKER)
    # Threads lent to sync nodes and tools (services/runner/node_threads.py).
    runner_node_threads: int = Field(default=32, ge=1)
    # The runner's scheduling priority (nice, 0-19): on a machine it shares with
    # admission and the gateway, runs executing yield the CPU to runs being admitted.
    runner_nice: int = Field(default=10, ge=0, le=19)
    lease_seconds: float = 30.0  # a claimed run is the runner's for this long without renewal
    lease_renew_seconds: float | None = None  # how often leases are renewed; default: lease/3
    max_attempts: int = 3  # takeovers after lost leases, then the run ends `error`
    # A runner whose event loop has not turned for this long is wedged: it stops
    # renewing its leases (renewed meanwhile from a thread of their own), so that
    # its runs are taken over by a runner that can run them.
    runner_loop_wedged_seconds: float = Field(default=300.0, gt=0)
    run_timeout_seconds: float = 3600.0  # a run still going after this ends `timeout`
    # An ended run's runner closes its journal log at once; if it has not (it died
    # right after its terminal write), admission closes it this long after the end,
    # retrying every log_close_retry_seconds while the journal cannot be reached.
    log_close_grace_seconds: float = 10.0
    log_close_retry_seconds: float = 5.0
    reconnect_seconds: float = 0.5  # runner -> admission work stream retry delay
    dispatch_retry_seconds: float = 0.5  # the next dispatch pass after one that failed
    # Stopping a background loop (common/background.py) lets the pass in progress
    # finish for this long, then cancels it.
    loop_stop_seconds: float = 5.0
    rpc_timeout_seconds: float = 30.0  # deadline of each call a run makes to a peer
    # A run's calls at its end (journal flush and close, receipt, confirmation,
    # records) are retried while their peer is away, for this long in all; past
    # it the run is handed back to be resumed, not ended `error`.
    dependency_outage_seconds: float = Field(default=60.0, ge=0)
    # The longest a channel waits before dialling a lost peer again (gRPC's own
    # default grows to 120 s).
    grpc_reconnect_max_seconds: float = Field(default=2.0, gt=0)
    shutdown_grace_seconds: float = 10.0  # a stopping service lets in-flight work finish
    # A cancel lets a tool that is executing finish (and record its result) for this
    # long, then cuts it; new model and tool calls never start after a cancel.
    cancel_grace_seconds: float = 10.0
    # Record each model response, so that a takeover replays it (services/runner/model_calls.py).
    record_model_calls: bool = True
    sse_heartbeat_seconds: float = 15.0  # an idle SSE stream's `: heartbeat` comment
    # How often an open thread stream asks admission for runs it has not seen yet.
    thread_stream_poll_seconds: float = 0.5
    # `wait` and `join` send a newline this often while the run goes on (leading
    # whitespace a JSON parser skips), so that proxies keep the connection, as
    # LangGraph Platform does every 5 s.
    wait_keepalive_seconds: float = 5.0
    # The gateway's `/ok` asks each peer's health with this deadline.
    ready_check_timeout_seconds: float = 1.0
    # `DELETE /threads/{id}` cancels the thread's active runs and waits this long
    # for them to stop before it deletes; past it, 409 (retry).
    thread_delete_stop_seconds: float = 30.0
    # A stopping gateway lets open SSE streams run this long (a run about to end
    # finishes its stream), then ends them; clients resume with Last-Event-ID.
    # Keep it below shutdown_grace_seconds, the gateway's whole drain.
    stream_drain_seconds: float = 3.0
    journal_batch_max: int = 512  # events in one SQL write, and in one read from Redis
    # The journal's SQL write of live events waits this long for more events before
    # it commits (a flush or a full batch ends the wait at once): fewer, larger
    # writes for a streaming run. Live readers never wait for it.
    journal_write_linger_seconds: float = 0.01
    # A run's typed records (LLM/tool lifecycle, usage) wait this long to be sent
    # in one batch, off the path of the run's first token; the run's end sends at once.
    record_linger_seconds: float = 1.0
    # ---- journal: live fan-out, replay, retention (see services/journal/hub.py) ----
    # Events a live subscriber may have waiting; past that it is counted as an
    # overflow and catches up from the log instead, so it never slows anyone.
    subscriber_buffer: int = 1024
    # A run's events are kept this long after it ends, then swept (default 7 days).
    journal_retention_seconds: float = 7 * 86400.0
    journal_sweep_seconds: float = 3600.0  # how often the retention sweep runs
    journal_evict_seconds: float = 30.0  # an ended run's log leaves memory after this
    # With WAYBILL_REDIS_URL: the key prefix (one installation per prefix), how long
    # an ended run's Redis stream stays for fast replays (then SQL serves it), how
    # long an append or close retries an unreachable Redis before failing, how long
    # one blocking read of a run's stream waits, and how often a subscriber that
    # lost Redis polls the SQL log (and tries Redis again).
    journal_redis_prefix: str = "waybill:journal"
    journal_redis_ttl_seconds: float = 600.0
    journal_redis_retry_seconds: float = 15.0
    journal_redis_block_seconds: float = 5.0
    # Connections each journal replica opens to Redis at most, per pool (commands;
    # blocking reads: one per run followed live). A caller beyond them waits for
    # one (never an error that would send live readers to poll SQL instead).
    journal_redis_connections: int = 1000
    journal_poll_seconds: float = 0.2  # a reader that lost Redis polls the SQL log this often
    # With Redis: each journal replica's heartbeat in SQL, and how long a replica's
    # heartbeat may stop before the others, re-seeding a run's numbering after Redis
    # lost its state, stop waiting for it (services/journal/replicas.py).
    journal_heartbeat_seconds: float = 1.0
    journal_replica_dead_seconds: float = 5.0
    startup_timeout_seconds: float = 60.0  # the launcher's wait for every service to be ready
    # A migration run waiting for another one (on Postgres), or `migrate --wait`
    # waiting for the migration Job, checks this often.
    migrate_lock_poll_seconds: float = 0.5
    # ---- observability (see docs/operations.md "Observability") ----
    # Each gRPC service's Prometheus `/metrics` HTTP port; unset: not served. The
    # gateway serves `/metrics` on its own HTTP port always.
    admission_metrics_port: int | None = None
    runner_metrics_port: int | None = None
    journal_metrics_port: int | None = None
    delivery_metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"  # the metrics ports' address (0.0.0.0 in a container)
    # OTLP/gRPC collector for traces ("http://collector:4317"); unset (and no
    # OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): tracing is off.
    otlp_endpoint: str | None = None
    otlp_export_seconds: float = 1.0  # how often finished spans are sent in a batch
    # auto: human lines on a terminal, JSON lines otherwise (a file, a collector).
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: str = "info"  # debug | info | warning | error (also LOG_LEVEL)
    # A failed run's `error` event carries its traceback (the runner's log always
    # has it); `waybill dev` turns it on.
    error_tracebacks: bool = False

    # ---- crons (see services/admission/scheduler.py) ----
    # The scheduler sleeps until the next firing is due, but never longer than
    # this (a safety net: a create or update on any replica wakes it at once).
    cron_max_sleep_seconds: float = 60.0
    # Firings missed while no admission ran (downtime): "skip" them (only the
    # next due one fires) or "catch_up" (each fires, oldest first).
    cron_missed_firings: Literal["skip", "catch_up"] = "skip"
    # A firing found this late or later counts as missed (else it just fires late).
    cron_misfire_grace_seconds: float = 60.0
    # A firing claimed but not recorded after this long (its replica died between
    # the two) is fired again by any replica; its idempotency key keeps it one run.
    cron_reclaim_seconds: float = 60.0
    # How often admission sweeps threads whose TTL expired (thread_ttl.py), when
    # langgraph.json's checkpointer.ttl names no sweep_interval_minutes
    # (LangGraph Platform's default: 5 minutes).
    thread_ttl_sweep_seconds: float = Field(default=300.0, gt=0)
    # Tests only: a file holding the scheduler's "now" (RFC 3339), so that a
    # simulated hour passes in seconds. Unset: the real clock.
    cron_clock_file: Path | None = None

    # Each thread's workspace lives under this root. Runner and delivery must see
    # the same files: a local directory embedded, a shared volume when scaled.
    workspaces_dir: Path | None = None  # default: <data_dir>/workspaces
    # The deadline of one host-side file operation on a workspace (a download's
    # open or read, a snapshot, an upload, removing a thread's tree): 504 beyond it.
    workspace_io_seconds: float = Field(default=60.0, gt=0)
    # ---- delivery: outputs, uploads and webhooks (see services/delivery/) ----
    upload_max_bytes: int = 32 * 1024 * 1024  # one uploaded file at most
    # HMAC-SHA256 key signing every webhook (X-Waybill-Signature); the embedded
    # default makes a key file in the data directory, Postgres deployments set it.
    webhook_secret: str | None = None
    # Hosts a webhook may go to: comma-separated; ".example.com" adds subdomains; empty: any.
    webhook_allowed_hosts: str = ""
    webhook_allow_networks: str = ""  # CIDRs a webhook may reach although private/loopback
    webhook_timeout_seconds: float = 10.0  # one POST's deadline
    webhook_retry_seconds: float = 86400.0  # a webhook is retried this long, then `failed`
    webhook_backoff_seconds: float = 1.0  # first retry delay; doubled after each failure
    webhook_backoff_max_seconds: float = 600.0  # the longest delay between two attempts
    webhook_poll_seconds: float = 1.0  # how often the outbox looks for due webhooks
    # A webhook held longer than this (its runner never confirmed the terminal
    # status) is settled by asking admission how the run ended.
    webhook_held_seconds: float = 10.0
    deferred_tools_threshold: int = 12  # more authorized tools than this: use tool_search
    # MCP servers (YAML `mcp_servers`): how long a connection may take to open, how
    # long one tool call may take, and how soon a server that could not be reached
    # is tried again (meanwhile its tools answer that it is unavailable).
    mcp_connect_timeout_seconds: float = 10.0
    mcp_call_timeout_seconds: float = 60.0
    mcp_retry_seconds: float = 5.0
    history_limit: int = 200  # messages the lead agent's model sees at most
    # Subagents (`task` calls) of one run working at once; more wait for a turn.
    subagents_max_parallel: int = Field(default=3, gt=0)

    # ---- IM channels (services/delivery/channels; the `channels` YAML section) ----
    channel_edit_seconds: float = 1.0  # a streamed answer is edited at most this often
    channel_http_timeout_seconds: float = 30.0  # each call to a platform's API
    channel_poll_seconds: float = 25.0  # Telegram getUpdates, Matrix /sync: how long one waits
    channel_poll_retry_seconds: float = 2.0  # pause after a failed poll, or while not leader
    channel_leader_seconds: float = 30.0  # the lease on a channel's inbound connection (in SQL)
    # A replica streaming an answer holds it under this lease; a dead replica's
    # answers are adopted by another one, which looks for them this often.
    channel_reply_lease_seconds: float = 30.0
    channel_reply_sweep_seconds: float = 5.0
    # Inbound event ids are remembered this long (platforms retry for hours, not
    # days), and the forgetting runs this often.
    channel_dedupe_seconds: float = 7 * 86400.0
    channel_dedupe_sweep_seconds: float = 3600.0
    # A platform call refused for its rate (429, Retry-After, the platform's own
    # codes) or failing for a while is tried again this many times, waiting as the
    # platform asks or doubling from the first wait, never longer than the cap.
    channel_retry_attempts: int = 5
    channel_retry_first_seconds: float = 0.5
    channel_retry_max_seconds: float = 30.0
    # A signed delivery whose timestamp is further than this from now is a replay.
    channel_max_skew_seconds: float = 300.0

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, url: str | None) -> str | None:
        return postgresql_driver_url(url)  # postgres:// and postgresql:// too

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        if level.strip().lower() not in ("debug", "info", "warning", "error", "critical"):
            raise ValueError(f"log level {level!r}: use debug, info, warning or error")
        return level.strip().lower()

    @model_validator(mode="after")
    def _tls_whole(self) -> Settings:
        given = [self.tls_ca_file, self.tls_cert_file, self.tls_key_file]
        if any(given) and not all(given):
            raise ValueError(
                "service TLS needs all of tls_ca_file, tls_cert_file and tls_key_file "
                "(WAYBILL_TLS_CA_FILE, WAYBILL_TLS_CERT_FILE, WAYBILL_TLS_KEY_FILE)"
            )
        return self

    @property
    def tls_enabled(self) -> bool:
        return self.tls_ca_file is not None

    @model_validator(mode="after")
    def _messages_fit_requests(self) -> Settings:
        """What the gateway admits must fit the messages that carry it onward."""
        needed = max(2 * self.max_request_bytes, self.upload_max_bytes + 1024 * 1024)
        if self.grpc_max_message_bytes < needed:
            raise ValueError(
                f"grpc_max_message_bytes ({self.grpc_max_message_bytes}) must be at least "
                f"{needed}: twice max_request_bytes, and above upload_max_bytes"
            )
        return self

    def workspaces_path(self) -> Path:
        return self.workspaces_dir or self.data_dir / "workspaces"

    @property
    def renew_every(self) -> float:
        return self.lease_renew_seconds or self.lease_seconds / 3

    def sqlalchemy_url(self, service: str) -> str:
        """Postgres is shared by all services; SQLite is one file per service."""
        if self.database_url:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{(self.data_dir / f'{service}.db').resolve()}"

    def checkpointer_url(self) -> str:
        """Plain URL (or file path) for LangGraph's checkpointer packages."""
        if self.database_url:
            return self.database_url.replace("postgresql+asyncpg://", "postgresql://")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return str((self.data_dir / "checkpoints.db").resolve())

    def checkpoint_sqlalchemy_url(self) -> str:
        """The checkpointer's database, for the runner's own rows kept beside it."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.checkpointer_url()}"

    def config_file(self) -> ConfigFile:
        """The YAML config, read once like the environment: runs ask for it on
        hot paths (the models, a role's tools, the price table)."""
        if self._config_file is None:
            self._config_file = read_config_file(self.config) if self.config else ConfigFile()
        return self._config_file

    def models(self) -> list[ModelSpec]:
        return list(self.config_file().models or DEFAULT_MODELS)

    def principals(self) -> list[PrincipalSpec]:
        return self.config_file().auth.principals

    def prices(self) -> dict[str, Price]:
        """`prices`: model name -> price per million tokens (optional; gives usage a cost)."""
        return dict(self.config_file().prices)

    def mcp_servers(self) -> dict[str, McpServerSpec]:
        return dict(self.config_file().mcp_servers)

    def role_tools(self) -> dict[str, list[str]]:
        """`auth.role_tools`: role -> the only tools runs of that role may use."""
        return self.config_file().auth.role_tools

    def sandbox(self) -> SandboxSpec | None:
        """The YAML `sandbox` section; None: no sandbox, hence no `bash`/`python` tools."""
        return self.config_file().sandbox

    def subagents(self) -> list[SubagentSpec]:
        """The YAML `subagents`: whom the lead agent's `task` tool may delegate to."""
        return self.config_file().subagents

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_key or self.internal_token or self.principals())

    def default_model(self) -> str:
        return self.config_file().default_model or self.models()[0].name

    def project(self) -> Project | None:
        """The `langgraph.json` project (`WAYBILL_GRAPHS`), read once; None without one."""
        if self.graphs is None:
            return None
        if self._project is None:
            self._project = Project.load(self.graphs)
        return self._project

    def graph_specs(self) -> dict[str, GraphSpec]:
        """graph id -> where it is ("path/to/file.py:attribute" or "module:attribute")
        and its description: the built-in graphs (unless turned off), then the project's."""
        specs = {}
        if self.builtin_graphs:
            specs = {graph_id: GraphSpec(target) for graph_id, target in BUILTIN_GRAPHS.items()}
        project = self.project()
        if project is not None:
            specs.update(project.graphs())
        if not specs:
            raise ProjectError(
                "no graphs to serve: WAYBILL_BUILTIN_GRAPHS is off and no WAYBILL_GRAPHS"
            )
        return specs


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """This process's settings. The YAML config is read here, at start-up, so that
    a mistake in it stops the service before it serves anything."""
    settings = Settings()
    settings.config_file()
    return settings
