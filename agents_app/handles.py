"""Instance handles: what ``await MyAgent.aget(name)`` (and ``agent.handle``) return.

A handle names one agent instance and offers the operations on it that run outside a turn, or
start turns: programmatic turns (``save_messages``), cancelling and resetting turns, waiting for
the instance to settle, reading what a turn attached, and the staff decisions on its parked
actions. Each is one call into the service that owns it (``turns``, ``approvals``), so a handle
works the same on any process: nothing it needs lives in memory.
"""

import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async

from . import registry, transcript, turns
from .abort import AbortSignal
from .agent import ChatAgent, SaveMessagesResult
from .approvals import service as approvals
from .errors import UnknownAgent
from .followers import TurnFollower, notify
from .lifecycle import service as lifecycle
from .mcp import service as mcp
from .messages import UIMessage, new_request_id
from .models import AgentInstance, Turn
from .schedules import declared
from .schedules.declared import ScheduleEntry
from .turns.programmatic import MessagesOrFunction


@dataclass(frozen=True)
class AgentHandle:
    """One agent instance, addressed from code (a view, a Celery task, another agent).

    ``user``: who the turns it starts run for (``authorize_turn`` sees them); a handle that an
    agent makes in a turn (``agent.handle``, ``agent.sub_agent``) carries that turn's user.
    """

    agent_class: type[ChatAgent]
    instance: AgentInstance
    user: Any = None

    @property
    def name(self) -> str:
        return self.instance.name

    def agent(self) -> ChatAgent:
        """An agent object of this instance, outside any turn (its tools, actions, model)."""
        return self.agent_class(self.instance)

    # --- turns ------------------------------------------------------------------------------------
    async def save_messages(self, messages: MessagesOrFunction, *, signal: AbortSignal | None = None
                            ) -> SaveMessagesResult:
        """Append messages to the transcript and run a turn on them; wait for it to finish.

        ``messages`` are UIMessages (plain strings become user text messages), or a function of
        the transcript (sync or async) returning them, called when the turn starts, so it sees
        what was queued before it. The turn queues behind any running turn of the instance, and
        every connection of the instance, on any server process, sees its reply stream.
        ``signal`` cancels it (``AbortSignal``). Status: ``completed``, ``error``, ``skipped``
        (a clear came first) or ``aborted``.
        """
        return await turns.save_messages(self.instance, messages, signal=signal, user=self.user)

    async def chat(self, message: str | UIMessage | MessagesOrFunction, callback: Any, *,
                   signal: AbortSignal | None = None, tools: Any = None) -> SaveMessagesResult:
        """Run a turn of this agent and stream it to ``callback`` (the reference's ``chat()``).

        ``message`` is a user message (text or UIMessage), messages, or a function of the
        transcript returning them (``save_messages``). ``callback`` (``StreamCallback`` or any
        object with its methods) gets ``on_start({"request_id"})`` first, ``on_event(chunk_json)``
        for every chunk, in order, wherever the turn runs, then ``on_done()``, ``on_error(message)``
        or ``on_interrupted()``; an aborted turn calls none of them. A callback that raises is
        logged and does not stop the turn. The agent's own tools run: ``tools`` is ignored.
        """
        if tools is not None:
            warnings.warn("chat(): tools belong to the agent that runs the turn; the ones passed are ignored",
                          stacklevel=2)
        request_id = new_request_id()
        await notify(callback, "on_start", {"request_id": request_id})
        follower = TurnFollower(self.instance, request_id, callback)
        async with follower.following():
            messages = [message] if isinstance(message, str | dict) else message
            result = await turns.save_messages(self.instance, messages, signal=signal, request_id=request_id,
                                               user=self.user)
            ending = await follower.ended()
        if result.status == Turn.Status.COMPLETED:
            await notify(callback, "on_done")
        elif result.status == Turn.Status.ERROR:
            await notify(callback, "on_error", result.error or follower.error or "Error")
        elif ending == "interrupted":
            await notify(callback, "on_interrupted")
        return result

    async def sub_agent(self, agent_class: type[ChatAgent], name: str) -> "AgentHandle":
        """A handle on sub-agent ``name`` of class ``agent_class``: an instance of its own whose
        parent is this one (made on first use, with this one's owner).

        It is addressed ``<this address>/sub/<slug>/<name>`` (WebSocket, get-messages, the chat
        page), its owner opens it there, and the admin lists it under its parent. Its class must
        be in ``AGENT_CLASSES``: any process may run its turns.

        Raises:
            UnknownAgent: ``agent_class`` is not served, or ``name`` is not a valid name.
        """
        if registry.agent_classes().get(agent_class.slug()) is not agent_class:
            raise UnknownAgent(f"{agent_class.__qualname__} is not in AGENT_CLASSES: add it to run sub-agents of it")
        child = await registry.asub_instance(self.instance, agent_class.slug(), name)
        return AgentHandle(agent_class, child, self.user)

    async def persist_messages(self, messages: list[UIMessage | str]) -> list[UIMessage]:
        """Store messages and show them to every connection, without running a turn."""
        return await turns.persist_messages(self.instance, messages)

    async def continue_last_turn(self, body: dict[str, Any] | None = None, *,
                                 signal: AbortSignal | None = None, append: bool = False) -> SaveMessagesResult:
        """Have the model go on after the last reply, in a new message marked ``continuation: true``
        (as Think does), or, with ``append=True``, in the last reply itself (as AIChatAgent does).

        ``skipped`` (empty request id) when the transcript does not end with an assistant message.
        """
        return await turns.continue_last_turn(self.instance, body, signal=signal, append=append)

    async def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        """Cancel one queued or running turn (its reply so far is kept); False if it is unknown or over."""
        return await turns.cancel(self.instance, request_id, reason)

    async def cancel_all_chats(self) -> int:
        """Cancel every queued and running turn of the instance; returns how many."""
        return await turns.cancel_all(self.instance)

    async def has_pending_interaction(self) -> bool:
        """True while a reply waits on the user: an approval, or a tool call without a result."""
        return await turns.has_pending_interaction(self.instance)

    async def wait_until_stable(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109 - the reference's API: False at the deadline
        """Wait until no turn is queued or running and nothing waits on the user (False on timeout)."""
        return await turns.wait_until_stable(self.instance, timeout)

    async def reset_turn_state(self) -> None:
        """Abort the running turn and skip the queued ones, keeping the transcript (clear does both)."""
        await turns.reset_turn_state(self.instance)

    async def abort_request(self, request_id: str) -> bool:
        """Cancel one queued or running turn by request id."""
        return await turns.cancel(self.instance, request_id)

    async def abort_all_requests(self) -> int:
        """Cancel every queued and running turn of the instance; returns how many."""
        return await turns.cancel_all(self.instance)

    async def reply_attachments(self, request_id: str | None = None) -> list[dict[str, Any]]:
        """What the actions of a turn attached: turn ``request_id``, else the latest finished turn."""
        finished = Turn.objects.of(self.instance).finished()
        if request_id is not None:
            finished = finished.filter(request_id=request_id)
        turn = await finished.order_by("-pk").only("attachments").afirst()
        return list(turn.attachments) if turn is not None else []

    # --- the transcript and the instance's end (docs/architecture.md#connection-hooks) ------------
    async def get_messages(self) -> list[UIMessage]:
        """The stored transcript (the reference's ``this.messages`` read from outside a turn)."""
        return await database_sync_to_async(transcript.load)(self.instance)

    async def destroy(self) -> lifecycle.Destroyed:
        """Cancel the instance's turns, then delete its transcript, turns, stream buffers, ledger rows,
        schedules and sub-agents, and close its sockets (``agents_app.lifecycle.service``); the address then
        names a new, empty conversation. The reference Agent's ``destroy()``."""
        return await lifecycle.destroy(self.instance)

    # --- staff decisions on parked actions --------------------------------------------------------
    async def pending_approvals(self, execution_id: str | None = None) -> list[dict[str, Any]]:
        """Parked durable-pause calls of this instance: ``[{executionId, source, descriptor}]``."""
        return await database_sync_to_async(approvals.pending_approvals)(self.instance, execution_id)

    async def approve_execution(self, execution_id: str, *, actor: Any = None) -> Any:
        """Run a parked call once and continue the conversation (``approvals.approve_execution``)."""
        return await approvals.approve_execution(execution_id, actor=actor, instance=self.instance)

    async def reject_execution(self, execution_id: str, reason: str | None = None, *, actor: Any = None) -> Any:
        """Refuse a parked call and continue the conversation (``approvals.reject_execution``)."""
        return await approvals.reject_execution(execution_id, reason, actor=actor, instance=self.instance)

    # --- MCP servers (the reference Agent's addMcpServer / removeMcpServer / getMcpServers) ---------
    async def add_mcp_server(self, name: str, url: str, *, headers: dict[str, Any] | None = None,
                             transport: str | None = None, needs_approval: bool | list[str] = False,
                             tool_prefix: str = "", connect: bool = True) -> dict[str, Any]:
        """Add an MCP server to this instance: stored, so turns on every process use it.

        ``headers`` values are references, never secrets: ``env("TOKEN", prefix="Bearer ")``,
        ``setting("NAME")``, or the strings ``"env:NAME"`` / ``"setting:NAME"``. ``transport``:
        ``"streamable-http"`` (default) or ``"sse"``. With ``connect`` this process connects once
        at once, so clients see its tools. Returns ``{id, state, error}``.

        Raises:
            MCPConfigurationError: a bad name, URL or header; ``MCPServerExists`` when taken.
        """
        return await mcp.aadd_server(self.instance, name, url, headers=headers, transport=transport,
                                     needs_approval=needs_approval, tool_prefix=tool_prefix, connect=connect)

    async def remove_mcp_server(self, name: str) -> bool:
        """Remove a server added with ``add_mcp_server``; False when there is none by that name."""
        return await mcp.aremove_server(self.instance, name)

    async def list_mcp_servers(self) -> list[dict[str, Any]]:
        """This instance's MCP servers, declared and added: ``[{id, name, server_url, state, error,
        declared, tools, ...}]``."""
        return await database_sync_to_async(mcp.list_servers)(self.instance)

    async def get_mcp_servers(self) -> dict[str, Any]:
        """The state clients receive (``cf_agent_mcp_servers``): ``{servers, tools, prompts, resources}``."""
        return (await database_sync_to_async(mcp.snapshot)(self.instance)).as_json()

    # --- schedules (the reference Agent's schedule API) -------------------------------------------
    async def schedule(self, when: float | datetime | str, callback: str, payload: Any = None, *,
                       idempotent: bool | None = None, timezone: str | None = None) -> ScheduleEntry:
        """Call the agent's method ``callback(payload, ctx)`` at ``when``, on a worker.

        ``when``: a delay in seconds, an aware datetime, or a cron or schedule-language string
        (``"0 9 * * 1-5"``, ``"every day at 09:00 in Europe/Oslo"``: recurring). ``ctx`` is the
        run's ``ScheduledTaskContext`` (occurrence and idempotency keys). String schedules are
        idempotent by default: the same callback, payload and string return the existing schedule.
        """
        return await database_sync_to_async(declared.add_agent_schedule)(
            self.instance, self.agent_class, when, callback, payload, idempotent=idempotent, time_zone=timezone)

    async def schedule_every(self, seconds: int, callback: str, payload: Any = None) -> ScheduleEntry:
        """Call ``callback(payload, ctx)`` every ``seconds`` (idempotent: one schedule per callback and payload)."""
        return await database_sync_to_async(declared.add_agent_interval)(
            self.instance, self.agent_class, seconds, callback, payload)

    async def get_schedules(self, *, id: str | None = None, type: str | None = None) -> list[ScheduleEntry]:
        """This instance's ``schedule()`` schedules, by ``id``, or ``type``: delayed, scheduled, cron, interval."""
        return await database_sync_to_async(declared.agent_schedules)(
            self.instance, schedule_id=id, schedule_type=type)

    async def cancel_schedule(self, id: str) -> bool:
        """Remove a ``schedule()`` schedule; False if there is none by that id."""
        return await database_sync_to_async(declared.cancel_agent_schedule)(self.instance, id)

    async def sync_scheduled_tasks(self) -> dict[str, int]:
        """Bring this instance's ``get_scheduled_tasks()`` rows in line now (after app data they read changed)."""
        return await database_sync_to_async(declared.sync_declared)(instance=self.instance)
