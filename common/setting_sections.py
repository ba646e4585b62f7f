"""The environment's settings, one typed section per service (`Settings`, in
common/settings.py, is all of them together, read from `WAYBILL_*`).

Each field's comments are its description in docs/configuration.md, which `make
docs` generates from them (cli/config_reference.py): a comment block above a run
of fields describes them all. Every timer lives here so that tests can shorten it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from waybill.common.platform_env import postgresql_driver_url


class DeploymentSettings(BaseModel):
    """What every process of one installation shares: where its data lives, where
    each service listens and is dialled, its credentials and transport security,
    its gRPC limits and timers, its logs, metrics and traces."""

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

    # Every gRPC channel and server's largest message. Well above the request limit:
    # a run's input is copied into its state, and its state into events.
    grpc_max_message_bytes: int = Field(default=64 * 1024 * 1024, gt=0)

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

    # Stopping a background loop (common/background.py) lets the pass in progress
    # finish for this long, then cancels it.
    loop_stop_seconds: float = 5.0
    rpc_timeout_seconds: float = 30.0  # deadline of each call a run makes to a peer

    # The longest a channel waits before dialling a lost peer again (gRPC's own
    # default grows to 120 s).
    grpc_reconnect_max_seconds: float = Field(default=2.0, gt=0)
    shutdown_grace_seconds: float = 10.0  # a stopping service lets in-flight work finish

    # Each thread's workspace lives under this root. Runner and delivery must see
    # the same files: a local directory embedded, a shared volume when scaled.
    workspaces_dir: Path | None = None  # default: <data_dir>/workspaces
    # The deadline of one host-side file operation on a workspace (a download's
    # open or read, a snapshot, an upload, removing a thread's tree): 504 beyond it.
    workspace_io_seconds: float = Field(default=60.0, gt=0)

    startup_timeout_seconds: float = 60.0  # the launcher's wait for every service to be ready
    # A migration run waiting for another one (on Postgres), or `migrate --wait`
    # waiting for the migration Job, checks this often.
    migrate_lock_poll_seconds: float = 0.5
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
    def _tls_whole(self) -> DeploymentSettings:
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

    def workspaces_path(self) -> Path:
        return self.workspaces_dir or self.data_dir / "workspaces"

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


class GatewaySettings(BaseModel):
    """The HTTP gateway: where it listens, whom it answers (origins, hosts, keys),
    the largest request, its reads of graph state from the runners, its streams."""

    http_port: int = 8080  # the gateway's HTTP port
    http_host: str = "127.0.0.1"  # the gateway's bind address

    # Comma-separated origins a browser may call the API from (named ones may send
    # credentials, `*` may not); with auth off and this unset: gateway/browser_guard.py.
    cors_origins: str = "*"
    # With auth off, the Host names the gateway answers besides loopback ones
    # (comma-separated; ".example.com" adds subdomains); any other Host is refused.
    allowed_hosts: str = ""
    # The largest HTTP request body the gateway takes (413 beyond it, before any
    # service is called); uploads are limited per file by upload_max_bytes instead.
    max_request_bytes: int = Field(default=8 * 1024 * 1024, gt=0)

    # Answer a browser's private-network preflight (Chrome's Private Network Access:
    # a public page, such as LangGraph Studio, calling a loopback or LAN server).
    # `waybill dev` turns it on, as `langgraph dev` sets ALLOW_PRIVATE_NETWORK.
    allow_private_network: bool = False
    # Auth is on when this or internal_token is set, or the YAML config lists
    # `auth.principals`.
    api_key: str | None = None  # quick start: one admin principal with this key
    # The channel adapters' and scheduler's token; they act on behalf of an owner.
    internal_token: str | None = None

    # Where the gateway sends graph-side reads (state, history, graphs): any runner
    # can answer. A gRPC target such as "ipv4:10.0.0.1:50152,10.0.0.2:50152" or
    # "dns:///runner:50152"; round-robin over the healthy ones. Default: runner_addr.
    runner_read_target: str | None = None
    # A graph-side read refused because its runner died is retried on another
    # runner after this (doubling, 4 tries in all).
    runner_read_backoff_seconds: float = 0.2
    # A graph-side read that finds no runner reachable (every one it knows just
    # died; another is starting) waits this long, in all, for a runner to answer.
    runner_read_wait_seconds: float = Field(default=5.0, ge=0)

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


class AdmissionSettings(BaseModel):
    """Admission: idempotency, leases and attempts, closing an ended run's log,
    dispatch retries, rollbacks, quotas, crons and thread TTLs."""

    idempotency_seconds: float = 86400.0  # how long an Idempotency-Key is remembered

    lease_seconds: float = 30.0  # a claimed run is the runner's for this long without renewal
    lease_renew_seconds: float | None = None  # how often leases are renewed; default: lease/3
    max_attempts: int = 3  # takeovers after lost leases, then the run ends `error`

    # An ended run's runner closes its journal log at once; if it has not (it died
    # right after its terminal write), admission closes it this long after the end,
    # retrying every log_close_retry_seconds while the journal cannot be reached.
    log_close_grace_seconds: float = 10.0
    log_close_retry_seconds: float = 5.0

    dispatch_retry_seconds: float = 0.5  # the next dispatch pass after one that failed

    # A cancel with `action=rollback` answers once its run's runner rolled the run's
    # state back and the run is deleted, waiting at most this long (then the run is
    # hidden from reads all the same, and rolled back when a runner next holds it).
    rollback_wait_seconds: float = Field(default=5.0, ge=0)

    # The window `runs_per_minute` counts over: a minute, shortened by tests.
    quota_window_seconds: float = Field(default=60.0, gt=0)
    # Tests only: a file holding the quotas' "now" (RFC 3339), so that a day's reset
    # passes in seconds. Unset: the real clock.
    quota_clock_file: Path | None = None
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

    @property
    def renew_every(self) -> float:
        return self.lease_renew_seconds or self.lease_seconds / 3


class RunnerSettings(BaseModel):
    """The runner: its slots and threads, a run's deadline and outage tolerance,
    cancels, the model-call memo, records, and the lead agent's parts."""

    runner_slots: int = 10  # runs one runner executes at once (N_JOBS_PER_WORKER)
    # Threads lent to sync nodes and tools (services/runner/run/node_threads.py).
    runner_node_threads: int = Field(default=32, ge=1)
    # The runner's scheduling priority (nice, 0-19): on a machine it shares with
    # admission and the gateway, runs executing yield the CPU to runs being admitted.
    runner_nice: int = Field(default=10, ge=0, le=19)

    # A runner whose event loop has not turned for this long is wedged: it stops
    # renewing its leases (renewed meanwhile from a thread of their own), so that
    # its runs are taken over by a runner that can run them.
    runner_loop_wedged_seconds: float = Field(default=300.0, gt=0)
    run_timeout_seconds: float = 3600.0  # a run still going after this ends `timeout`

    reconnect_seconds: float = 0.5  # runner -> admission work stream retry delay

    # A run's calls at its end (journal flush and close, receipt, confirmation,
    # records) are retried while their peer is away, for this long in all; past
    # it the run is handed back to be resumed, not ended `error`.
    dependency_outage_seconds: float = Field(default=60.0, ge=0)

    # A cancel lets a tool that is executing finish (and record its result) for this
    # long, then cuts it; new model and tool calls never start after a cancel.
    cancel_grace_seconds: float = 10.0

    # Record each model response, so that a takeover replays it
    # (services/runner/effects/model_calls.py).
    record_model_calls: bool = True

    # A run's typed records (LLM/tool lifecycle, usage) wait this long to be sent
    # in one batch, off the path of the run's first token; the run's end sends at once.
    record_linger_seconds: float = 1.0

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


class JournalSettings(BaseModel):
    """The journal: batching, live fan-out, retention, and Redis when it is shared
    by several replicas (see services/journal/hub.py)."""

    journal_batch_max: int = 512  # events in one SQL write, and in one read from Redis
    # The journal's SQL write of live events waits this long for more events before
    # it commits (a flush or a full batch ends the wait at once): fewer, larger
    # writes for a streaming run. Live readers never wait for it.
    journal_write_linger_seconds: float = 0.01

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


class DeliverySettings(BaseModel):
    """Delivery: uploads, webhooks and IM channels (see services/delivery/)."""

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


SECTIONS = (
    DeploymentSettings,
    GatewaySettings,
    AdmissionSettings,
    RunnerSettings,
    JournalSettings,
    DeliverySettings,
)
