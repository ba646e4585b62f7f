"""What a graph is handed besides its input, as LangGraph Platform hands it.

- `runtime.context`: the client's context, narrowed to the keys the graph's
  context schema declares (every key when it declares none), so that a dataclass
  schema is built from exactly what it knows; its sealed secrets opened.
- `config["configurable"]["langgraph_auth_user"]`: the caller, stored by
  admission as JSON and handed back as a user that reads both ways
  (`user.identity` and `user["identity"]`), which is also what LangGraph needs
  to fill `runtime.server_info.user`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from waybill.common.sealed import unseal

AUTH_USER = "langgraph_auth_user"
SECRETS_KEY = "secrets"

# A graph's declared keys, per context schema type (computing a JSON schema is not free).
_DECLARED: dict[Any, frozenset[str] | None] = {}


class AuthUser(dict[str, Any]):
    """The authenticated user: a dict (JSON-safe, as stored) whose keys are also
    attributes, like LangGraph Platform's `ProxyUser`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def identity(self) -> str:
        return str(self["identity"])

    @property
    def display_name(self) -> str:
        return str(self.get("display_name") or self.identity)

    @property
    def is_authenticated(self) -> bool:
        return bool(self.get("is_authenticated", True))

    @property
    def permissions(self) -> list[str]:
        return list(self.get("permissions") or [])


def principal_user(user_id: str, permissions: list[str]) -> AuthUser:
    """A Waybill principal (API key, config user) as a graph sees a user."""
    return AuthUser(
        identity=user_id, display_name=user_id, is_authenticated=True, permissions=permissions
    )


def declared_keys(graph: Pregel) -> frozenset[str] | None:
    """The properties of the graph's context schema; None when it declares none."""
    schema_type = graph.context_schema
    if schema_type is None:
        return None
    if schema_type not in _DECLARED:
        properties = (graph.get_context_jsonschema() or {}).get("properties")
        _DECLARED[schema_type] = frozenset(properties) if properties else None
    return _DECLARED[schema_type]


def graph_context(
    context: Any, declared: frozenset[str] | None, secrets_key: Callable[[], bytes]
) -> dict[str, Any]:
    """The run's context as the graph sees it: the declared keys, secrets opened
    with `secrets_key()` (read only when there are some). Always a dict, as on
    LangGraph Platform: a dataclass schema with required fields fails the run
    when they are missing."""
    if not isinstance(context, dict):
        context = {}
    if declared is not None:
        context = {key: value for key, value in context.items() if key in declared}
    sealed = context.get(SECRETS_KEY)
    if isinstance(sealed, dict):
        context = {**context, SECRETS_KEY: unseal(sealed, secrets_key())}
    return context


def with_auth_user(configurable: dict[str, Any]) -> dict[str, Any]:
    """`configurable` with its stored user made an `AuthUser`."""
    user = configurable.get(AUTH_USER)
    if isinstance(user, dict) and "identity" in user:
        return {**configurable, AUTH_USER: AuthUser(user)}
    return configurable


def with_caller(config: dict[str, Any], user: AuthUser) -> RunnableConfig:
    """An assistant's config with the reader as LangGraph Platform stamps a caller in
    (`merge_auth`): whatever the assistant's config said of a user is replaced."""
    configurable = {
        **(config.get("configurable") or {}),
        "langgraph_auth_user": user,
        "langgraph_auth_user_id": user.identity,
        "langgraph_auth_permissions": user.permissions,
    }
    return cast(RunnableConfig, {**config, "configurable": configurable})
