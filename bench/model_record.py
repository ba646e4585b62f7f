"""`python -m bench.model_record`: what recording model responses (for replay on a
takeover, services/runner/effects/model_calls.py) costs a streaming run, A/B alternating.

Two embedded stacks run side by side, the same build, one with
`WAYBILL_RECORD_MODEL_CALLS=true` (A) and one with `false` (B); runs alternate
between them (A B, then B A, ...) so that the load of a shared machine falls on
both alike. Measured through the gateway: a 2,000-token run (events/s, first
token) and a tool-calling run (`/tool add`: two model calls and one tool call),
end to end. Medians of the pairs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench.through_gateway import create_thread, time_run
from tests.support.stacks import running_stack, stack_env

TOOL_INPUT = {"messages": [{"role": "user", "content": '/tool add {"a": 1, "b": 2}'}]}


def tool_run_seconds(client: httpx.Client) -> float:
    thread_id = create_thread(client)
    started = time.perf_counter()
    reply = client.post(
        f"/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", "input": TOOL_INPUT}
    )
    reply.raise_for_status()
    assert "Tool add returned" in reply.text, reply.text
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument(
        "--b-records", action="store_true", help="record on B too (A/A: the bench's own noise)"
    )
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    with ExitStack() as stacks, tempfile.TemporaryDirectory() as scratch:
        clients = {}
        b_record = "true" if args.b_records else "false"
        for side, record in (("A", "true"), ("B", b_record)):
            data = Path(scratch) / side
            data.mkdir()
            env = stack_env(data, WAYBILL_RECORD_MODEL_CALLS=record)
            stack = stacks.enter_context(running_stack(env, data))
            clients[side] = stacks.enter_context(httpx.Client(base_url=stack.url, timeout=120))
        for side in clients:  # warm-up: imports, first connections
            time_run(clients[side], args.tokens, 120)
            tool_run_seconds(clients[side])
        for pair in range(args.pairs):
            for side in ("A", "B") if pair % 2 == 0 else ("B", "A"):
                run = time_run(clients[side], args.tokens, 120)
                got = figures[side]
                got.setdefault("events_per_second", []).append(run.events_per_second)
                got.setdefault("first_token_ms", []).append(run.first_token_seconds * 1000)
                got.setdefault("stream_ms", []).append(run.seconds * 1000)
                got.setdefault("tool_run_ms", []).append(tool_run_seconds(clients[side]) * 1000)
    print(f"{args.pairs} pairs, {args.tokens}-token run; medians (A: recorded, B: not)")
    print(f"{'':28}{'A':>10}{'B':>10}{'A/B':>8}")
    for name in figures["A"]:
        a, b = statistics.median(figures["A"][name]), statistics.median(figures["B"][name])
        print(f"{name:28}{a:10.1f}{b:10.1f}{a / b:8.3f}")


if __name__ == "__main__":
    main()
