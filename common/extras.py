"""Optional parts of Waybill come with an extra (`pip install 'waybill[otel]'`); a
setting that needs a part not installed stops the service with one line naming the
extra to install, not an ImportError traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# The exit status of a service whose settings need an extra that is not installed.
MISSING_EXTRA_EXIT_CODE = 6


class MissingExtra(Exception):
    def __init__(self, extra: str, needed_for: str, module: str) -> None:
        super().__init__(
            f"{needed_for} needs the `{extra}` extra ({module} is not installed): "
            f"pip install 'waybill[{extra}]'"
        )
        self.extra = extra


@contextmanager
def needs_extra(extra: str, needed_for: str) -> Iterator[None]:
    """Imports inside this block come from `extra`; a missing one is `MissingExtra`."""
    try:
        yield
    except ModuleNotFoundError as missing:
        raise MissingExtra(extra, needed_for, missing.name or "a package") from None


def needs_postgres() -> AbstractContextManager[None]:
    """Imports of the Postgres drivers and LangGraph's Postgres packages: the scaled
    database, chosen by a Postgres WAYBILL_DATABASE_URL (the embedded default is SQLite)."""
    return needs_extra("postgres", "WAYBILL_DATABASE_URL is a Postgres URL: it")


def needs_redis() -> AbstractContextManager[None]:
    """Imports of the Redis client: the journal's fan-out across replicas (WAYBILL_REDIS_URL)."""
    return needs_extra("redis", "WAYBILL_REDIS_URL is set: it")
