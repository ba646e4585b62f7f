"""The checkpointer's pool checks a connection only when it sat idle (or is new)."""

from __future__ import annotations

from waybill.services.runner.persistence.backends import IdleCheck


class Connection:
    pass


async def test_a_connection_taken_again_at_once_goes_unchecked_and_an_idle_one_is_checked() -> None:
    checked: list[Connection] = []

    async def check(connection: Connection) -> None:
        checked.append(connection)

    steady, idle = IdleCheck(60.0, check), IdleCheck(0.0, check)
    new = Connection()
    await steady.check(new)
    assert checked == [new]  # new: never returned, so checked
    await steady.returned(new)
    await steady.check(new)
    assert checked == [new]  # back within 60 s: in steady use
    await steady.check(new)
    assert checked == [new, new]  # taken without a return in between: checked
    await idle.returned(new)
    await idle.check(new)
    assert checked == [new, new, new]  # idle past the threshold (0 s): checked
