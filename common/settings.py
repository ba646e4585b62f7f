"""Settings, read once from the environment (prefix `WAYBILL_`) and the YAML config.

The environment holds the flat settings (ports, addresses, timers), one typed
section per service (common/setting_sections.py); the YAML file (`WAYBILL_CONFIG`,
common/config_file.py) holds the sections that are lists and tables: models,
auth, prices, channels.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import PrivateAttr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from waybill.common.config_file import (
    DEFAULT_MODELS,
    ConfigFile,
    McpServerSpec,
    ModelSpec,
    PrincipalSpec,
    QuotasSection,
    SandboxSpec,
    SubagentSpec,
    read_config_file,
)
from waybill.common.platform_env import PlatformEnvSource
from waybill.common.project import GraphSpec, Project, ProjectError
from waybill.common.setting_sections import (
    AdmissionSettings,
    DeliverySettings,
    DeploymentSettings,
    GatewaySettings,
    JournalSettings,
    RunnerSettings,
)
from waybill.common.usage import Price

BUILTIN_GRAPHS = {"lead_agent": "waybill.services.runner.agent.lead_agent:build_lead_agent"}


class Settings(
    DeploymentSettings,
    GatewaySettings,
    AdmissionSettings,
    RunnerSettings,
    JournalSettings,
    DeliverySettings,
    BaseSettings,
):
    """Every section of the environment's settings (common/setting_sections.py),
    read from `WAYBILL_*` (and LangGraph Platform's names), with the YAML config
    (common/config_file.py) and the project (`langgraph.json`) it names."""

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

    def quotas(self) -> QuotasSection:
        """The YAML `quotas` section (empty: no limits)."""
        return self.config_file().quotas

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
