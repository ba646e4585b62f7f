"""A real MCP server for tests (the `mcp` package's FastMCP), over stdio or
streamable HTTP on loopback:

    python tests/support/mcp_tool_server.py stdio
    python tests/support/mcp_tool_server.py http PORT      # http://127.0.0.1:PORT/mcp

Its tools: `shout` (the text in capitals), `lookup` (a word from a small
dictionary), `served` (this process's id and how many calls it served: the same
process across runs shows that its connection is reused), `refuse` (a tool error),
`crash` (the process exits in the middle of the call) and `flaky` (crashes the
first time, when the file `$MCP_FLAKY_MARKER` is not there yet, then answers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP

WORDS = {"waybill": "a document that travels with a shipment"}

server = FastMCP("waybill-test-tools", host="127.0.0.1", log_level="WARNING")
calls = 0


def counted() -> None:
    global calls
    calls += 1


@server.tool()
def shout(text: str) -> str:
    """Return the text in capital letters."""
    counted()
    return text.upper()


@server.tool()
def lookup(word: str) -> str:
    """Look a word up in the dictionary."""
    counted()
    return WORDS.get(word.lower(), "not in the dictionary")


@server.tool()
def served() -> str:
    """Which process answers, and how many calls it has served."""
    counted()
    return f"pid {os.getpid()} call {calls}"


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """Exits the server in the middle of the call."""
    os._exit(3)


@server.tool()
def flaky() -> str:
    """Crashes the first time it is called, then answers."""
    marker = Path(os.environ["MCP_FLAKY_MARKER"])
    if not marker.exists():
        marker.write_text("crashed once")
        os._exit(3)
    counted()
    return f"flaky answered by pid {os.getpid()}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.settings.port = int(sys.argv[2])
        server.run("streamable-http")
