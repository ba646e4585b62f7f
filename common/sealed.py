"""Request-scoped secrets (`context.secrets`): sealed before they are stored,
opened only by the runner that executes the run, redacted in every read.

Each value is encrypted on its own (Fernet: AES-128-CBC + HMAC-SHA256) so the
names stay readable (`{"github": "[redacted]"}`) and nothing else needs a key.
The key comes from `WAYBILL_SECRETS_KEY`; the embedded default creates one in
its data directory (mode 0600) the first time it is needed.
"""

from __future__ import annotations

import os
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from waybill.common.settings import Settings

SEALED = "__sealed__"
REDACTED = "[redacted]"


class SecretsUnavailable(RuntimeError):
    """No key is configured, or a sealed value cannot be opened with it."""


def secrets_key(settings: Settings) -> bytes:
    if settings.secrets_key:
        return settings.secrets_key.encode()
    if settings.database_url:
        # Replicas must share one key; a per-process file would lock the others out.
        raise SecretsUnavailable("context.secrets needs WAYBILL_SECRETS_KEY to be configured.")
    path = settings.data_dir / "secrets.key"
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(Fernet.generate_key())
    return path.read_bytes().strip()


def seal(secrets: dict[str, Any], key: bytes) -> dict[str, Any]:
    box = Fernet(key)
    return {
        name: {SEALED: box.encrypt(str(value).encode()).decode()} for name, value in secrets.items()
    }


def unseal(sealed: dict[str, Any], key: bytes) -> dict[str, str]:
    box = Fernet(key)
    try:
        return {
            name: box.decrypt(value[SEALED].encode()).decode() for name, value in sealed.items()
        }
    except (InvalidToken, KeyError, TypeError) as error:
        raise SecretsUnavailable("context.secrets cannot be opened with this key.") from error


def redacted_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A run's kwargs as anyone may read them: secret values hidden, names kept."""
    context = kwargs.get("context")
    if not isinstance(context, dict) or not isinstance(context.get("secrets"), dict):
        return kwargs
    hidden = {name: REDACTED for name in context["secrets"]}
    return {**kwargs, "context": {**context, "secrets": hidden}}
