"""`Spawned`: a command gets the descriptors it is given, at the numbers asked for."""

from __future__ import annotations

import os

from waybill.services.runner.sandbox.bwrap import BASH
from waybill.services.runner.sandbox.spawn import Spawned


def _pipe_saying(text: str, at: int) -> None:
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    os.dup2(read, at)
    os.close(read)


async def test_descriptors_whose_numbers_cross_reach_the_command_each_at_its_own() -> None:
    """Ours at b is to be its a, ours at a its b: the dup2s run in turn, and a plain
    one onto a would replace ours at a before it was given."""
    a = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 10  # numbers no one uses
    b = a + 1
    _pipe_saying("first", at=b)
    _pipe_saying("second", at=a)
    try:
        script = f"cat <&{a}; echo; cat <&{b}"
        process = Spawned([BASH, "-c", script], {"PATH": "/usr/bin:/bin"}, passed={a: b, b: a})
        done = await process.finish(4096, 10)
    finally:
        os.close(a)
        os.close(b)
    assert done.stdout.text() == "first\nsecond"
