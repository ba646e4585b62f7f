"""The `channels` section of the YAML config: one entry per bot or endpoint.

```yaml
channels:
  - name: support            # used in the inbound URL: /channels/telegram/support/webhook
    platform: telegram       # telegram | slack | webhook
    owner: alice             # runs act on behalf of this principal
    bot_token_env: TG_TOKEN  # secrets: `<name>_env` names an env var (or `<name>` inline)
    secret_token_env: TG_WEBHOOK_SECRET
    mode: webhook            # telegram only: webhook | polling
    threads: chat            # chat: one thread per chat | conversation: per reply thread/topic
    busy: reject             # a message while a run is active: reject | enqueue | interrupt
```

Secrets are read here and kept in `ChannelSpec` fields that never reach a
log line, an event or a receipt (`repr` hides them).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from waybill.common.identity import API_KEY_USER, LOCAL_USER, ROLE_SCOPES, Principal
from waybill.common.settings import Settings

DEFAULT_API_BASE = {"telegram": "https://api.telegram.org", "slack": "https://slack.com/api"}
SECRET_FIELDS = ("bot_token", "signing_secret", "secret_token", "secret")


class ChannelSpec(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    platform: Literal["telegram", "slack", "webhook"]
    owner: str = LOCAL_USER.user_id
    assistant_id: str = "lead_agent"
    threads: Literal["chat", "conversation"] = "chat"
    busy: Literal["reject", "enqueue", "interrupt"] = "reject"
    mode: Literal["webhook", "polling"] = "webhook"  # telegram only
    api_base: str | None = None  # the platform's API (tests point it at a local fake)
    reply_url: str | None = None  # webhook only: where answers are POSTed, signed
    # Secrets, resolved from `<field>_env` (or given inline); hidden from repr.
    bot_token: str | None = Field(default=None, repr=False)  # telegram, slack
    signing_secret: str | None = Field(default=None, repr=False)  # slack
    secret_token: str | None = Field(default=None, repr=False)  # telegram webhook header
    secret: str | None = Field(default=None, repr=False)  # webhook HMAC key (both ways)

    @property
    def base_url(self) -> str:
        return (self.api_base or DEFAULT_API_BASE.get(self.platform, "")).rstrip("/")

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


def _check(spec: ChannelSpec) -> None:
    required = {
        "telegram": ["bot_token"] + (["secret_token"] if spec.mode == "webhook" else []),
        "slack": ["bot_token", "signing_secret"],
        "webhook": ["secret", "reply_url"],
    }[spec.platform]
    missing = [field for field in required if not getattr(spec, field)]
    if missing:
        raise ValueError(f"channel {spec.name} ({spec.platform}) needs {', '.join(missing)}")


def load_channels(settings: Settings) -> dict[str, ChannelSpec]:
    """The configured channels by name; a mistake stops the service at start-up."""
    entries = settings.config_file().channels
    if not isinstance(entries, list):
        raise ValueError("channels: must be a list of channel entries")
    specs: dict[str, ChannelSpec] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("channels: every entry must be a mapping")
        try:
            spec = ChannelSpec.model_validate(_resolved(entry))
        except ValidationError as error:
            # pydantic echoes input values; never let a secret reach the log.
            fields = sorted({".".join(map(str, e["loc"])) for e in error.errors()})
            raise ValueError(f"channel {entry.get('name')}: invalid {', '.join(fields)}") from None
        _check(spec)
        owner_principal(settings, spec, {})  # the owner must exist
        if spec.name in specs:
            raise ValueError(f"channels: the name {spec.name} is used twice")
        specs[spec.name] = spec
    return specs


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
