"""A stack with auth on (an admin key, a user and a reader), for the tests of the
protocol routes (/mcp, /a2a) that must refuse what the REST routes refuse."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

ADMIN_KEY = "protocol-admin-key-0000"
USER_KEYS = {"alice": "protocol-alice-key-0001", "reader": "protocol-reader-key-0002"}


def key_headers(user_id: str) -> dict[str, str]:
    return {"x-api-key": USER_KEYS[user_id]}


@contextmanager
def keyed_stack(data_dir: Path) -> Iterator[Stack]:
    principals = [
        {"user_id": "alice", "key_sha256": hashlib.sha256(USER_KEYS["alice"].encode()).hexdigest()},
        {
            "user_id": "reader",
            "role": "reader",
            "key_sha256": hashlib.sha256(USER_KEYS["reader"].encode()).hexdigest(),
        },
    ]
    config = data_dir / "waybill.yaml"
    config.write_text(yaml.safe_dump({"auth": {"principals": principals}}))
    with stack_in_mode(
        "sqlite", data_dir, WAYBILL_CONFIG=str(config), WAYBILL_API_KEY=ADMIN_KEY
    ) as stack:
        yield stack
