"""The lead agent's MCP tools: the servers of the YAML `mcp_servers`, through
langchain-mcp-adapters.

One connection per server per runner process, opened at first use and reused by
every run (a stdio server is one process, not one per call). A connection is
held open by a task of its own, since the MCP client's transports must be entered
and left in one task. When a call finds the connection lost, it is dropped and the
next call opens a new one; a server that cannot be reached is tried again after
`mcp_retry_seconds`. Meanwhile its tools stay in the catalog (those it listed
before) and answer, as a tool error the model reads, that the server is
unavailable: a server that is down never fails a run.

A call that lost its connection may or may not have run on the server, so it is
not repeated, except for the server's `idempotent_tools` (once, on a new
connection). Every MCP tool carries `metadata["idempotent"]` and
`metadata["mcp_server"]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, cast

from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.sessions import Connection
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent, Tool

from waybill.common.config_file import McpServerSpec
from waybill.common.settings import Settings

log = logging.getLogger("waybill.runner.mcp")
# A server that fails to connect is tried once more at once, then only after
# `mcp_retry_seconds`. A stdio server's process may die as it starts (on a loaded
# machine two quick attempts were seen to fail): it gets a third, after pauses.
CONNECT_ATTEMPTS = {"stdio": 3, "streamable_http": 2}
CONNECT_PAUSE_SECONDS = {"stdio": 0.25, "streamable_http": 0.0}  # doubled each time


class McpServerUnavailable(Exception):
    """The server could not be reached; the message says why."""


def connection_of(spec: McpServerSpec) -> Connection:
    """The connection as `MultiServerMCPClient` takes it, secrets read from the environment."""
    if spec.transport == "stdio":
        stdio: dict[str, Any] = {"transport": "stdio", "command": spec.command, "args": spec.args}
        if spec.env is not None:
            stdio["env"] = spec.env
        if spec.cwd is not None:
            stdio["cwd"] = spec.cwd
        return cast(Connection, stdio)
    headers = {**spec.headers}
    headers.update({name: os.environ.get(var, "") for name, var in spec.headers_env.items()})
    http = {"transport": "streamable_http", "url": spec.url, "headers": headers}
    return cast(Connection, http)


def error_result(text: str) -> CallToolResult:
    """A tool error the model reads (the adapter makes it a ToolMessage, status "error")."""
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=True)


def described(error: BaseException) -> str:
    """An error in one line; an exception group (the transports' task groups) by its first."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return str(error) or type(error).__name__


class McpConnection:
    """One MCP server: its held-open session, and the tools it listed last."""

    def __init__(self, name: str, spec: McpServerSpec, settings: Settings) -> None:
        self.name = name
        self.spec = spec
        self.settings = settings
        self.client = MultiServerMCPClient({name: connection_of(spec)})
        self.tools: list[BaseTool] = []
        self._session: ClientSession | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._retry_at = 0.0
        self._why = ""

    # ---- the connection --------------------------------------------------------

    async def session(self) -> ClientSession:
        """The live session, opened (and the tools listed) when there is none."""
        async with self._lock:
            if self._session is not None:
                return self._session
            if time.monotonic() < self._retry_at:
                raise McpServerUnavailable(self._why)
            attempts = CONNECT_ATTEMPTS[self.spec.transport]
            for attempt in range(attempts):
                try:
                    session = await asyncio.wait_for(
                        self._open(), self.settings.mcp_connect_timeout_seconds
                    )
                    self.tools = self._converted(await self._listed(session))
                except Exception as error:
                    why = "timed out" if isinstance(error, TimeoutError) else described(error)
                    last = attempt == attempts - 1
                    self._drop(f"cannot connect: {why}", retry_later=last)
                    log.warning("MCP server %s: %s", self.name, self._why)
                    if not last:
                        await asyncio.sleep(CONNECT_PAUSE_SECONDS[self.spec.transport] * 2**attempt)
                    continue
                self._session = session
                log.info("MCP server %s: connected, %d tools", self.name, len(self.tools))
                return session
            raise McpServerUnavailable(self._why)

    async def _open(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        # Its failure is read by `session`, unless it came after the connect timeout.
        ready.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._stop = asyncio.Event()
        # A task of the process, not of the run that happened to open it.
        self._holder = asyncio.get_running_loop().create_task(
            self._hold(ready, self._stop), context=contextvars.Context()
        )
        return await asyncio.shield(ready)

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        try:
            async with self.client.session(self.name) as session:
                ready.set_result(session)
                await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else ConnectionError())
            elif not stop.is_set():
                log.warning("MCP server %s: connection lost: %s", self.name, described(error))
            if not isinstance(error, Exception):
                raise
        finally:
            if self._stop is stop:
                self._session = None

    def _drop(self, why: str, retry_later: bool) -> None:
        """Close the connection; the next call opens a new one (at once, or after the retry)."""
        self._session = None
        self._why = why
        self._stop.set()
        if self._holder is not None and not self._holder.done():
            self._holder.cancel()
        if retry_later:
            self._retry_at = time.monotonic() + self.settings.mcp_retry_seconds

    async def close(self) -> None:
        self._drop("the runner is stopping", retry_later=False)
        if self._holder is not None:
            await asyncio.wait([self._holder], timeout=self.settings.loop_stop_seconds)

    # ---- the tools -------------------------------------------------------------

    @staticmethod
    async def _listed(session: ClientSession) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                return tools

    def _converted(self, listed: list[Tool]) -> list[BaseTool]:
        """LangChain tools whose calls go through this connection (`call_tool` below)."""
        tools = []
        for mcp_tool in listed:
            tool = convert_mcp_tool_to_langchain_tool(
                cast(ClientSession, self),
                mcp_tool,
                server_name=self.name,
                tool_name_prefix=self.spec.tool_name_prefix,
            )
            idempotent = mcp_tool.name in self.spec.idempotent_tools
            tool.metadata = {**(tool.metadata or {}), "mcp_server": self.name,
                             "idempotent": idempotent}  # fmt: skip
            tools.append(tool)
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        """What the adapter's tools call: the tool on the live session, or the reason
        it could not be called, as a tool error."""
        retries = 1 if name in self.spec.idempotent_tools else 0
        while True:
            try:
                session = await self.session()
            except McpServerUnavailable as unavailable:
                return error_result(
                    f"MCP server '{self.name}' is unavailable ({unavailable}); "
                    "its tools cannot be used now, try again later or do without them."
                )
            try:
                return await self._while_connected(
                    session.call_tool(
                        name,
                        arguments,
                        read_timeout_seconds=timedelta(
                            seconds=self.settings.mcp_call_timeout_seconds
                        ),
                        progress_callback=kwargs.get("progress_callback"),
                    )
                )
            except McpError as error:
                if error.error.code != CONNECTION_CLOSED:  # the server answered: an error
                    return error_result(f"MCP server '{self.name}': {error.error.message}")
                lost = described(error)
            except Exception as error:  # the transport failed under the call
                lost = described(error)
            self._drop(f"connection lost: {lost}", retry_later=False)
            if retries == 0:
                return error_result(
                    f"MCP server '{self.name}': the connection was lost during the call "
                    f"({lost}); it may or may not have run, so it is not repeated."
                )
            retries -= 1

    async def _while_connected(self, call: Coroutine[Any, Any, CallToolResult]) -> CallToolResult:
        """The call's result, or ConnectionError as soon as the connection ends under
        it (a lost HTTP server would otherwise leave it waiting for its timeout)."""
        holder = self._holder
        answer = asyncio.ensure_future(call)
        if holder is None:
            return await answer
        try:
            await asyncio.wait([answer, holder], return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the run is cancelled meanwhile
            lost = not answer.done()
            if lost:
                answer.cancel()
        if lost:
            raise ConnectionError("the connection ended")
        return answer.result()


class McpToolbox:
    """Every configured MCP server of this runner process."""

    def __init__(self, servers: dict[str, McpServerSpec], settings: Settings) -> None:
        self.connections = [McpConnection(name, spec, settings) for name, spec in servers.items()]

    async def tools(self) -> list[BaseTool]:
        """The servers' tools: each server connected first if it is not (a server that
        cannot be reached keeps the tools it listed before, which say so when called)."""
        await asyncio.gather(*(self._reach(c) for c in self.connections))
        return [tool for connection in self.connections for tool in connection.tools]

    @staticmethod
    async def _reach(connection: McpConnection) -> None:
        with contextlib.suppress(McpServerUnavailable):
            await connection.session()

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))


_toolbox: McpToolbox | None = None


def open_mcp_toolbox(settings: Settings) -> McpToolbox:
    """This process's toolbox (one connection per server, shared by every run), made
    at the runner's start; its servers are reached when a run first asks."""
    global _toolbox
    if _toolbox is None:
        _toolbox = McpToolbox(settings.mcp_servers(), settings)
    return _toolbox


async def mcp_tools() -> list[BaseTool]:
    """The tools of this process's MCP servers (none before its toolbox is opened)."""
    return await _toolbox.tools() if _toolbox is not None else []


async def close_mcp_toolbox() -> None:
    global _toolbox
    if _toolbox is not None:
        await _toolbox.close()
        _toolbox = None
