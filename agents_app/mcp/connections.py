"""This process's MCP sessions: opened lazily, reused across turns, closed when idle.

Each event loop has a ``Pool`` of ``Connection`` objects keyed by instance and server name. A
connection's *keeper* task opens the session (pydantic-ai's ``MCPToolset`` over the official MCP
SDK, through fastmcp's transports), lists what the server offers, and holds the session until no
turn has used it for ``AGENT_MCP_IDLE_SECONDS``; the session is entered and left in that one task,
as the SDK's task groups require, and turns borrow it without entering it. A connection that fails
is marked ``failed`` with the reason, and turns go on without its tools (docs/architecture.md#mcp-servers).

Every change of state is stored (``state.record``) and broadcast to the instance's connections.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from channels.db import database_sync_to_async
from pydantic_ai import RunContext
from pydantic_ai.messages import BinaryContent
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset

from .. import conf, events
from ..actions.envelopes import prepare_output
from . import state
from .servers import MCPServer

if TYPE_CHECKING:
    from pydantic_ai.mcp import CallToolFunc, MCPToolset, ToolResult

logger = logging.getLogger("agents_app.mcp")
T = TypeVar("T")

State = state.State


@dataclass
class _Borrowed(WrapperToolset[Any]):
    """The session's toolset as a turn sees it: entering and leaving it is the keeper's alone."""

    async def __aenter__(self) -> "_Borrowed":
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        return None


def load_client() -> None:
    """Import the MCP client's packages now (``_client``): at start-up, not on a serving event loop."""
    from . import _client  # noqa: F401 - imported for its side effect, on purpose here (``_client``)


def _dump(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]


