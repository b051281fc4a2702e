"""The action test agent, a port of the reference's ``ThinkToolsTestAgent`` fixture (docs/architecture.md#actions).

``ActionTestAgent`` has three actions, shaped per instance by ``SETUP[name]`` (tests set it
before the turn): ``echo`` (``"action echo: <message>"``), ``pauseAction`` (durable pause,
``"paused-exec: <message>"``) and ``attachAction`` (reply attachments, ``"attached"``). What
ran is in ``PROBES[name]``. The demo model calls them: ``/tool echo {"message": "hello"}``.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agents_app import ChatAgent, ChatResponseResult
from agents_app.actions import Action, action
from agents_app.actions.context import ActionAuthorizationContext, ActionContext, TurnContext
from agents_app.hooks import ToolCall, ToolCallDecision


class EchoInput(BaseModel):
    message: str


class NoInput(BaseModel):
    pass


@dataclass
class Setup:
    """How one instance's actions behave (the reference's ``useEchoActionForTest`` modes)."""

    # Echo: permissions (list or function), approval (bool/function/None), key, timeout, and
    # what execute does: "return", "throw", "hang", "large", "non-json", "slow".
    permissions: Any = ()
    approval: Any = None
    approval_summary: str | None = None
    approval_risk: str | None = None
    key: Any = None
    timeout_ms: float = 30_000
    behaviour: str = "return"
    error: str = "action failed"
    delay: float = 0.05
    # What authorize_turn grants: None = everything; "user" = echo:run to a turn with a user only.
    granted: list[str] | str | None = None
    turn_allowed: bool = True
    # before_tool_call's answer (None: run as asked).
    before: Callable[[ToolCall], ToolCallDecision | None] | None = None
    # pauseAction: approval (None = always park), key; "removed" drops it from get_actions().
    pause_approval: Any = None
    pause_key: str | None = None
    pause_removed: bool = False
    # attachAction scenario: "two", "none", "invalid", "non-json", "overcap", "approval-gated",
    # "predicate-noop", "permission-noop", "attach-then-throw", "with-internal" (one the chat page
    # is not shown: see render_attachment).
    attach: str = "two"
    # echo's output_schema (echo returns a string: a schema expecting an object rejects it).
    output_schema: Any = None
    # echo attaches a voice note before returning.
    echo_attaches: bool = False
    # echo's idempotency_key function attaches (ignored: policies get a no-op attach_reply).
    key_attaches: bool = False
    # authorize_action's override: None keeps the default (the turn's granted permissions).
    authorize: Callable[[ActionAuthorizationContext], Any] | None = None


@dataclass
class Probe:
    count: int = 0
    pause_count: int = 0
    contexts: list[ActionContext] = field(default_factory=list)
    before: list[ToolCall] = field(default_factory=list)
    after: list[tuple[ToolCall, Any]] = field(default_factory=list)
    responses: list[ChatResponseResult] = field(default_factory=list)


SETUP: dict[str, Setup] = {}
PROBES: dict[str, Probe] = {}


def probe(name: str) -> Probe:
    return PROBES.setdefault(name, Probe())


def echo_action(name: str, setup: Setup) -> Action[EchoInput]:
    async def execute(input: EchoInput, ctx: ActionContext) -> Any:
        seen = probe(name)
        seen.count += 1
        seen.contexts.append(ctx)
        if setup.echo_attaches:
            ctx.attach_reply({"type": "voice_note"})
        if setup.behaviour == "throw":
            raise Exception(setup.error)
        if setup.behaviour == "hang":
            await asyncio.Event().wait()
        if setup.behaviour == "slow":
            await asyncio.sleep(setup.delay)
        if setup.behaviour == "large":
            return "x" * 25_000
        if setup.behaviour == "structured":
            return {"echoed": input.message, "length": len(input.message)}
        if setup.behaviour == "non-json":
            cyclic: dict[str, Any] = {"count": 2**80}
            cyclic["self"] = cyclic
            return cyclic
        return f"action echo: {input.message}"

    key = setup.key
    if setup.key_attaches:
        fixed = setup.key

        def key(input: EchoInput, ctx: ActionContext) -> str:
            ctx.attach_reply({"type": "from_idempotency_key"})
            return fixed

    return action(
        description="Echo a message", input_schema=EchoInput, execute=execute, permissions=setup.permissions,
        approval=setup.approval, approval_summary=setup.approval_summary, approval_risk=setup.approval_risk,
        idempotency_key=key, timeout_ms=setup.timeout_ms, output_schema=setup.output_schema,
    )


def pause_action(name: str, setup: Setup) -> Action[EchoInput]:
    def execute(input: EchoInput, ctx: ActionContext) -> str:
        probe(name).pause_count += 1
        ctx.attach_reply({"type": "voice_note"})
        return f"paused-exec: {input.message}"

    return action(
        description="Pause action", input_schema=EchoInput, execute=execute, kind="durable-pause",
        approval=setup.pause_approval, approval_summary="Approve pause action", approval_risk="high",
        permissions=["pause:run"], idempotency_key=setup.pause_key,
    )


def attach_action(setup: Setup) -> Action[NoInput]:
    scenario = setup.attach

    def execute(input: NoInput, ctx: ActionContext) -> str:
        if scenario in ("two",):
            ctx.attach_reply({"type": "voice_note"})
            ctx.attach_reply({"type": "card", "payload": {"id": 1}})
        elif scenario == "invalid":
            for value in (None, {}, {"type": 123}):
                ctx.attach_reply(value)  # type: ignore[arg-type]
        elif scenario == "non-json":
            payload: dict[str, Any] = {"big": 2**80}
            payload["self"] = payload
            ctx.attach_reply({"type": "card", "payload": payload})
        elif scenario == "overcap":
            for i in range(40):
                ctx.attach_reply({"type": "x", "i": i})
        elif scenario == "with-internal":
            ctx.attach_reply({"type": "voice_note"})
            ctx.attach_reply({"type": "x-internal"})
        elif scenario in ("approval-gated", "attach-then-throw"):
            ctx.attach_reply({"type": "voice_note"})
            if scenario == "attach-then-throw":
                raise RuntimeError("attach failed")
        return "attached"

    def predicate(input: NoInput, ctx: ActionContext) -> bool:
        ctx.attach_reply({"type": "from_predicate"})
        return False

    def permissions(input: NoInput, ctx: ActionContext) -> list[str]:
        ctx.attach_reply({"type": "from_permissions"})
        return ["attach:run"]

    options: dict[str, Any] = {}
    if scenario == "approval-gated":
        options = {"approval": True, "approval_summary": "Approve attach action", "approval_risk": "low"}
    elif scenario == "predicate-noop":
        options = {"approval": predicate}
    elif scenario == "permission-noop":
        options = {"permissions": permissions}
    return action(description="Attach things to the reply", input_schema=NoInput, execute=execute, **options)


class ActionTestAgent(ChatAgent):
    """Actions shaped by ``SETUP[self.name]``, observed in ``PROBES[self.name]``."""

    @property
    def setup(self) -> Setup:
        return SETUP.setdefault(self.name, Setup())

    def get_actions(self) -> dict[str, Action[Any]]:
        actions: dict[str, Action[Any]] = {
            "echo": echo_action(self.name, self.setup), "attachAction": attach_action(self.setup),
        }
        if not self.setup.pause_removed:
            actions["pauseAction"] = pause_action(self.name, self.setup)
        return actions

    async def authorize_turn(self, turn: TurnContext) -> dict[str, Any]:
        granted = self.setup.granted
        if granted == "user":
            granted = ["echo:run"] if turn.user is not None else []
        return {"allowed": self.setup.turn_allowed, "granted_permissions": granted}

    async def authorize_action(self, ctx: ActionAuthorizationContext) -> Any:
        if self.setup.authorize is None:
            return await super().authorize_action(ctx)
        return self.setup.authorize(ctx)

    async def before_tool_call(self, call: ToolCall) -> ToolCallDecision | None:
        probe(self.name).before.append(call)
        return self.setup.before(call) if self.setup.before is not None else None

    async def after_tool_call(self, call: ToolCall, output: Any) -> None:
        probe(self.name).after.append((call, output))

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        probe(self.name).responses.append(result)

    def render_attachment(self, attachment: dict[str, Any]) -> dict[str, Any] | None:
        if attachment["type"] == "x-internal":
            return None
        return {**attachment, "label": "Voice note"} if attachment["type"] == "voice_note" else attachment
