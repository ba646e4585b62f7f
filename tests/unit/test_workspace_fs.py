"""common/workspace_paths.py, workspace_writes.py and workspace_tree.py, resolving
with openat2 and by walking components.

Every test runs with both methods: the kernel's `openat2` (where it exists) and
the component walk a kernel without it falls back to.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from waybill.common import workspace_paths, workspace_tree, workspace_writes

DEEP = 1500


@pytest.fixture(params=["openat2", "walk"], autouse=True)
def method(request: pytest.FixtureRequest) -> Iterator[str]:
    before = workspace_paths.METHOD
    try:
        workspace_paths.use_method(request.param)
    except OSError:
        pytest.fail("this kernel has no openat2; the suite expects Linux 5.6+")
    yield request.param
    workspace_paths.use_method(before)


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace root and, beside it, a host secret."""
    root = tmp_path / "workspace"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("inside")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("HOST SECRET")
    return root, secret


def test_reads_a_file_inside(host: tuple[Path, Path]) -> None:
    root, _ = host
    with workspace_paths.opened_root(root) as fd:
        assert workspace_paths.read_bytes(fd, "docs/a.txt") == b"inside"
        assert workspace_paths.read_bytes(fd, "./docs//a.txt") == b"inside"
        assert workspace_paths.read_bytes(fd, "docs/a.txt", limit=3) == b"ins"


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../secret/key", "docs/../../secret/key"])
def test_refuses_paths_out(host: tuple[Path, Path], bad: str) -> None:
    root, _ = host
    with workspace_paths.opened_root(root) as fd, pytest.raises(workspace_paths.BadPath):
        workspace_paths.read_bytes(fd, bad)


def test_a_link_at_any_component_is_refused(host: tuple[Path, Path]) -> None:
    root, secret = host
    (root / "folder-link").symlink_to(secret)
    (root / "file-link").symlink_to(secret / "key")
    (root / "inner-link").symlink_to("docs")  # even a link that stays inside
    with workspace_paths.opened_root(root) as fd:
        for path in ("folder-link/key", "file-link", "inner-link/a.txt"):
            with pytest.raises(workspace_paths.LinkRefused):
                workspace_paths.read_bytes(fd, path)
        with pytest.raises(workspace_paths.LinkRefused):
            workspace_writes.write_bytes(fd, "folder-link/new", b"x")
        with pytest.raises(workspace_paths.LinkRefused):
            workspace_paths.open_dir(fd, "folder-link")
    assert not (secret / "new").exists()
    assert (secret / "key").read_text() == "HOST SECRET"


def test_a_root_that_is_a_link_is_refused(host: tuple[Path, Path], tmp_path: Path) -> None:
    _, secret = host
    (tmp_path / "linked-root").symlink_to(secret)
    with pytest.raises(workspace_paths.LinkRefused):
        workspace_paths.open_root(tmp_path / "linked-root")


def test_a_fifo_is_refused_at_once(host: tuple[Path, Path]) -> None:
    root, _ = host
    os.mkfifo(root / "pipe")
    started = time.monotonic()
    with workspace_paths.opened_root(root) as fd:
        with pytest.raises(workspace_paths.NotRegularFile):
            workspace_paths.read_bytes(fd, "pipe")
        with pytest.raises(workspace_paths.NotRegularFile):
            workspace_paths.read_bytes(fd, "docs")
        assert not workspace_paths.is_regular_file(fd, "pipe")
    assert time.monotonic() - started < 1


def test_write_replaces_a_link_rather_than_writing_through_it(host: tuple[Path, Path]) -> None:
    root, secret = host
    (root / "docs" / "out.txt").symlink_to(secret / "key")
    with workspace_paths.opened_root(root) as fd:
        workspace_writes.write_bytes(fd, "docs/out.txt", b"written")
        workspace_writes.write_bytes(fd, "new/deeper/file.txt", b"made")
    assert (secret / "key").read_text() == "HOST SECRET"
    assert not (root / "docs" / "out.txt").is_symlink()
    assert (root / "docs" / "out.txt").read_text() == "written"
    assert (root / "new" / "deeper" / "file.txt").read_text() == "made"
    assert not [p for p in root.rglob("*.partial")]