def describe(exc: BaseException) -> str:
    """The reason a connection failed, in one line (an exception group says its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = "Timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
    return f"{name}: {text}" if text else name


def _prepared(result: "ToolResult") -> Any:
    """A tool's result cut and made JSON-safe as an action's is (docs/architecture.md#output-normalisation);
    images and audio go to the model as they are."""
    if isinstance(result, BinaryContent) or (
            isinstance(result, list) and any(isinstance(part, BinaryContent) for part in result)):
        return result
    return prepare_output(result)


class Connection:
    """One server's session in this process, for one instance."""

    def __init__(self, pool: "Pool", instance_pk: int, server: MCPServer, declared: Sequence[MCPServer]) -> None:
        self.pool = pool
        self.instance_pk = instance_pk
        self.server = server
        self.declared = list(declared)
        self.fingerprint = server.fingerprint()
        self.state: str = State.CONNECTING
        self.error = ""
        self.toolset: MCPToolset[Any] | None = None
        self.tool_names: list[str] = []
        self.settled = asyncio.Event()
        self.users = 0
        loop = asyncio.get_running_loop()
        self.last_used = loop.time()
        self.failed_at: float | None = None
        self._closing = asyncio.Event()
        self._idle = asyncio.Event()
        self.task = asyncio.ensure_future(self._keep())

    @property
    def ready(self) -> bool:
        return self.state == State.READY and self.toolset is not None

    def close(self) -> None:
        """Ask the keeper to close the session (once no turn uses it); one still connecting stops now."""
        self._closing.set()
        if not self.settled.is_set():
            self.task.cancel()

    def _toolset(self) -> "MCPToolset[Any]":
        from . import _client  # here, not at the top: the first connection imports it (``_client``)

        return _client.toolset(self.server, self._call)

    async def _call(self, ctx: RunContext[Any], call_tool: "CallToolFunc", name: str, args: dict[str, Any]) -> Any:
        return _prepared(await call_tool(name, args))

    async def _keep(self) -> None:
        """Open, discover, hold until idle or closed; any failure marks the server failed."""
        server = self.server
        events.emit(events.MCP_PRECONNECT, serverId=server.name, instance=self.instance_pk)
        try:
            toolset = self._toolset()
            await self._report(state.Report(state=State.CONNECTING), unless_ready=True)
            async with contextlib.AsyncExitStack() as stack:
                async with asyncio.timeout(server.connect_timeout):
                    await stack.enter_async_context(toolset)
                    report = await self._discover(toolset)
                self.toolset, self.state = toolset, State.READY
                events.emit(events.MCP_CONNECT, serverId=server.name, url=server.server_url, transport=server.kind,
                            state=State.READY.value)
                # Stored and broadcast before a waiting turn goes on: clients learn of it first.
                await self._report(report)
                # Idle from now: the turn that waited for it has not borrowed it yet.
                self.last_used = asyncio.get_running_loop().time()
                self.settled.set()
                await self._hold()
                self.toolset = None
        except Exception as exc:  # noqa: BLE001 - whatever the server or transport did, it is this server's failure
            if self._closing.is_set():
                return  # closed while connecting (the SDK turns the cancel into an error): no failure of the server's
            self.state, self.error = State.FAILED, describe(exc)
            self.failed_at = asyncio.get_running_loop().time()
            self.toolset = None
            logger.warning("MCP server %s of instance %s failed: %s", server.name, self.instance_pk, self.error)
            events.emit(events.MCP_CONNECT, serverId=server.name, url=server.server_url, transport=server.kind,
                        state=State.FAILED.value, error=self.error)
            await self._report(state.Report(state=State.FAILED, error=self.error))
            self.settled.set()
        finally:
            self.toolset = None
            self.settled.set()
            if self.state != State.FAILED:
                self.pool.discard(self)
                events.emit(events.MCP_CLOSE, serverId=server.name, url=server.server_url, state=str(self.state))

    async def _discover(self, toolset: "MCPToolset[Any]") -> state.Report:
        """What the server offers: tools always, prompts and resources when it says it has them."""
        client = toolset.client
        tools = await toolset.list_tools()
        self.tool_names = [tool.name for tool in tools]
        capabilities = client.server_capabilities
        prompts = await client.list_prompts() if capabilities is not None and capabilities.prompts else []
        resources = await client.list_resources() if capabilities is not None and capabilities.resources else []
        events.emit(events.MCP_DISCOVER, serverId=self.server.name, url=self.server.server_url,
                    state=State.READY.value, tools=len(tools))
        return state.Report(
            state=State.READY, instructions=toolset.instructions, tools=_dump(tools), prompts=_dump(prompts),
            resources=_dump(resources),
            capabilities=(capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
                          if capabilities else None),
        )

    async def _hold(self) -> None:
        """Wait until closed, or idle for ``AGENT_MCP_IDLE_SECONDS`` with no turn using the session."""
        loop = asyncio.get_running_loop()
        while True:
            idle_for = float(conf.get("AGENT_MCP_IDLE_SECONDS"))
            remaining = self.last_used + idle_for - loop.time()
            if self.users == 0 and (self._closing.is_set() or remaining <= 0):
                return
            self._idle.clear()
            waits = [asyncio.ensure_future(self._closing.wait()), asyncio.ensure_future(self._idle.wait())]
            try:
                await asyncio.wait(waits, timeout=max(remaining, 0.05) if self.users == 0 else None,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()

    async def _report(self, report: state.Report, *, unless_ready: bool = False) -> None:
        """Store what changed and broadcast it; a database or channel-layer failure is logged only."""
        try:
            changed = await _to_the_end(functools.partial(state.record, self.instance_pk, self.server, report,
                                                          unless_ready=unless_ready))
            if changed:
                current = await _to_the_end(functools.partial(state.snapshot, self.instance_pk, self.declared))
                await state.broadcast(self.instance_pk, current)
        except Exception:
            logger.exception("The state of MCP server %s of instance %s could not be stored",
                             self.server.name, self.instance_pk)

    @contextlib.asynccontextmanager
    async def borrowed(self) -> AsyncIterator[None]:
        """Mark the session in use for a turn: the keeper does not close it meanwhile."""
        self.users += 1
        try:
            yield
        finally:
            self.users -= 1
            self.last_used = asyncio.get_running_loop().time()
            self._idle.set()

    def turn_toolset(self, keep: set[str]) -> AbstractToolset[Any]:
        """The session's tools for one turn, under the names the model sees, only those in ``keep``."""
        assert self.toolset is not None
        toolset: AbstractToolset[Any] = _Borrowed(self.toolset)
        if self.server.tool_prefix:
            toolset = toolset.renamed({self.server.tool_name(name): name for name in self.tool_names})
        return toolset.filtered(lambda ctx, tool_def: tool_def.name in keep)

    def tools(self) -> list[str]:
        """The names the model sees for the server's tools."""
        return [self.server.tool_name(name) for name in self.tool_names]


class Pool:
    """The connections of one event loop (a server process's, or a Celery task's until it ends)."""

    def __init__(self) -> None:
        self.connections: dict[tuple[int, str], Connection] = {}

    def open(self, instance_pk: int, servers: Sequence[MCPServer], declared: Sequence[MCPServer]) -> list[Connection]:
        """The instance's connections, started where missing; closed where the server went or changed.

        A failed connection is retried once ``AGENT_MCP_RETRY_SECONDS`` have passed.
        """
        loop = asyncio.get_running_loop()
        wanted = {server.name: server for server in servers}
        for (pk, name), connection in list(self.connections.items()):
            if pk == instance_pk and (name not in wanted or wanted[name].fingerprint() != connection.fingerprint):
                self._drop(connection)
        opened = []
        retry = float(conf.get("AGENT_MCP_RETRY_SECONDS"))
        for server in servers:
            connection = self.connections.get((instance_pk, server.name))
            failed_at = connection.failed_at if connection is not None else None
            if connection is not None and failed_at is not None and loop.time() - failed_at >= retry:
                self._drop(connection)
                connection = None
            if connection is None:
                connection = Connection(self, instance_pk, server, declared)
                self.connections[(instance_pk, server.name)] = connection
            connection.declared = list(declared)
            opened.append(connection)
        return opened

    def _drop(self, connection: Connection) -> None:
        self.connections.pop((connection.instance_pk, connection.server.name), None)
        connection.close()

    def discard(self, connection: Connection) -> None:
        """Forget a connection whose keeper ended (idle or closed)."""
        key = (connection.instance_pk, connection.server.name)
        if self.connections.get(key) is connection:
            del self.connections[key]

    async def close(self) -> None:
        """Close every connection and wait for their keepers (a loop about to end)."""
        connections = list(self.connections.values())
        self.connections.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await connection.task


async def _to_the_end(work: Callable[[], T]) -> T:
    """``work()`` on the database thread. A cancellation (a pool closing a keeper that is still
    connecting) waits for it to end, since the thread would go on with it anyway: a closed pool
    leaves no statement of its keepers running on the database."""
    running = asyncio.ensure_future(database_sync_to_async(work)())
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait({running})
        if not running.cancelled() and running.exception() is not None:  # retrieved: the closing keeper drops it
            logger.warning("MCP state write failed as its keeper closed: %s", running.exception())
        raise


_pools: dict[asyncio.AbstractEventLoop, Pool] = {}


def pool() -> Pool:
    """This event loop's pool."""
    loop = asyncio.get_running_loop()
    if loop not in _pools:
        _pools[loop] = Pool()
    return _pools[loop]


async def close_loop() -> None:
    """Close this loop's connections (a Celery task's loop ends after one call)."""
    existing = _pools.pop(asyncio.get_running_loop(), None)
    if existing is not None:
        await existing.close()


@dataclass
class TurnServers:
    """The MCP servers of one turn: its connections in this process, and how long it waits for them."""

    servers: list[MCPServer]
    connections: list[Connection] = field(default_factory=list)

    async def wait(self, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109 - names what is still pending
        """Wait until every connection is ready or failed, at most ``timeout`` seconds (None: no limit).

        Returns the names of the servers still connecting when the wait ended.
        """
        pending = [c for c in self.connections if not c.settled.is_set()]
        if pending and (timeout is None or timeout > 0):
            waits = [asyncio.ensure_future(c.settled.wait()) for c in pending]
            try:
                await asyncio.wait(waits, timeout=timeout)
            finally:  # a timeout or a cancel leaves the others waiting: none outlives this call
                for waiting in waits:
                    waiting.cancel()
        return [c.server.name for c in self.connections if not c.settled.is_set()]

    def ready(self) -> list[Connection]:
        return [c for c in self.connections if c.ready]


async def open_servers(instance_pk: int, declared: Sequence[MCPServer],
                       runtime: Sequence[MCPServer] | None = None) -> TurnServers:
    """The turn's servers (``declared`` and the instance's runtime ones), their connections started.

    ``runtime``: the runtime servers as the caller read them (the turn's start, in its own unit:
    no thread hop here); None reads them.
    """
    if runtime is None:
        runtime = await database_sync_to_async(state.runtime_servers)(instance_pk)
    servers = [*declared, *(s for s in runtime if s.name not in {d.name for d in declared})]
    turn = TurnServers(servers)
    if servers:
        turn.connections = pool().open(instance_pk, servers, declared)
    return turn


async def probe(instance_pk: int, server: MCPServer, *, declared: Sequence[MCPServer]) -> str:
    """Connect to ``server`` once from this process (a server just added), store and broadcast what
    it offers or why it failed, and close again. Returns the state it reached."""
    connection = Connection(Pool(), instance_pk, server, declared)
    await connection.settled.wait()
    reached = connection.state
    connection.close()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await connection.task
    return reached
