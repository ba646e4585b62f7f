"""A cron made by a user of the project's own auth fires as that user (issue 39).

As on LangGraph Platform, where the scheduler restores the cron's user before it
creates the run: the firing's graph sees the project's user in
`configurable.langgraph_auth_user` (not Waybill's fields), and the firing sees
the threads that user sees through the project's `@auth.on` filters (a thread
shared to it by a filter is found), no more (another user's thread, once no
longer shared, is not). The scheduler's clock is a file the tests move forward.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.stacks import stack_in_mode, wait_until
from waybill.common.launch import Stack

pytestmark = pytest.mark.timeout(180)

START = datetime(2030, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

AUTH_PY = """
from langgraph_sdk import Auth

auth = Auth()

USERS = {
    "alice-token": {"identity": "alice", "permissions": ["scheduler"], "team": "red"},
    "bob-token": {"identity": "bob", "permissions": ["scheduler", "reader"], "team": "blue"},
}


@auth.authenticate
async def authenticate(authorization: str | None):
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return USERS[token]


@auth.on.threads.create
async def stamp_owner(ctx: Auth.types.AuthContext, value: dict):
    value.setdefault("metadata", {})["owner"] = ctx.user.identity


@auth.on.threads
async def own_or_shared(ctx: Auth.types.AuthContext, value: dict):
    # A thread is seen by its owner and by whoever its metadata shares it with.
    me = ctx.user.identity
    return {"$or": [{"owner": me}, {"shared_with": {"$contains": me}}]}


@auth.on.crons
async def own_crons(ctx: Auth.types.AuthContext, value: dict):
    value.setdefault("metadata", {})["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}


@auth.on
async def allow(ctx: Auth.types.AuthContext, value: dict):
    return None
"""

WHOAMI_PY = """
from typing_extensions import TypedDict
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph


class Seen(TypedDict, total=False):
    text: str
    seen: dict


def look(state: Seen, config: RunnableConfig) -> dict:
    configurable = config["configurable"]
    wanted = ("langgraph_auth_user", "langgraph_auth_user_id", "langgraph_auth_permissions")
    return {"seen": {key: configurable.get(key) for key in wanted}}


builder = StateGraph(Seen)
builder.add_node("look", look)
builder.add_edge(START, "look")
builder.add_edge("look", END)
graph = builder.compile()
"""


def write_project(root: Path) -> Path:
    (root / "auth.py").write_text(textwrap.dedent(AUTH_PY))
    (root / "whoami.py").write_text(textwrap.dedent(WHOAMI_PY))
    manifest = root / "langgraph.json"
    config = {"graphs": {"whoami": "./whoami.py:graph"}, "auth": {"path": "./auth.py:auth"}}
    manifest.write_text(json.dumps(config))
    return manifest


@dataclass
class CronStack:
    stack: Stack
    clock_file: Path

    def next_minute(self) -> datetime:
        """Move the scheduler's clock to the next whole minute."""
        now = datetime.fromisoformat(self.clock_file.read_text())
        moment = now.replace(second=0, microsecond=0) + MINUTE
        part = self.clock_file.with_suffix(".part")
        part.write_text(moment.isoformat())
        part.replace(self.clock_file)
        return moment

    def firings(self, cron_id: str) -> list[tuple[str, str | None, str]]:
        """(outcome, run_id, detail) of each recorded firing, oldest first."""
        database = Path(self.stack.env["WAYBILL_DATA_DIR"]) / "admission.db"
        with sqlite3.connect(database) as conn:
            rows = conn.execute(
                "SELECT outcome, run_id, detail FROM cron_firings WHERE cron_id = ? "
                "ORDER BY due_at",
                (cron_id,),
            ).fetchall()
        return [(str(o), r, str(d)) for o, r, d in rows]

    def fire(self, cron_id: str) -> tuple[str, str | None, str]:
        """Move the clock on a minute; the cron's newest firing, once recorded."""
        before = len(self.firings(cron_id))
        self.next_minute()
        wait_until(
            lambda: (
                len(self.firings(cron_id)) > before and self.firings(cron_id)[-1][0] != "claimed"
            ),
            f"a recorded firing of cron {cron_id}",
        )
        return self.firings(cron_id)[-1]


@pytest.fixture(scope="module")
def crons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CronStack]:
    # The firing's user and filters are admission's, whatever the storage: SQLite.
    manifest = write_project(tmp_path_factory.mktemp("cron-auth-project"))
    data_dir = tmp_path_factory.mktemp("cron-auth")
    clock_file = data_dir / "clock"
    clock_file.write_text(START.isoformat())
    with stack_in_mode(
        "sqlite",
        data_dir,
        WAYBILL_GRAPHS=str(manifest),
        WAYBILL_CRON_CLOCK_FILE=str(clock_file),
        WAYBILL_CRON_MAX_SLEEP_SECONDS="0.1",
    ) as stack:
        yield CronStack(stack, clock_file)


