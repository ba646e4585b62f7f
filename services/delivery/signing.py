"""How a webhook is signed, and how a receiver checks it.

Every POST carries `X-Waybill-Timestamp` (Unix seconds) and
`X-Waybill-Signature: sha256=<hex>`, the HMAC-SHA256 of `<timestamp>.<body>`
under the shared secret. A receiver recomputes it, compares in constant time,
and refuses timestamps too far from its clock (replays). `Idempotency-Key` (the
delivery id, the same on every attempt) lets it drop repeats.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from pathlib import Path

from cryptography.fernet import Fernet

from waybill.common.settings import Settings

log = logging.getLogger("waybill.delivery")

SIGNATURE_HEADER = "X-Waybill-Signature"
TIMESTAMP_HEADER = "X-Waybill-Timestamp"
DELIVERY_HEADER = "X-Waybill-Delivery-Id"
ATTEMPT_HEADER = "X-Waybill-Attempt"
ATTEMPT_ID_HEADER = "X-Waybill-Attempt-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: bytes, timestamp: str, body: bytes, presented: str) -> bool:
    return hmac.compare_digest(signature(secret, timestamp, body), presented)


def webhook_secret(settings: Settings) -> bytes:
    """`WAYBILL_WEBHOOK_SECRET`, else (embedded, SQLite) a key file in the data
    directory. On Postgres nothing is written there: a scaled delivery runs on a
    read-only root filesystem, and a file per replica would sign with a key no
    other replica shares. Without the setting it signs with a key held in memory
    for this process only, and says so: receivers cannot verify those webhooks."""
    if settings.webhook_secret:
        return settings.webhook_secret.encode()
    if settings.database_url:
        log.warning(
            "WAYBILL_WEBHOOK_SECRET is not set: webhooks are signed with a key of this "
            "process alone, which receivers cannot know; set it (the same on every replica)"
        )
        return Fernet.generate_key()
    return _key_file(settings.data_dir / "webhook.key")


def _key_file(path: Path) -> bytes:
    """The embedded default's key: made once (0600), then read."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_bytes().strip()
        with os.fdopen(descriptor, "wb") as file:
            file.write(Fernet.generate_key())
    return path.read_bytes().strip()
