"""Success means proven delivery: a scripted agent writes and presents files (or
fails to), and the receipt, the run's status, its workspace changes and the
thread's outputs say what really happened. Verdicts come from files and tool
calls, never from the model's text."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import present, says, tools, write
from tests.support.stacks import service_channel
from waybill.common.launch import Stack
from waybill.v1 import common_pb2, delivery_pb2, delivery_pb2_grpc


async def run_to_end(
    client: LangGraphClient, thread_id: str, agent_input: Any, assistant: str = "lead_agent"
) -> dict[str, Any]:
    run = await client.runs.create(thread_id, assistant, input=agent_input)
    await client.runs.join(thread_id, run["run_id"])
    return await client.runs.get(thread_id, run["run_id"])


async def receipt_of(http: httpx.AsyncClient, thread_id: str, run_id: str) -> dict[str, Any]:
    response = await http.get(f"/threads/{thread_id}/runs/{run_id}/receipt")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_written_and_presented_is_delivered(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    content = "# Report\n\nall good\n"
    run = await run_to_end(
        client, thread, tools(write("out/report.md", content), present("out/report.md"))
    )
    assert run["status"] == "success"

    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "delivered"
    assert receipt["presented"] == ["out/report.md"]
    assert receipt["matched"] == ["out/report.md"]
    digest = hashlib.sha256(content.encode()).hexdigest()
    assert receipt["changes"] == [
        {"path": "out/report.md", "change": "created", "size": len(content), "sha256": digest}
    ]
    assert receipt["final_output"]["last_message"].startswith("Tool present_files returned")
    assert receipt["usage"]["llm_calls"] == 3

    changes = (await http.get(f"/threads/{thread}/runs/{run['run_id']}/workspace-changes")).json()
    assert [c["path"] for c in changes["created"]] == ["out/report.md"]
    assert changes["modified"] == changes["deleted"] == []

    outputs = (await http.get(f"/threads/{thread}/outputs")).json()
    assert outputs == [
        {"path": "out/report.md", "size": len(content), "sha256": digest, "run_id": run["run_id"]}
    ]
    download = await http.get(f"/threads/{thread}/outputs/out/report.md")
    assert download.status_code == 200
    assert download.content == content.encode()
    missing = await http.get(f"/threads/{thread}/outputs/nothing.md")
    assert missing.status_code == 404


async def test_written_but_not_presented_is_an_error(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    run = await run_to_end(client, thread, tools(write("draft.txt", "half done")))
    assert run["status"] == "error"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "error"
    assert receipt["verdict_reason"].startswith("delivery incomplete")
    assert "draft.txt" in receipt["verdict_reason"]
    assert receipt["produced"] == ["draft.txt"] and receipt["presented"] == []
    # The stream says it too, as LangGraph Platform reports a failed run.
    joined = await client.runs.join(thread, run["run_id"])
    assert joined["__error__"]["error"] == "DeliveryFailed"
    assert (await http.get(f"/threads/{thread}/outputs")).json() == []


async def test_presenting_a_file_never_written_is_an_error(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    run = await run_to_end(client, thread, tools(present("ghost.md")))
    assert run["status"] == "error"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "error"
    assert receipt["verdict_reason"] == "presented files do not exist: ghost.md"


async def test_presenting_a_file_this_run_did_not_produce_is_an_error(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    uploaded = await http.post(
        f"/threads/{thread}/uploads", files={"files": ("notes.txt", b"from the user")}
    )
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json()[0]["path"] == "uploads/notes.txt"
    run = await run_to_end(client, thread, tools(present("uploads/notes.txt")))
    assert run["status"] == "error"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict_reason"] == (
        "presented files were not produced by this run: uploads/notes.txt"
    )
    assert receipt["changes"] == []


async def test_the_agent_reads_an_upload_and_a_later_edit_is_a_modification(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    await http.post(f"/threads/{thread}/uploads", files={"files": ("data.csv", b"a,b\n1,2\n")})
    run = await run_to_end(
        client,
        thread,
        tools(
            ("read_file", {"path": "uploads/data.csv"}),
            ("edit_file", {"path": "uploads/data.csv", "old": "1,2", "new": "3,4"}),
            present("uploads/data.csv"),
        ),
    )
    assert run["status"] == "success"
    changes = (await http.get(f"/threads/{thread}/runs/{run['run_id']}/workspace-changes")).json()
    assert [(c["path"], c["change"]) for c in changes["modified"]] == [
        ("uploads/data.csv", "modified")
    ]
    assert (await receipt_of(http, thread, run["run_id"]))["verdict"] == "delivered"


async def test_a_chat_without_files_has_nothing_to_deliver(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    run = await run_to_end(client, thread, says("just talk"))
    assert run["status"] == "success"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "nothing_to_deliver"


async def test_an_interrupted_run_is_paused_not_an_error(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    ask = ("ask_clarification", {"question": "which format?"})
    run = await run_to_end(client, thread, tools(write("a.md", "x"), ask, present("a.md")))
    assert run["status"] == "success"
    assert (await client.threads.get(thread))["status"] == "interrupted"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "paused"
    assert receipt["produced"] == ["a.md"]

    # The resume continues the paused run: the file written before the pause is
    # its to present.
    resumed = await client.runs.create(thread, "lead_agent", command={"resume": "markdown"})
    await client.runs.join(thread, resumed["run_id"])
    assert (await client.runs.get(thread, resumed["run_id"]))["status"] == "success"
    receipt = await receipt_of(http, thread, resumed["run_id"])
    assert (receipt["verdict"], receipt["matched"]) == ("delivered", ["a.md"])


async def test_a_graph_without_workspace_tools_is_judged_by_how_it_ended(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    run = await run_to_end(client, thread, {"action": "deploy"}, assistant="approval")
    assert run["status"] == "success"
    receipt = await receipt_of(http, thread, run["run_id"])
    assert receipt["verdict"] == "not_applicable"
    assert receipt["changes"] == []


async def test_uploads_refuse_names_with_folders(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    response = await http.post(
        f"/threads/{thread}/uploads", files={"files": ("../escape.txt", b"x")}
    )
    assert response.status_code == 422
    assert "plain file name" in response.json()["detail"]
    unknown = "00000000-0000-4000-8000-000000000000"
    assert (await http.get(f"/threads/{unknown}/outputs")).status_code == 404
    assert (await http.get(f"/threads/{thread}/runs/{unknown}/receipt")).status_code == 404


def test_one_receipt_per_epoch_and_a_stale_epoch_is_refused(stack: Stack) -> None:
    """Straight at the delivery service: the contract the runner relies on."""
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    with service_channel(stack.address_of("delivery")) as channel:
        delivery = delivery_pb2_grpc.DeliveryStub(channel)
        first = delivery.Snapshot(
            delivery_pb2.SnapshotRequest(run_id=run_id, thread_id=thread_id, epoch=1)
        )
        again = delivery.Snapshot(
            delivery_pb2.SnapshotRequest(run_id=run_id, thread_id=thread_id, epoch=2)
        )
        assert not first.existing and again.existing  # a takeover gets the run's first

        def receipt(epoch: int) -> delivery_pb2.Receipt:
            return delivery.WriteReceipt(
                delivery_pb2.WriteReceiptRequest(
                    run_id=run_id,
                    thread_id=thread_id,
                    epoch=epoch,
                    outcome=common_pb2.RUN_STATUS_SUCCESS,
                    verify_workspace=True,
                )
            )

        assert receipt(2).verdict == "nothing_to_deliver"
        for epoch, code in ((2, grpc.StatusCode.ALREADY_EXISTS), (1, grpc.StatusCode.ABORTED)):
            with pytest.raises(grpc.RpcError) as refused:
                receipt(epoch)
            assert refused.value.code() == code  # type: ignore[attr-defined]
        assert receipt(3).epoch == 3
        newest = delivery.GetReceipt(delivery_pb2.GetReceiptRequest(run_id=run_id))
        assert newest.epoch == 3


def test_an_untouched_run_gets_its_first_snapshot_with_its_receipt(stack: Stack) -> None:
    """No tool asked for a before-snapshot: the workspace is as the run found it, so
    the receipt's snapshot is stored as the run's first, and nothing changed."""
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    workspace = stack.settings.workspaces_path() / thread_id
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("uploaded before the run")
    with service_channel(stack.address_of("delivery")) as channel:
        delivery = delivery_pb2_grpc.DeliveryStub(channel)
        receipt = delivery.WriteReceipt(
            delivery_pb2.WriteReceiptRequest(
                run_id=run_id,
                thread_id=thread_id,
                epoch=1,
                outcome=common_pb2.RUN_STATUS_SUCCESS,
                verify_workspace=True,
                untouched=True,
            )
        )
        assert (receipt.verdict, list(receipt.changes)) == ("nothing_to_deliver", [])
        # A takeover asking for the run's first snapshot gets the one stored above.
        first = delivery.Snapshot(
            delivery_pb2.SnapshotRequest(run_id=run_id, thread_id=thread_id, epoch=2)
        )
        assert first.existing
        assert [f.path for f in first.files] == ["notes.md"]


def test_which_agents_have_workspace_tools() -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from waybill.services.runner.agent.tools import echo
    from waybill.services.runner.agent.workspace import write_file
    from waybill.services.runner.ending.deliverables import has_workspace_tools

    def graph_with(node: Any) -> Any:
        builder = StateGraph(MessagesState)
        builder.add_node("node", node)
        builder.add_edge(START, "node")
        return builder.compile()

    assert has_workspace_tools("mine", graph_with(ToolNode([echo, write_file])), {}, None)
    assert not has_workspace_tools("mine", graph_with(ToolNode([echo])), {}, None)
    assert not has_workspace_tools("mine", graph_with(lambda state: {}), {}, None)
    lead = graph_with(lambda state: {})  # the lead agent is judged by its authorized tools
    assert has_workspace_tools("lead_agent", lead, {}, None)
    assert not has_workspace_tools("lead_agent", lead, {"allowed_tools": ["echo"]}, None)
    assert not has_workspace_tools("lead_agent", lead, {}, ["echo", "add"])


async def test_an_upload_larger_than_a_grpc_message_default_is_stored_whole(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread = (await client.threads.create())["thread_id"]
    data = bytes(range(256)) * (5 * 4096)  # 5 MiB, past gRPC's 4 MiB default
    reply = await http.post(f"/threads/{thread}/uploads", files={"files": ("big.bin", data)})
    assert reply.status_code == 200, reply.text
    assert reply.json() == [
        {"path": "uploads/big.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    ]
    stored = stack.settings.workspaces_path() / thread / "uploads" / "big.bin"
    assert stored.read_bytes() == data


async def test_an_upload_never_writes_through_a_link_out_of_the_workspace(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack, tmp_path: Any
) -> None:
    """An agent can leave links in its workspace; an upload must not follow them."""
    thread = (await client.threads.create())["thread_id"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("untouched")
    workspace = stack.settings.workspaces_path() / thread
    workspace.mkdir(parents=True, exist_ok=True)

    (workspace / "uploads").symlink_to(outside, target_is_directory=True)
    refused = await http.post(f"/threads/{thread}/uploads", files={"files": ("a.txt", b"x")})
    assert refused.status_code == 422, refused.text
    assert "not a folder" in refused.json()["detail"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]

    (workspace / "uploads").unlink()
    (workspace / "uploads").mkdir()
    (workspace / "uploads" / "secret.txt").symlink_to(outside / "secret.txt")
    replaced = await http.post(
        f"/threads/{thread}/uploads", files={"files": ("secret.txt", b"from the user")}
    )
    assert replaced.status_code == 200, replaced.text
    assert (outside / "secret.txt").read_text() == "untouched"
    assert not (workspace / "uploads" / "secret.txt").is_symlink()
    assert (workspace / "uploads" / "secret.txt").read_bytes() == b"from the user"
    assert sorted(p.name for p in (workspace / "uploads").iterdir()) == ["secret.txt"]


async def test_an_upload_name_longer_than_a_file_system_takes_is_refused(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    name = "é" * 128 + ".txt"  # 260 bytes in UTF-8
    response = await http.post(f"/threads/{thread}/uploads", files={"files": (name, b"x")})
    assert response.status_code == 422, response.text
    assert "at most 255" in response.json()["detail"]


@pytest.mark.parametrize("name", ["résumé 文档.md", "two\nlines.txt", 'say "hi".txt'])
async def test_an_output_downloads_under_its_own_name_whatever_its_characters(
    client: LangGraphClient, http: httpx.AsyncClient, name: str
) -> None:
    thread = (await client.threads.create())["thread_id"]
    run = await run_to_end(
        client, thread, tools(write(f"out/{name}", "body"), present(f"out/{name}"))
    )
    assert run["status"] == "success"
    listed = (await http.get(f"/threads/{thread}/outputs")).json()
    assert [output["path"] for output in listed] == [f"out/{name}"]

    download = await http.get(f"/threads/{thread}/outputs/out/{quote(name)}")
    assert download.status_code == 200, download.text
    assert download.content == b"body"
    disposition = download.headers["content-disposition"]
    assert disposition.isascii() and "\n" not in disposition
    assert f"filename*=UTF-8''{quote(name, safe='')}" in disposition