def client_for(stack: Stack, token: str) -> LangGraphClient:
    return get_client(url=stack.url, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
async def alice(crons: CronStack) -> AsyncIterator[LangGraphClient]:
    client = client_for(crons.stack, "alice-token")
    yield client
    await client.aclose()


@pytest.fixture
async def bob(crons: CronStack) -> AsyncIterator[LangGraphClient]:
    client = client_for(crons.stack, "bob-token")
    yield client
    await client.aclose()


def project_user(identity: str, permissions: list[str], team: str) -> dict[str, Any]:
    """`langgraph_auth_user` as a run started over HTTP by this user carries it."""
    return {
        "identity": identity,
        "permissions": permissions,
        "team": team,
        "display_name": identity,
        "is_authenticated": True,
    }


async def seen_by(client: LangGraphClient, thread_id: str, run_id: str) -> dict[str, Any]:
    """What the firing's graph saw of its caller, once its run has ended."""
    await client.runs.join(thread_id, run_id)
    run = await client.runs.get(thread_id, run_id)
    assert run["status"] == "success", run
    state = await client.threads.get_state(thread_id)
    seen: dict[str, Any] = state["values"]["seen"]
    return seen


async def test_a_firing_runs_as_its_creator_on_a_thread_shared_to_it(
    crons: CronStack, alice: LangGraphClient, bob: LangGraphClient
) -> None:
    # bob's thread, which alice sees only because its metadata shares it with her
    thread = await bob.threads.create(metadata={"shared_with": ["alice"]})
    assert thread["metadata"]["owner"] == "bob"
    assert (await alice.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]
    cron = await alice.crons.create_for_thread(
        thread["thread_id"], "whoami", schedule="* * * * *", input={"text": "tick"}
    )
    try:
        outcome, run_id, detail = crons.fire(cron["cron_id"])
        assert outcome == "started", detail
        assert run_id is not None
        seen = await seen_by(alice, thread["thread_id"], run_id)
    finally:
        await alice.crons.delete(cron["cron_id"])
    # The project's user, exactly as a run alice starts over HTTP sees it: no
    # Waybill role, no channel.
    assert seen == {
        "langgraph_auth_user": project_user("alice", ["scheduler"], "red"),
        "langgraph_auth_user_id": "alice",
        "langgraph_auth_permissions": ["scheduler"],
    }
    started = await alice.runs.get(thread["thread_id"], run_id)
    assert started["metadata"]["cron_id"] == cron["cron_id"]


async def test_a_firing_on_a_fresh_thread_carries_the_project_user(
    crons: CronStack, bob: LangGraphClient
) -> None:
    cron = await bob.crons.create(
        "whoami", schedule="* * * * *", input={"text": "tick"}, on_run_completed="keep"
    )
    try:
        outcome, run_id, detail = crons.fire(cron["cron_id"])
        assert outcome == "started", detail
        [fresh] = await bob.threads.search(metadata={"cron_id": cron["cron_id"]})
        assert fresh["metadata"]["owner"] == "bob"  # the crons handler's stamp
        assert run_id is not None
        seen = await seen_by(bob, fresh["thread_id"], run_id)
    finally:
        await bob.crons.delete(cron["cron_id"])
    assert seen == {
        "langgraph_auth_user": project_user("bob", ["scheduler", "reader"], "blue"),
        "langgraph_auth_user_id": "bob",
        "langgraph_auth_permissions": ["scheduler", "reader"],
    }


async def test_a_firing_sees_no_thread_its_creator_does_not(
    crons: CronStack, alice: LangGraphClient, bob: LangGraphClient
) -> None:
    thread = await alice.threads.create(metadata={"shared_with": ["bob"]})
    thread_id = thread["thread_id"]
    cron = await bob.crons.create_for_thread(
        thread_id, "whoami", schedule="* * * * *", input={"text": "tick"}
    )
    try:
        outcome, run_id, detail = crons.fire(cron["cron_id"])
        assert outcome == "started", detail  # shared: bob's firing finds it
        assert run_id is not None
        seen = await seen_by(bob, thread_id, run_id)
        assert seen["langgraph_auth_user_id"] == "bob"
        # alice stops sharing it: bob no longer sees it, and neither does his cron
        await alice.threads.update(thread_id, metadata={"shared_with": []})
        with pytest.raises(NotFoundError):
            await bob.threads.get(thread_id)
        outcome, run_id, detail = crons.fire(cron["cron_id"])
        assert (outcome, run_id) == ("error", None)
        assert "not found" in detail.lower(), detail
    finally:
        await bob.crons.delete(cron["cron_id"])
    assert len(await alice.runs.list(thread_id)) == 1