def test_walk_lists_regular_files_and_skips_links(host: tuple[Path, Path]) -> None:
    root, secret = host
    (root / "docs" / "sub").mkdir()
    (root / "docs" / "sub" / "b.txt").write_text("b")
    (root / "out").symlink_to(secret)
    os.mkfifo(root / "pipe")
    with workspace_paths.opened_root(root) as fd:
        found = [
            (path, workspace_paths.read_bytes(folder, name))
            for path, folder, name in workspace_tree.walk_files(fd)
        ]
    assert found == [("docs/a.txt", b"inside"), ("docs/sub/b.txt", b"b")]


@pytest.fixture(autouse=True)
def no_deep_tree_left(tmp_path: Path) -> Iterator[None]:
    """A failed test's deep tree would break pytest's own (recursive) cleanup."""
    yield
    for left in tmp_path.iterdir():
        workspace_tree.remove_tree(left)


def deep_tree(root: Path, depth: int) -> str:
    """`depth` nested folders under root, a file at the bottom; made from
    descriptors (the path is longer than any path a name-based call takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    workspace_writes.write_in(fd, "bottom.txt", b"deep")
    os.close(fd)
    return "/".join(["d"] * depth + ["bottom.txt"])


def test_a_deep_tree_walks_and_is_removed_with_few_descriptors(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    relative = deep_tree(root, DEEP)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 256), hard))  # fewer than the depth
    try:
        with workspace_paths.opened_root(root) as fd:
            assert [path for path, _, _ in workspace_tree.walk_files(fd)] == [relative]
        workspace_tree.remove_tree(root)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not root.exists()


def test_remove_removes_a_link_and_not_its_target(host: tuple[Path, Path], tmp_path: Path) -> None:
    root, secret = host
    (root / "out").symlink_to(secret)
    workspace_tree.remove_tree(root)
    assert not root.exists()
    assert (secret / "key").read_text() == "HOST SECRET"
    (tmp_path / "link-root").symlink_to(secret)
    workspace_tree.remove_tree(tmp_path / "link-root")
    assert not (tmp_path / "link-root").exists() and (secret / "key").exists()
    workspace_tree.remove_tree(tmp_path / "never-was")  # gone already is fine


def test_a_folder_moved_out_while_walked_stops_the_walk(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host.txt").write_text("HOST")
    with workspace_paths.opened_root(root) as fd:
        walking = workspace_tree.walk(fd)
        assert next(walking)[0] == ""
        assert next(walking)[0] == "a"
        assert next(walking)[0] == "a/b"
        # The sandbox moves the folder being walked out: climbing `..` now leads
        # to `outside`, which the walk refuses to enter.
        os.rename(root / "a", outside / "a")
        with pytest.raises(workspace_paths.WorkspaceChanged):
            list(walking)


def test_chown_changes_links_not_their_targets_at_any_depth(
    host: tuple[Path, Path], tmp_path: Path
) -> None:
    root, secret = host
    (root / "docs" / "out").symlink_to(secret / "key")
    deep_tree(root, DEEP)
    uid = gid = 54321
    workspace_tree.chown_tree(root, uid, gid)
    assert (root / "docs" / "a.txt").stat().st_uid == uid
    assert os.lstat(root / "docs" / "out").st_uid == uid
    assert (secret / "key").stat().st_uid == os.getuid()  # the link's target: untouched
    with workspace_paths.opened_root(root) as fd:
        owners = {
            path: os.stat(name, dir_fd=folder).st_uid
            for path, folder, name in workspace_tree.walk_files(fd)
        }
    assert len(owners) == 2 and set(owners.values()) == {uid}
    workspace_tree.remove_tree(root)


async def test_a_file_operation_past_its_deadline_is_too_slow() -> None:
    started = time.monotonic()
    with pytest.raises(workspace_paths.WorkspaceTooSlow, match="WAYBILL_WORKSPACE_IO_SECONDS"):
        await workspace_paths.off_loop(0.1, time.sleep, 2)
    assert time.monotonic() - started < 1
    assert await workspace_paths.off_loop(1, sum, [1, 2]) == 3


def test_too_slow_answers_504_and_not_a_file_400() -> None:
    from waybill.common.errors import http_status_for
    from waybill.services.delivery.workspace_files import served

    too_slow = served(workspace_paths.WorkspaceTooSlow("late"))
    assert http_status_for(too_slow.code) == 504
    assert http_status_for(served(workspace_paths.NotRegularFile("a FIFO")).code) == 400
    assert http_status_for(served(workspace_paths.LinkRefused("a link")).code) == 400
    assert http_status_for(served(workspace_paths.WorkspaceMissing("gone")).code) == 404
