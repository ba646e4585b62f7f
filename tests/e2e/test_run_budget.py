"""A run's own budget (`quotas.run`, lowered per request under
`configurable.waybill_budget`): a long run stops at the boundary after the model
call that crosses it, warned at 80 % first, ends `error` with `BudgetExceeded` on
its stream, its record and its receipt; a request may lower the budget, never
raise it. The owner's day (`tokens_per_day`) stops a run the same way, counting
what the day spent before it. Real services (SQLite; the day on Postgres too),
and the watch itself on a price table."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import MODES
from tests.support.helpers import parse_sse
from tests.support.paths import FIXTURES
from tests.support.stacks import stack_in_mode
from waybill.common.config_file import RunBudget
from waybill.common.launch import Stack
from waybill.common.usage import Price, TokenCount
from waybill.services.runner.run.budget import BudgetExceeded, BudgetWatch, limits_of

pytestmark = pytest.mark.timeout(180)

GRAPHS = FIXTURES / "budget_graphs" / "langgraph.json"
CALL_TOKENS = 2002  # one `/tokens 2000` call: 2 input words, 2000 output tokens
BUDGET = 5000  # quotas.run.max_tokens: crossed by the third call
DAY = 7000  # quotas.default.tokens_per_day: crossed by the fourth call of the day


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack-run-budget")
    config = data_dir / "waybill.yaml"
    config.write_text(yaml.safe_dump({"quotas": {"run": {"max_tokens": BUDGET}}}))
    with stack_in_mode(
        "sqlite",
        data_dir,
        WAYBILL_CONFIG=str(config),
        WAYBILL_GRAPHS=str(GRAPHS),
        WAYBILL_CANCEL_GRACE_SECONDS="2",
    ) as running:
        yield running


@pytest.fixture(params=MODES)
def day_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    config = tmp_path / "waybill.yaml"
    config.write_text(yaml.safe_dump({"quotas": {"default": {"tokens_per_day": DAY}}}))
    with stack_in_mode(
        request.param,
        tmp_path,
        WAYBILL_CONFIG=str(config),
        WAYBILL_GRAPHS=str(GRAPHS),
        WAYBILL_CANCEL_GRACE_SECONDS="2",
    ) as running:
        yield running


async def run_to_its_end(stack: Stack, thread_id: str | None = None, **body: Any) -> dict[str, Any]:
    """A `budget_loop` run of ten calls, joined; its record, stream, records and receipt."""
    thread_id = thread_id or str(uuid.uuid4())
    request = {
        "assistant_id": "budget_loop",
        "input": {"rounds": 10},
        "stream_mode": ["values", "custom"],
        "if_not_exists": "create",
        **body,
    }
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        created = await http.post(f"/threads/{thread_id}/runs", json=request)
        assert created.status_code == 200, created.text
        path = f"/threads/{thread_id}/runs/{created.json()['run_id']}"
        await http.get(f"{path}/join")
        run = (await http.get(path)).json()
        stream = parse_sse((await http.get(f"{path}/stream", headers={"Last-Event-ID": "-1"})).text)
        records = (await http.get(f"{path}/events", params={"limit": 1000})).json()
        receipt = (await http.get(f"{path}/receipt")).json()
        thread = (await http.get(f"/threads/{thread_id}")).json()
    return {
        "run": run,
        "stream": [(frame["event"], json.loads(frame["data"])) for frame in stream],
        "records": [(record["type"], record["data"]) for record in records],
        "receipt": receipt,
        "thread": thread,
    }


def of_type(records: list[tuple[str, Any]], kind: str) -> list[Any]:
    return [data for record_type, data in records if record_type == kind]


async def test_a_long_run_stops_at_its_budget_warned_first(stack: Stack) -> None:
    end = await run_to_its_end(stack)
    assert end["run"]["status"] == "error", end["run"]
    # Three calls: the third crossed the budget, and no fourth started.
    assert len(of_type(end["records"], "llm_start")) == 3
    used = 3 * CALL_TOKENS
    # Charged (the run's record, its receipt) what the three calls spent.
    assert end["run"]["usage"]["total_tokens"] == end["receipt"]["usage"]["total_tokens"] == used
    assert BUDGET < used <= BUDGET + CALL_TOKENS  # within one model call of the budget
    events = [name for name, _ in end["stream"]]
    warning = (
        "custom",
        {"type": "budget_warning", "limit": "max_tokens", "value": BUDGET, "used": 2 * CALL_TOKENS},
    )
    assert warning in end["stream"]
    [error] = [data for name, data in end["stream"] if name == "error"]
    assert {k: error[k] for k in ("error", "limit", "value", "used")} == {
        "error": "BudgetExceeded",
        "limit": "max_tokens",
        "value": BUDGET,
        "used": used,
    }
    assert "max_tokens of 5000 is exceeded: 6006 spent" in error["message"]
    assert events.index("custom") < events.index("error")
    assert of_type(end["records"], "budget") == [
        {"event": "warning", "limit": "max_tokens", "value": BUDGET, "used": 2 * CALL_TOKENS},
        {"event": "exceeded", "limit": "max_tokens", "value": BUDGET, "used": used},
    ]
    [cancel] = of_type(end["records"], "cancel")
    assert cancel["action"] == "budget"
    assert end["receipt"]["outcome"] == "error"
    assert end["receipt"]["error"]["error"] == "BudgetExceeded"
    assert "max_tokens of 5000 is exceeded: 6006 spent" in end["receipt"]["error"]["message"]
    assert end["thread"]["status"] == "error"


async def test_a_request_lowers_its_budget(stack: Stack) -> None:
    lower = {"config": {"configurable": {"waybill_budget": {"max_tokens": 3000}}}}
    end = await run_to_its_end(stack, **lower)
    assert end["run"]["status"] == "error"
    assert len(of_type(end["records"], "llm_start")) == 2
    [error] = [data for name, data in end["stream"] if name == "error"]
    assert (error["limit"], error["value"], error["used"]) == ("max_tokens", 3000, 2 * CALL_TOKENS)
    # One call crossed 80 % and the budget at once: the warning still came first.
    events = [name for name, _ in end["stream"]]
    assert events.index("custom") < events.index("error")


async def test_an_assistants_config_lowers_its_runs_budget(stack: Stack) -> None:
    budget = {"configurable": {"waybill_budget": {"max_tokens": 3000}}}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        made = await http.post("/assistants", json={"graph_id": "budget_loop", "config": budget})
        assert made.status_code == 200, made.text
    end = await run_to_its_end(stack, assistant_id=made.json()["assistant_id"])
    assert end["run"]["status"] == "error"
    assert len(of_type(end["records"], "llm_start")) == 2
    [error] = [data for name, data in end["stream"] if name == "error"]
    assert (error["limit"], error["value"], error["used"]) == ("max_tokens", 3000, 2 * CALL_TOKENS)


async def test_a_tool_executing_when_the_budget_is_crossed_finishes_in_the_grace(
    stack: Stack,
) -> None:
    lower = {"config": {"configurable": {"waybill_budget": {"max_tokens": 1000}}}}
    end = await run_to_its_end(stack, assistant_id="budget_tool_beside", **lower)
    assert end["run"]["status"] == "error"
    [cancel] = of_type(end["records"], "cancel")
    assert (cancel["action"], cancel["finished_in_grace"]) == ("budget", ["pause"])
    assert [r["status"] for r in of_type(end["records"], "tool_end")] == ["success"]
    assert len(of_type(end["records"], "llm_start")) == 1
    tool_answers = [m for m in end["thread"]["values"]["messages"] if m["type"] == "tool"]
    assert [m["content"] for m in tool_answers] == ["paused 1.0 s"]


async def test_a_run_within_its_budget_succeeds(stack: Stack) -> None:
    end = await run_to_its_end(stack, input={"rounds": 1})
    assert end["run"]["status"] == "success"
    assert of_type(end["records"], "budget") == []
    assert "custom" not in [name for name, _ in end["stream"]]


async def test_a_request_above_the_configured_budget_is_refused(stack: Stack) -> None:
    thread_id = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        refused = await http.post(
            f"/threads/{thread_id}/runs",
            json={
                "assistant_id": "budget_loop",
                "input": {"rounds": 1},
                "config": {"configurable": {"waybill_budget": {"max_tokens": BUDGET + 1}}},
                "if_not_exists": "create",
            },
        )
        assert refused.status_code == 422, refused.text
        assert "above the configured quotas.run.max_tokens of 5000" in refused.text
        assert (await http.get(f"/threads/{thread_id}")).status_code == 404  # nothing written
        malformed = await http.post(
            f"/threads/{thread_id}/runs",
            json={
                "assistant_id": "budget_loop",
                "config": {"configurable": {"waybill_budget": {"max_tokenz": 10}}},
                "if_not_exists": "create",
            },
        )
        assert malformed.status_code == 422, malformed.text


async def test_a_run_stops_where_its_owners_day_is_spent(day_stack: Stack) -> None:
    thread_id = str(uuid.uuid4())
    first = await run_to_its_end(day_stack, thread_id, input={"rounds": 2})
    assert first["run"]["status"] == "success", first["run"]
    before = 2 * CALL_TOKENS  # the day's spend when the second run starts
    second = await run_to_its_end(day_stack, thread_id)
    assert second["run"]["status"] == "error", second["run"]
    # Its second call took the day past 7000: no third started.
    assert len(of_type(second["records"], "llm_start")) == 2
    used = before + 2 * CALL_TOKENS
    assert DAY < used <= DAY + CALL_TOKENS  # within one model call of the day's limit
    [error] = [data for name, data in second["stream"] if name == "error"]
    assert {k: error[k] for k in ("error", "limit", "value", "used")} == {
        "error": "BudgetExceeded",
        "limit": "tokens_per_day",
        "value": DAY,
        "used": used,
    }
    assert "the owner's day tokens_per_day of 7000 is exceeded: 8008 spent" in error["message"]
    warning = (
        "custom",
        {"type": "budget_warning", "limit": "tokens_per_day", "value": DAY, "used": 6006},
    )
    assert warning in second["stream"]
    assert second["receipt"]["error"]["error"] == "BudgetExceeded"
    assert "tokens_per_day" in second["receipt"]["error"]["message"]
    async with httpx.AsyncClient(base_url=day_stack.url, timeout=60) as http:
        use = (await http.get("/quotas/me")).json()["use"]
        assert use["tokens_today"] == used  # the ledger charged what the calls spent
        refused = await http.post(
            f"/threads/{thread_id}/runs", json={"assistant_id": "budget_loop", "input": {}}
        )
        assert refused.status_code == 429, refused.text  # the day is spent


class Sink:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, Any]] = []

    def emit(self, kind: str, data: Any) -> None:
        self.emitted.append((kind, data))


def test_the_watch_prices_a_cost_budget() -> None:
    prices = {"m": Price(input_per_million=1_000_000.0)}  # a token costs 1.0
    count = TokenCount("m", "lead_agent")
    crossed: list[BudgetExceeded] = []
    records, frames = Sink(), Sink()
    watch = BudgetWatch(
        limits_of(RunBudget(max_cost=10.0), None),
        lambda: [TokenCount(**{**vars(count), "cost": None}).priced(prices)],
        frames,
        records,
        crossed.append,
    )
    for tokens, warned, stopped in ((7, 0, 0), (8, 1, 0), (10, 1, 0), (11, 1, 1), (20, 1, 1)):
        count.input_tokens = count.total_tokens = tokens
        watch.on_llm_end(None, run_id=uuid.uuid4())  # type: ignore[arg-type]
        assert [e for e, _ in records.emitted].count("budget") == warned + stopped
        assert len(crossed) == stopped
    assert (crossed[0].limit, crossed[0].value, crossed[0].used) == ("max_cost", 10.0, 11.0)
    assert [kind for kind, _ in frames.emitted] == ["custom"]
