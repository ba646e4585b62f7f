"""A Redis and a PostgreSQL of a test's own, on free loopback ports, that the test
restarts, flushes and stops as it likes. The shared servers (6379, 5432) serve
every other test and engineer: they are never restarted; these are."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

from tests.support.stacks import free_port, wait_until

POSTGRES_BIN = Path(os.environ.get("WAYBILL_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass
class PrivateRedis:
    """`redis-server` without persistence: a restart loses everything it held."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        try:
            wait_until(lambda: _pings(client), f"redis on {self.port}")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: every connection drops, and its state is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def flush(self) -> None:
        """Lose every key while the connections stay up."""
        client = redis.Redis(port=self.port)
        try:
            client.flushall()
        finally:
            client.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster in a temporary directory (initdb, trust auth, no fsync:
    what a commit acknowledged survives its restarts, not the machine's)."""

    directory: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres", driver: str = "postgresql+asyncpg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def initdb(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        _own(self.directory)
        self._as_postgres(
            [str(POSTGRES_BIN / "initdb"), "-D", str(self.data), "-U", "postgres"]
            + ["--auth=trust", "-E", "UTF8", "--no-sync"]
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} "
            # A restart here is a process crash, never the machine's: every commit
            # acknowledged is in the WAL the OS holds, without an fsync to disk.
            "-c fsync=off -c full_page_writes=off "
            "-c max_connections=300"
        )
        self._pg_ctl("start", "-w", "-t", "60", "-o", options, "-l", str(self.directory / "log"))

    def restart(self) -> None:
        """An immediate stop (every connection drops, as in a crash) and a start."""
        self._pg_ctl("stop", "-m", "immediate", "-w")
        self.start()

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "immediate", "-w")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _pg_ctl(self, *args: str) -> None:
        self._as_postgres([str(POSTGRES_BIN / "pg_ctl"), "-D", str(self.data), *args])

    def _as_postgres(self, command: list[str]) -> None:
        # initdb and postgres refuse to run as root: as root, run them as `postgres`.
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _own(directory: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    # Its own directory under /tmp: the `postgres` user cannot enter pytest's (0700, root's).
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="waybill-postgres-")))
    try:
        server.initdb()
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()  # (not running: nothing to stop)
        shutil.rmtree(server.directory, ignore_errors=True)
