"""A stack with auth on, on Postgres: users with keys (one a reader, one a role that
may create runs but cancel none and use only `echo`), an admin key, an internal
token and a secrets key. The tests of who may do what (tests/e2e/test_auth.py) and of
the thread protocol's refusals share it. Also `auth_stack_in_mode`: a stack in
either storage mode whose config has principals for the given keys (and whatever
else a test file configures)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.stacks import fresh_postgres_database, running_stack, stack_env, stack_in_mode
from waybill.common.launch import Stack

KEYS = {
    "alice": "alice-key-0001",
    "bob": "bob-key-0002",
    "reader": "reader-key-0003",
    "creator": "creator-key-0004",  # may create runs, but not cancel any
    "jane.doe": "jane-key-0006",  # a dot, which no store namespace label may hold
}
ADMIN_KEY = "admin-key-0000"
INTERNAL_TOKEN = "internal-token-0005"


def principal(user_id: str, key: str, **extra: Any) -> dict[str, Any]:
    """A config entry for a user with `key` (the config holds only its digest)."""
    return {"user_id": user_id, "key_sha256": hashlib.sha256(key.encode()).hexdigest(), **extra}


def principals() -> list[dict[str, Any]]:
    def entry(user_id: str, **extra: Any) -> dict[str, Any]:
        return principal(user_id, KEYS[user_id], **extra)

    return [
        entry("alice"),
        entry("bob"),
        entry("jane.doe"),
        entry("reader", role="reader"),
        entry(
            "creator",
            role="restricted",
            scopes=["threads:read", "threads:write", "runs:create", "runs:read"],
        ),
    ]


ROLE_TOOLS = {"restricted": ["echo"]}  # runs of this role may use no other tool


@dataclass
class AuthStack:
    url: str
    database_url: str  # psycopg form, for counting rows

    def count(self, table: str) -> int:
        with psycopg.connect(self.database_url) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
        assert row is not None
        return int(row[0])


@contextmanager
def running_auth_stack(data_dir: Path) -> Iterator[AuthStack]:
    config = data_dir / "waybill.yaml"
    config.write_text(
        yaml.safe_dump({"auth": {"principals": principals(), "role_tools": ROLE_TOOLS}})
    )
    with fresh_postgres_database() as url:
        env = stack_env(
            data_dir,
            url,
            WAYBILL_CONFIG=str(config),
            WAYBILL_API_KEY=ADMIN_KEY,
            WAYBILL_INTERNAL_TOKEN=INTERNAL_TOKEN,
            WAYBILL_SECRETS_KEY="pM0SmMQ0PyMXd0Qp-9D2vBc3cFdNhMd9k3LqRymnYkI=",
        )
        with running_stack(env, data_dir) as stack:
            yield AuthStack(stack.url, url.replace("postgresql+asyncpg://", "postgresql://"))


@contextmanager
def auth_stack_in_mode(
    mode: str, data_dir: Path, keys: dict[str, str], config: dict[str, Any], **env: str
) -> Iterator[Stack]:
    """`stack_in_mode` with auth on: a principal per user of `keys` (user -> key)
    beside the rest of `config`."""
    path = data_dir / "waybill.yaml"
    auth = {"principals": [principal(user, key) for user, key in keys.items()]}
    path.write_text(yaml.safe_dump({"auth": auth, **config}))
    with stack_in_mode(mode, data_dir, WAYBILL_CONFIG=str(path), **env) as running:
        yield running


@asynccontextmanager
async def sdk_with_key(
    stack: Stack, key: str, sdk_timeout: float = 30
) -> AsyncIterator[LangGraphClient]:
    """The SDK with `key`, closed afterwards (the per-user fixtures of auth-on stacks)."""
    sdk = get_client(url=stack.url, api_key=key, timeout=sdk_timeout)
    try:
        yield sdk
    finally:
        await sdk.aclose()


def as_user(stack: AuthStack, user: str) -> httpx.AsyncClient:
    """A client with `user`'s key ("admin" for the admin key)."""
    key = ADMIN_KEY if user == "admin" else KEYS[user]
    return httpx.AsyncClient(base_url=stack.url, headers={"x-api-key": key}, timeout=30)
