"""Chat commands every channel understands, and the words the bot answers with."""

from __future__ import annotations

COMMANDS = ("new", "stop", "status", "start", "help")  # Telegram sends /start first

HELP = (
    "Write to me and I will answer here. /new starts a fresh conversation, "
    "/stop cancels what I am doing, /status says whether I am working."
)
NEW_THREAD = "Started a new conversation: I no longer see the earlier messages."
STOPPED = "Stopped."
NOTHING_TO_STOP = "Nothing is running."
IDLE = "Idle: send a message to start."
BUSY = (
    "I'm still working on your previous message. Wait for its answer, or send /stop to cancel it."
)
CANNOT_START = "Sorry, I could not start on that message."


def over_quota(why: str) -> str:
    """The answer to a message over its owner's quota: admission's reason, which
    names the limit, its value and the use."""
    return f"Sorry, I cannot start on that message now: {why}"


def command_of(text: str) -> str | None:
    """`/stop`, `/stop@my_bot` -> "stop"; any other text (even `/tool …`) -> None."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if not first.startswith("/"):
        return None
    name = first[1:].split("@", 1)[0].lower()
    return name if name in COMMANDS else None


def working(running: list[str], queued: int) -> str:
    line = f"Working on it (run {running[0]})." if running else "Your message is waiting to start."
    if queued:
        line += f" {queued} more message{'s' if queued > 1 else ''} queued."
    return line
