"""The escape suite: a prompt-injected agent's `bash` and `python` try to get out.

Each attack runs through the gateway and the scripted model, as a tool call of
a run, in two modes: the services as root (CI runs as root) and as an
unprivileged user (`nobody`, started through `setpriv`, a data dir it owns and
a cgroup delegated to it, as systemd's `Delegate=yes` would). Every attack is
bounded (a few seconds, a few hundred MB at most) so the machine stays usable.
What each asserts: the attack fails, and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import after_its_end, present, tools
from tests.support.paths import REPO
from tests.support.processes import running_with
from tests.support.stacks import running_stack, stack_env
from waybill.common import launch
from waybill.common.launch import Stack
from waybill.services.runner.sandbox import cgroups
from waybill.services.runner.sandbox.confinement import machine

NOBODY = 65534
MEMORY_MB = 128
DISK_MB = 16
PROCESSES = 32
MARKER_ENV = "WAYBILL_ESCAPE_MARKER"
REPO = str(REPO)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the suite sets up both modes as root")


def sandbox_config(cgroup_parent: str | None) -> dict[str, Any]:
    sandbox: dict[str, Any] = {
        "provider": "local",
        "cpu_seconds": 10,
        "memory_mb": MEMORY_MB,
        "disk_mb": DISK_MB,
        "file_mb": 64,  # larger than the disk: the disk limit is what holds
        "processes": PROCESSES,
        "timeout_seconds": 30,
        "allow_without_auth": True,  # this stack runs with auth off
    }
    if cgroup_parent is not None:
        sandbox["cgroup_parent"] = cgroup_parent
    return {"sandbox": sandbox}


@contextlib.contextmanager
def delegated_cgroup(uid: int) -> Iterator[str]:
    """A cgroup (under this process's own) that `uid` may make children in."""
    name = f"waybill-escape-{uuid.uuid4().hex[:8]}"
    version, found = cgroups.hierarchies()
    made = []
    try:
        for hierarchy in found:
            path = hierarchy.mount / hierarchy.own.strip("/") / name
            path.mkdir()
            made.append(path)
            for owned in [
                path,
                *(path / f for f in ("cgroup.procs", "tasks", "cgroup.subtree_control")),
            ]:
                if owned.exists():
                    os.chown(owned, uid, uid)
        yield name
    finally:
        for path in made:
            for child in path.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                path.rmdir()


@contextlib.contextmanager
def as_nobody() -> Iterator[None]:
    """Every service of a stack started here runs as `nobody` (`setpriv`)."""
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    probe = subprocess.run([*drop, sys.executable, "-c", "import waybill"], capture_output=True)
    assert probe.returncode == 0, (
        f"`nobody` cannot run this Python ({probe.stderr.decode()[-300:]}): .ci/run makes "
        "the repository and its interpreter reachable (o+x on /root)"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch, "PYTHON", [*drop, *launch.PYTHON])
        yield


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    assert machine().bwrap is None, machine().refusal()
    data_dir = Path(tempfile.mkdtemp(prefix=f"waybill-escape-{request.param}-"))
    marker = f"runner-secret-{uuid.uuid4().hex}"
    with contextlib.ExitStack() as undo:
        if not os.environ.get("WAYBILL_ESCAPE_KEEP"):  # a failing attack's logs, to read
            undo.callback(shutil.rmtree, data_dir, True)
        cgroup_parent = None
        if request.param == "unprivileged":
            cgroup_parent = undo.enter_context(delegated_cgroup(NOBODY))
            undo.enter_context(as_nobody())
        config = data_dir / "waybill.yaml"
        config.write_text(yaml.safe_dump(sandbox_config(cgroup_parent)))
        (data_dir / "host-secret.txt").write_text(marker)
        (data_dir / "host-secret.txt").chmod(0o600)
        if request.param == "unprivileged":
            for path in [data_dir, *data_dir.iterdir()]:
                os.chown(path, NOBODY, NOBODY)
        env = stack_env(data_dir, WAYBILL_CONFIG=str(config), **{MARKER_ENV: marker})
        with running_stack(env, data_dir) as running:
            yield running


@pytest.fixture
def client_timeout() -> float:
    return 90


def tool_answers(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in state["values"]["messages"] if m["type"] == "tool"]


async def attack(client: LangGraphClient, *steps: tuple[str, dict[str, Any]]) -> list[str]:
    """Run the tool calls in one run; what each answered (a tool error's text too)."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "lead_agent", input=tools(*steps))
    ended = await after_its_end(client, tid, run["run_id"])
    assert ended["status"] == "success", ended
    return [answer["content"] for answer in tool_answers(await client.threads.get_state(tid))]


def marker_of(stack: Stack) -> str:
    return stack.env[MARKER_ENV]


def secret_path(stack: Stack) -> str:
    return str(Path(stack.env["WAYBILL_DATA_DIR"]) / "host-secret.txt")


async def records(http: httpx.AsyncClient, thread_id: str) -> list[dict[str, Any]]:
    runs = (await http.get(f"/threads/{thread_id}/runs")).json()
    found = []
    for run in runs:
        url = f"/threads/{thread_id}/runs/{run['run_id']}/events"
        reply = await http.get(url, params={"type": "sandbox"})
        found += [event["data"] for event in reply.json()]
    return found


# ---- the attacks -----------------------------------------------------------------------

# The classic: chroot into a subfolder while keeping a descriptor of the old root,
# climb out with fchdir + "..", chroot to what is found there.
CHROOT_ESCAPE = """
import os
os.makedirs("jail", exist_ok=True)
here = os.open("/", os.O_RDONLY)
os.chroot("jail"); os.fchdir(here)
for _ in range(64): os.chdir("..")
os.chroot(".")
print(open({secret!r}).read())
"""


# unshare(CLONE_NEWUSER), mount and pivot_root straight from libc: refused (EPERM).
UNSHARE_CALL = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("UNSHARE", libc.unshare(0x10000000), ctypes.get_errno())
print("MOUNT", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())
print("PIVOT", libc.syscall(155, b"/tmp", b"/tmp"), ctypes.get_errno())
"""


async def test_chroot_unshare_and_mount_do_not_leave_the_private_root(
    client: LangGraphClient, stack: Stack
) -> None:
    secret = secret_path(stack)
    chroot, namespaces, called, mount = await attack(
        client,
        ("python", {"code": CHROOT_ESCAPE.format(secret=secret)}),
        ("bash", {"command": "unshare -Urm id; unshare -p -f id"}),
        ("python", {"code": UNSHARE_CALL}),
        (
            "bash",
            {"command": "mount -t tmpfs x /tmp; mount --bind / /tmp; ls /proc/1/root/" + secret},
        ),
    )
    assert marker_of(stack) not in chroot
    assert "Operation not permitted" in chroot, chroot
    assert "uid=" not in namespaces and namespaces.count("Operation not permitted") == 2
    for call in ("UNSHARE", "MOUNT", "PIVOT"):
        assert f"{call} -1 1" in called, called  # -1, EPERM
    assert mount.count("must be superuser to use mount") == 2, mount
    assert marker_of(stack) not in mount


async def test_the_runners_environment_and_host_paths_are_not_seen(
    client: LangGraphClient, stack: Stack
) -> None:
    (shown,) = await attack(
        client,
        (
            "bash",
            {
                "command": "cat /proc/1/environ /proc/self/environ; env; "
                "cat /proc/cmdline; cat /proc/self/mountinfo /proc/self/cgroup; "
                "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
            },
        ),
    )
    assert marker_of(stack) not in shown
    assert "WAYBILL_" not in shown, shown
    data_dir = stack.env["WAYBILL_DATA_DIR"]
    assert data_dir not in shown, shown  # the workspace's host path is nowhere
    assert REPO not in shown and "/root/" not in shown, shown


async def test_no_loopback_service_nor_database_is_reachable(
    client: LangGraphClient, stack: Stack
) -> None:
    ports = [int(stack.env["WAYBILL_HTTP_PORT"]), 5432, 6379]
    ports += [int(v.rsplit(":", 1)[1]) for k, v in stack.env.items() if k.endswith("_ADDR")]
    ports += [int(v) for k, v in stack.env.items() if k.endswith("_METRICS_PORT")]
    code = (
        "import socket\n"
        f"for port in {ports!r}:\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
        "        print('CONNECTED', port)\n"
        "    except OSError as error:\n"
        "        print('refused', port, error)\n"
        "import os; print('unix', os.path.exists('/var/run/postgresql/.s.PGSQL.5432'))\n"
    )
    (answer,) = await attack(client, ("python", {"code": code}))
    assert "CONNECTED" not in answer, answer
    refused = [line for line in answer.splitlines() if line.startswith("refused ")]
    assert len(refused) == len(ports) and "unix False" in answer, answer


FORK_BOMB = """
import os, time
forked = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        forked += 1
    except OSError:
        break
print("FORKED", forked)
"""


async def test_a_fork_bomb_is_held_by_the_process_limit(
    client: LangGraphClient, stack: Stack
) -> None:
    bomb, after = await attack(
        client, ("python", {"code": FORK_BOMB}), ("bash", {"command": "echo still usable"})
    )
    forked = int(bomb.split("FORKED", 1)[1].split()[0])
    assert forked <= PROCESSES, bomb
    assert "still usable" in after


# Processes each under the per-process limit, together far over the sandbox's.
MEMORY_FILL = """
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(60 * 1024 * 1024)
        for i in range(0, len(block), 4096): block[i] = 1
        time.sleep(2)
        os._exit(0)
    children.append(pid)
held = sum(os.waitpid(pid, 0)[1] == 0 for pid in children)
print("HELD", held)
"""


async def test_memory_is_limited_for_the_sandbox_as_a_whole(
    client: LangGraphClient, stack: Stack
) -> None:
    (answer,) = await attack(client, ("python", {"code": MEMORY_FILL}))
    # 6 x 60 MiB against 128 MiB (+ the 16 MiB disk): the kernel kills some.
    if "HELD" in answer:
        held = int(answer.split("HELD", 1)[1].split()[0])
        assert held * 60 <= MEMORY_MB + DISK_MB, answer
    else:
        assert f"its memory limit ({MEMORY_MB} MiB)" in answer, answer


async def test_a_disk_fill_stops_at_the_disk_limit(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    fill = "for i in 1 2 3 4 5 6; do head -c 8M /dev/zero > fill$i || exit 1; done"
    small = ("bash", {"command": "rm fill*; echo kept > small"})
    script = tools(("bash", {"command": fill}), small, present("small"))
    run = await client.runs.create(tid, "lead_agent", input=script)
    ended = await after_its_end(client, tid, run["run_id"])

    assert ended["status"] == "success"
    full, after, _ = [a["content"] for a in tool_answers(await client.threads.get_state(tid))]
    assert f"its disk limit ({DISK_MB} MiB)" in full, full
    assert "exit code 0" in after
    workspace = Path(stack.env["WAYBILL_DATA_DIR"]) / "workspaces" / tid
    assert (workspace / "small").read_text() == "kept\n"
    assert not list(workspace.glob("fill*"))
    assert ("disk", "limit_hit") in {
        (r.get("limit"), r["action"]) for r in await records(http, tid)
    }


async def test_a_setsid_child_does_not_outlive_its_command(
    client: LangGraphClient, stack: Stack
) -> None:
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    started, later = await attack(
        client,
        ("bash", {"command": f"setsid sleep {marker} > /dev/null 2>&1 < /dev/null & echo started"}),
        ("bash", {"command": "ps -eo args"}),
    )
    assert "started" in started
    assert f"sleep {marker}" not in later, later  # gone once its command ended
    assert running_with(f"sleep {marker}") == []


async def test_a_host_secret_file_cannot_be_read(client: LangGraphClient, stack: Stack) -> None:
    secret = secret_path(stack)
    (answer,) = await attack(
        client,
        ("bash", {"command": f"cat {secret} /etc/shadow /proc/1/root{secret}; ls /"}),
    )
    assert marker_of(stack) not in answer
    listed = set(answer.split("stdout:\n", 1)[1].split()) if "stdout:\n" in answer else set()
    assert not listed & {"root", "home", "work", "var", "opt", "srv"}, answer


async def test_the_lease_record_says_every_limit_holds(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "lead_agent", input=tools(("bash", {"command": "true"})))
    await after_its_end(client, tid, run["run_id"])
    leased = next(r for r in await records(http, tid) if r["action"] == "leased")
    assert leased["mode"] == "strict" and leased["not_enforced"] == []
    assert leased["cgroup"]["path"].endswith(leased["sandbox_id"])
    assert leased["workspace"] == {"kind": "tmpfs", "size_mb": DISK_MB}
    assert {"pivot_root", "uid", "seccomp", "net", "cgroup", "no-capabilities"} <= set(
        leased["confinement"]
    )


# ---- what cannot be enforced: strict refuses, best_effort says so, unconfined is asked for


def local_limits(confinement: str, cgroup_parent: str | None) -> Any:
    from waybill.services.runner.sandbox.provider import Limits

    return Limits(
        5,
        128 << 20,
        16,
        1 << 20,
        4096,
        30.0,
        network=False,
        disk_bytes=8 << 20,
        confinement=confinement,
        cgroup_parent=cgroup_parent,
    )


NO_CGROUP = "/waybill-no-such-cgroup/for-this-test"  # a parent nobody may make cgroups in


async def test_without_a_cgroup_strict_refuses_and_best_effort_says_what_does_not_hold(
    tmp_path: Path,
) -> None:
    from waybill.services.runner.sandbox.local import LocalProvider
    from waybill.services.runner.sandbox.provider import LeaseRequest, SandboxUnavailable

    request = LeaseRequest("run", 1, "thread", tmp_path / "workspace")
    with pytest.raises(SandboxUnavailable, match="no cgroup for the sandbox's memory"):
        await LocalProvider(local_limits("strict", NO_CGROUP)).lease(request)

    sandbox = await LocalProvider(local_limits("best_effort", NO_CGROUP)).lease(request)
    try:
        assert sandbox.lease_details["not_enforced"] == ["memory"]
        assert sandbox.lease_details["cgroup"] is None
        done = await sandbox.execute(["/bin/bash", "-c", "id -u; cat /proc/1/environ | wc -c"])
        assert done.stdout.split()[0] == "1000"  # still confined: only memory is not whole
    finally:
        await sandbox.close()


async def test_unconfined_is_only_what_the_config_asks_for_and_says_so(tmp_path: Path) -> None:
    from waybill.services.runner.sandbox.local import LocalProvider
    from waybill.services.runner.sandbox.provider import LeaseRequest

    (tmp_path / "workspace").mkdir()
    request = LeaseRequest("run", 1, "thread", tmp_path / "workspace")
    sandbox = await LocalProvider(local_limits("unconfined", None)).lease(request)
    try:
        assert sandbox.confinement == ["rlimits"]
        assert {"namespaces", "filesystem", "network", "memory"} <= set(
            sandbox.lease_details["not_enforced"]  # type: ignore[arg-type]
        )
        assert sandbox.lease_details["mode"] == "unconfined"
    finally:
        await sandbox.close()


def test_doctor_says_when_the_sandbox_would_be_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from waybill.cli.doctor import check_sandbox
    from waybill.common.settings import Settings

    def finding(**sandbox: Any) -> Any:
        config = tmp_path / f"waybill-{uuid.uuid4().hex[:6]}.yaml"
        config.write_text(yaml.safe_dump({"sandbox": {"provider": "local", **sandbox}}))
        (found,) = check_sandbox(Settings.model_validate({"config": str(config)}))
        return found

    refused = finding(cgroup_parent=NO_CGROUP)
    assert refused.verdict == "FAIL" and refused.check == "sandbox"
    assert "confinement strict: no cgroup" in refused.detail
    weaker = finding(cgroup_parent=NO_CGROUP, confinement="best_effort")
    assert (weaker.verdict, weaker.detail) == ("ok", "best_effort: not enforced: memory")
    held = finding()
    assert held.verdict == "ok" and "strict" in held.detail

    monkeypatch.setattr("waybill.services.runner.sandbox.confinement.BWRAP", "/no/bwrap")
    from waybill.services.runner.sandbox import confinement

    confinement.machine.cache_clear()
    try:
        missing = finding(confinement="best_effort")
        assert missing.verdict == "FAIL" and "no `bwrap` on this machine" in missing.detail
    finally:
        confinement.machine.cache_clear()


async def test_a_workspace_larger_than_the_disk_limit_is_refused_and_kept_whole(
    tmp_path: Path,
) -> None:
    from waybill.services.runner.sandbox.local import LocalProvider
    from waybill.services.runner.sandbox.provider import LeaseRequest

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "large.bin").write_bytes(b"x" * (12 << 20))  # the disk holds 8 MiB
    request = LeaseRequest("run", 1, "thread", workspace)
    sandbox = await LocalProvider(local_limits("strict", None)).lease(request)
    try:
        done = await sandbox.execute(["/bin/bash", "-c", "rm -f large.bin; echo ran"])
    finally:
        await sandbox.close()
    assert done.limit_hit == "disk" and "ran" not in done.stdout, done
    assert "does not fit in the sandbox's disk limit" in done.stderr
    assert (workspace / "large.bin").stat().st_size == 12 << 20
    assert os.listdir(tmp_path) == ["workspace"]


def left_behind(prefix: str) -> tuple[cgroups.SandboxCgroup, subprocess.Popen[bytes]]:
    """A cgroup named for a runner that is gone, a process still in it."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = cgroups.create(f"{prefix}{gone.pid}-sbx-left", 64 << 20, 8, None)
    survivor = subprocess.Popen(["sleep", "60"])
    for procs in left.procs_files:
        Path(procs).write_text(str(survivor.pid))
    return left, survivor


async def test_what_a_dead_runner_left_in_its_cgroup_is_killed_at_the_next_lease(
    tmp_path: Path,
) -> None:
    """A runner killed mid-command may leave its command running (a pid namespace
    whose first process outlived its bwrap): the next lease on the host empties
    and removes the cgroups of runners that are gone."""
    from waybill.services.runner.sandbox.local import CGROUP_PREFIX, LocalProvider
    from waybill.services.runner.sandbox.provider import LeaseRequest

    left, survivor = left_behind(CGROUP_PREFIX)
    try:
        request = LeaseRequest("run", 1, "thread", tmp_path / "workspace")
        sandbox = await LocalProvider(local_limits("strict", None)).lease(request)
        await sandbox.close()
        assert survivor.wait(5) == -9
        assert not any(path.exists() for path in left.paths)
    finally:
        survivor.kill()
        left.remove()
