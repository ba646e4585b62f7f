"""The `channels` section of the YAML config: one entry per bot or endpoint.

```yaml
channels:
  - name: support            # used in the inbound URL: /channels/telegram/support/webhook
    platform: telegram       # see platforms.py: telegram, slack, feishu, lark, dingtalk, ...
    owner: alice             # runs act on behalf of this principal
    bot_token_env: TG_TOKEN  # secrets: `<name>_env` names an env var (or `<name>` inline)
    secret_token_env: TG_WEBHOOK_SECRET
    mode: webhook            # telegram only: webhook | polling
    threads: chat            # chat: one thread per chat | conversation: per reply thread/topic
    busy: reject             # a message while a run is active: reject | enqueue | interrupt
```

Secrets are read here and kept in `ChannelSpec` fields that never reach a
log line, an event or a receipt (`repr` hides them). Which fields a platform
needs is its adapter's `required`; `platforms.load_channels` checks them.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from waybill.common.identity import API_KEY_USER, LOCAL_USER, ROLE_SCOPES, Principal
from waybill.common.settings import Settings

SECRET_FIELDS = (
    "bot_token",
    "signing_secret",
    "secret_token",
    "secret",
    "app_secret",
    "encrypt_key",
    "verification_token",
    "callback_token",
    "encoding_aes_key",
    "corp_secret",
    "access_token",
)


class ChannelSpec(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    platform: str  # one of platforms.ADAPTERS
    owner: str = LOCAL_USER.user_id
    assistant_id: str = "lead_agent"
    threads: Literal["chat", "conversation"] = "chat"
    busy: Literal["reject", "enqueue", "interrupt"] = "reject"
    mode: Literal["webhook", "polling"] = "webhook"  # telegram only
    api_base: str | None = None  # the platform's API (tests point it at a local fake)
    reply_url: str | None = None  # webhook only: where answers are POSTed, signed
    app_id: str | None = None  # feishu/lark app id, dingtalk app key, discord application id
    robot_code: str | None = None  # dingtalk: the robot's code (default: app_id)
    corp_id: str | None = None  # wecom: the company (corp) id
    agent_id: str | None = None  # wecom: the app's AgentId
    user_id: str | None = None  # matrix: the bot's own user id (its messages are not runs)
    public_key: str | None = None  # discord: the app's Ed25519 key (hex) for interactions
    # Secrets, resolved from `<field>_env` (or given inline); hidden from repr.
    bot_token: str | None = Field(default=None, repr=False)  # telegram, slack
    signing_secret: str | None = Field(default=None, repr=False)  # slack
    secret_token: str | None = Field(default=None, repr=False)  # telegram webhook header
    secret: str | None = Field(default=None, repr=False)  # webhook HMAC key (both ways)
    app_secret: str | None = Field(default=None, repr=False)  # feishu/lark, dingtalk
    encrypt_key: str | None = Field(default=None, repr=False)  # feishu/lark event encryption
    verification_token: str | None = Field(default=None, repr=False)  # feishu/lark
    callback_token: str | None = Field(default=None, repr=False)  # wecom callback Token
    encoding_aes_key: str | None = Field(default=None, repr=False)  # wecom EncodingAESKey
    corp_secret: str | None = Field(default=None, repr=False)  # wecom app Secret
    access_token: str | None = Field(default=None, repr=False)  # matrix

    def secrets(self) -> list[str]:
        return [value for value in (getattr(self, f) for f in SECRET_FIELDS) if value]


def _resolved(entry: dict[str, Any]) -> dict[str, Any]:
    """Replace `<secret>_env: NAME` by the value of the env var NAME."""
    found = dict(entry)
    for field in SECRET_FIELDS:
        env_name = found.pop(f"{field}_env", None)
        if env_name is None:
            continue
        value = os.environ.get(str(env_name))
        if not value:
            raise ValueError(f"channel {entry.get('name')}: env var {env_name} is not set")
        found[field] = value
    return found


def spec_of(entry: dict[str, Any]) -> ChannelSpec:
    """One entry of the `channels` section; a mistake is said without its values."""
    try:
        return ChannelSpec.model_validate(_resolved(entry))
    except ValidationError as error:
        # pydantic echoes input values; never let a secret reach the log.
        fields = sorted({".".join(map(str, e["loc"])) for e in error.errors()})
        raise ValueError(f"channel {entry.get('name')}: invalid {', '.join(fields)}") from None


def channel_entries(settings: Settings) -> list[dict[str, Any]]:
    entries = settings.config_file().channels
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("channels: must be a list of channel entries (mappings)")
    return entries


def owner_principal(settings: Settings, spec: ChannelSpec, who: dict[str, str]) -> Principal:
    """The principal a channel's runs act as: its bound owner, with the platform
    user in `channel` (admission puts it in the run's context)."""
    if not settings.auth_enabled:
        return Principal(LOCAL_USER.user_id, LOCAL_USER.role, LOCAL_USER.scopes, who)
    if settings.api_key and spec.owner == "admin":  # WAYBILL_API_KEY's principal
        return Principal(API_KEY_USER.user_id, "admin", ROLE_SCOPES["admin"], who)
    for principal in settings.principals():
        if principal.user_id == spec.owner:
            scopes = (
                frozenset(principal.scopes)
                if principal.scopes is not None
                else ROLE_SCOPES.get(principal.role, frozenset())
            )
            return Principal(principal.user_id, principal.role, scopes, who)
    raise ValueError(f"channel {spec.name}: owner {spec.owner} is not in auth.principals")
