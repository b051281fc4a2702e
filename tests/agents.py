"""Agent classes used only by the tests (listed in thinkproject/settings_test.py)."""

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic import BaseModel
from pydantic_ai import RunContext

from agents_app import (
    ActionContext,
    ChatAgent,
    ChatRecoveryContext,
    ChatResponseResult,
    Debounce,
    TurnState,
    action,
    agent_tool,
    callable,
    scheduled_occurrence,
)
from agents_app.demo.agents import DemoAgent

# Results seen by on_chat_response, per instance name (tests read and clear it).
RESPONSES: dict[str, list[ChatResponseResult]] = {}


class BodyEchoAgent(ChatAgent):
    """Replies in plain text with the custom body and request id it was given."""

    async def on_chat_message(self) -> str:
        return json.dumps({"body": self.body, "request_id": self.request_id})

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        RESPONSES.setdefault(self.name, []).append(result)


class SilentAgent(ChatAgent):
    """Returns no response at all."""

    async def on_chat_message(self) -> None:
        return None


class BrokenAgent(ChatAgent):
    """Raises before producing anything."""

    async def on_chat_message(self) -> str:
        raise RuntimeError("agent exploded")


class ChunkAgent(ChatAgent):
    """Streams UI chunks written by hand, slowly, honouring the abort signal."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "text-start", "id": "t1"}
            for i in range(50):
                await asyncio.sleep(0.01)
                yield {"type": "text-delta", "id": "t1", "delta": f"c{i} "}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish", "finishReason": "stop"}

        return chunks()


class SharedRoomAgent(ChatAgent):
    """Any logged-in user may open any instance."""

    shared = True


def explode(why: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"exploded: {why}")


async def report(ctx: "RunContext[TurnState[ToolAgent]]") -> str:
    """Writes data parts: one updated in place, one appended, one transient."""
    await ctx.deps.write({"type": "data-status", "id": "s1", "data": {"step": 1}})
    await ctx.deps.write({"type": "data-status", "id": "s1", "data": {"step": 2}})
    await ctx.deps.write({"type": "data-note", "data": {"text": "appended"}})
    await ctx.deps.write({"type": "data-ping", "data": {"at": 1}, "transient": True})
    return "reported"


class ToolAgent(ChatAgent):
    """Tools for the tool tests."""

    def get_tools(self) -> list[Any]:
        return [explode, report]


# Released by the test: GateAgent streams "before ", waits for it, then "after".
GATE: dict[str, asyncio.Event] = {}


class GateAgent(ChatAgent):
    """A reply that pauses mid-stream until the test opens the gate (deterministic resume tests)."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        gate = GATE.setdefault(self.name, asyncio.Event())

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "start-step"}
            yield {"type": "text-start", "id": "t1"}
            yield {"type": "text-delta", "id": "t1", "delta": "before "}
            await gate.wait()
            yield {"type": "text-delta", "id": "t1", "delta": "after"}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish-step"}
            yield {"type": "finish", "finishReason": "stop"}

        return chunks()


class TailAgent(ChatAgent):
    """Streams its whole reply at once, then waits before the turn ends: its last chunks and its
    terminal frame travel in different fan-out batches (lost-tail tests)."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "text-start", "id": "t1"}
            for i in range(5):
                yield {"type": "text-delta", "id": "t1", "delta": f"w{i} "}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish", "finishReason": "stop"}
            await asyncio.sleep(0.2)

        return chunks()


# Per instance name: (request id, monotonic time) of every turn whose on_chat_message ran.
STARTED: dict[str, list[tuple[str, float]]] = {}


class SlowStreamAgent(ChatAgent):
    """Streams plain text as the request body says, as the reference's concurrency test agents do.

    Body: ``chunkCount`` (default 3) pieces ``c0 c1 ...``, ``chunkDelayMs`` apart (default 10);
    ``gate: true`` waits for ``GATE[<instance name>]`` before the first piece (a test holds the
    turn open that way, on any machine load). Records ``STARTED`` and ``RESPONSES``.
    """

    async def on_chat_message(self) -> AsyncIterator[str]:
        STARTED.setdefault(self.name, []).append((self.request_id, time.monotonic()))
        body = self.body or {}
        gate = GATE.setdefault(self.name, asyncio.Event()) if body.get("gate") else None
        count, delay = int(body.get("chunkCount", 3)), float(body.get("chunkDelayMs", 10)) / 1000

        async def pieces() -> AsyncIterator[str]:
            if gate is not None:
                await gate.wait()
            for i in range(count):
                await asyncio.sleep(delay)
                yield f"c{i} "

        return pieces()

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        RESPONSES.setdefault(self.name, []).append(result)


class LatestAgent(SlowStreamAgent):
    message_concurrency = "latest"


class MergeAgent(SlowStreamAgent):
    message_concurrency = "merge"


class DropAgent(SlowStreamAgent):
    message_concurrency = "drop"


class DebounceAgent(SlowStreamAgent):
    message_concurrency = Debounce(ms=80)


class DefaultDebounceAgent(SlowStreamAgent):
    message_concurrency = Debounce()


class InvalidDebounceAgent(SlowStreamAgent):
    message_concurrency = Debounce(ms=float("nan"))


class BoundedAgent(ChatAgent):
    """Keeps only its last four messages stored (``max_persisted_messages``)."""

    max_persisted_messages = 4


def big_report(rows: int = 12_000) -> dict[str, Any]:
    """A tool whose output (about 2.6 MB of JSON) is too large to store as it is."""
    return {"rows": [{"id": i, "name": "n" * 200} for i in range(rows)], "total": rows}


SECRET = "sk-test-0123456789"


class StorageAgent(ChatAgent):
    """A tool with a huge output, and a hook that redacts a secret before anything is stored."""

    def get_tools(self) -> list[Any]:
        return [big_report]

    def sanitize_message_for_persistence(self, message: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(message).replace(SECRET, "[redacted]"))


class OneStepAgent(ChatAgent):
    """May make one model request per turn: a tool call uses it up (``max_steps``)."""

    max_steps = 1

    def get_tools(self) -> list[Any]:
        return [big_report]


SUMMARY_REQUEST = "Now summarize what you found."
# ChainAgent's hook calls, per instance name: ("enter" | "exit", request id), in order.
HOOK_CALLS: dict[str, list[tuple[str, str]]] = {}


class ChainAgent(ChatAgent):
    """After a completed turn, asks for a summary from inside ``on_chat_response`` (the reference's example)."""

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        calls = HOOK_CALLS.setdefault(self.name, [])
        calls.append(("enter", result.request_id))
        asked = [p.get("text") for m in self.messages if m["role"] == "user" for p in m["parts"]]
        if result.status == "completed" and SUMMARY_REQUEST not in asked:
            await self.handle.save_messages([SUMMARY_REQUEST])
        calls.append(("exit", result.request_id))


class RpcAgent(ChatAgent):
    """Methods a client may call over the WebSocket, and one it may not."""

    @callable
    def add(self, a: int, b: int) -> int:
        return a + b

    @callable
    async def messages_stored(self) -> int:
        return len(await self.handle.persist_messages([]))

    @callable
    def fail(self) -> None:
        raise ValueError("no such order")

    def internal(self) -> str:
        return "not for clients"


# What ScheduledAgent's handlers and methods were called with, per instance name (tests clear it).
SCHEDULE_CALLS: dict[str, list[tuple[str, Any, Any]]] = {}
# Side effects of ScheduledAgent's ``charge`` action: one line per execution.
CHARGES: list[str] = []


class ChargeInput(BaseModel):
    customer: str


def charge(input: ChargeInput, ctx: ActionContext) -> str:
    CHARGES.append(input.customer)
    return f"charged {input.customer}"


def charge_key(input: ChargeInput, ctx: ActionContext) -> str:
    """Once per scheduled occurrence (the occurrence's idempotency key), else once per customer."""
    occurrence = scheduled_occurrence(ctx.agent.messages)
    return occurrence["idempotencyKey"] if occurrence else f"charge:{input.customer}"


class ScheduledAgent(ChatAgent):
    """Declares scheduled tasks (``TASKS``, which tests change) and has methods the agent API calls."""

    TASKS: ClassVar[dict[str, Any]] = {}
    DEFAULT_TIMEZONE: ClassVar[str | None] = None

    def get_scheduled_tasks(self) -> dict[str, Any]:
        return {task_id: {**task, "handler": getattr(self, task["handler"])} if "handler" in task else task
                for task_id, task in self.TASKS.items()}

    def get_default_timezone(self) -> str | None:
        return self.DEFAULT_TIMEZONE

    def get_actions(self) -> dict[str, Any]:
        return {"charge": action(description="Charge a customer", input_schema=ChargeInput, execute=charge,
                                 idempotency_key=charge_key)}

    async def report(self, ctx: Any) -> None:
        SCHEDULE_CALLS.setdefault(self.name, []).append(("report", None, ctx))

    async def remember(self, payload: Any, ctx: Any) -> None:
        SCHEDULE_CALLS.setdefault(self.name, []).append(("remember", payload, ctx))

    def explode(self, payload: Any, ctx: Any) -> None:
        raise RuntimeError(f"exploded on {payload}")


class BadScheduleAgent(ChatAgent):
    """Declares a schedule with a typo: system check E006 reports it."""

    def get_scheduled_tasks(self) -> dict[str, Any]:
        return {"daily": {"schedule": "evry day at 09:00", "timezone": "UTC", "prompt": "hi"}}


# What RecoveryAgent's hooks saw, per instance name (tests read and clear it).
RECOVERY_CALLS: dict[str, list[Any]] = {}


class RecoveryAgent(ChatAgent):
    """The demo model, with recovery hooks the tests set per case (class attributes they patch).

    ``recovery_options``: what ``on_chat_recovery`` answers (or an exception it raises). The
    contexts its hooks get are recorded in ``RECOVERY_CALLS[name]``.
    """

    recovery_options: ClassVar[dict[str, bool] | Exception] = {}

    async def on_chat_message(self) -> Any:
        if self.messages and self.messages[-1].get("role") == "user":
            await self.stash({"asked": self.messages[-1]["id"]})
        return await super().on_chat_message()

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> dict[str, bool] | None:
        RECOVERY_CALLS.setdefault(self.name, []).append(ctx)
        if isinstance(self.recovery_options, Exception):
            raise self.recovery_options
        return self.recovery_options


# How many times StallAgent's model stream started, per instance name.
STALL_RUNS: dict[str, int] = {}


class StallAgent(ChatAgent):
    """Streams three words, then goes silent forever on its first run; later runs finish."""

    chat_stream_stall_timeout = 0.3

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        run = STALL_RUNS[self.name] = STALL_RUNS.get(self.name, 0) + 1

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            if not self.continuation:
                yield {"type": "start"}
                yield {"type": "start-step"}
                yield {"type": "text-start", "id": "t1"}
                for word in ("one ", "two ", "three "):
                    yield {"type": "text-delta", "id": "t1", "delta": word}
            if run == 1:
                await asyncio.Event().wait()
            if self.continuation:
                yield {"type": "start"}
                yield {"type": "text-start", "id": "t2"}
            yield {"type": "text-delta", "id": "t2" if self.continuation else "t1", "delta": "four."}
            yield {"type": "text-end", "id": "t2" if self.continuation else "t1"}
            yield {"type": "finish", "finishReason": "stop"}

        return chunks()


async def slow_tool(seconds: float = 20) -> str:
    """Waits, then answers: a tool call long enough for a crash to cut."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


class SlowRefundInput(BaseModel):
    order_id: str
    seconds: float = 20


async def slow_refund(input: SlowRefundInput, ctx: ActionContext) -> dict[str, str]:
    """The side effect (a line in the file ``CRASH_EFFECTS`` names), then a wait a crash can cut."""
    with open(os.environ["CRASH_EFFECTS"], "a") as effects:
        effects.write(f"{input.order_id} {os.getpid()}\n")
    await asyncio.sleep(input.seconds)
    return {"refunded": input.order_id}


class CrashAgent(ChatAgent):
    """The demo model with a slow tool and a slow keyed action, for the kill -9 tests."""

    def get_tools(self) -> list[Any]:
        return [slow_tool]

    def get_actions(self) -> dict[str, Any]:
        return {"slow_refund": action(description="Refund an order, slowly", input_schema=SlowRefundInput,
                                      execute=slow_refund, idempotency_key=lambda input, ctx: input.order_id)}


class ChildAgent(ChatAgent):
    """The reference's child agent: a research assistant (the demo model answers it)."""

    system_prompt = "You are a research assistant. Find what the task asks and report it briefly."

    async def work(self, payload: dict[str, Any], ctx: Any) -> None:
        """A scheduled call (``handle.schedule``): a turn of this sub-agent, on the worker that runs it."""
        await self.handle.save_messages([payload["prompt"]])


class ParentAgent(ChatAgent):
    """The reference's parent: a callable method hands a task to sub-agent ``child-1`` and returns
    what its ``chat()`` callback saw, in order."""

    @callable
    async def research(self, task: str) -> dict[str, Any]:
        child = await self.sub_agent(ChildAgent, "child-1")
        seen: list[Any] = []

        class Collect:
            def on_start(self, info: dict[str, Any]) -> None:
                seen.append(["start", info["request_id"]])

            def on_event(self, chunk: str) -> None:
                seen.append(["event", json.loads(chunk)])

            def on_done(self) -> None:
                seen.append(["done"])

            def on_error(self, message: str) -> None:
                seen.append(["error", message])

        result = await child.chat(task, Collect())
        return {"seen": seen, "status": result.status, "request_id": result.request_id}

    @callable
    async def keep_child_busy(self, prompt: str) -> str:
        """Have a Celery worker run a turn of ``child-1`` (a scheduled call, due now)."""
        child = await self.sub_agent(ChildAgent, "child-1")
        entry = await child.schedule(0, "work", {"prompt": prompt})
        return str(entry.id)


# Built once, as agent_tool asks.
DELEGATE = agent_tool(ChildAgent, name="delegate", description="Hand a task to the child agent")


class ToolParentAgent(ChatAgent):
    """Has a child agent as its tool ``delegate``."""

    def get_tools(self) -> list[Any]:
        return [DELEGATE]


# What RecordingAgent's model was asked, by instance name: (messages, AgentInfo) per request.
RECORDED: dict[str, list[tuple[list[Any], Any]]] = {}


class RecordingAgent(DemoAgent):
    """The demo agent, whose model records every request it gets (the direct first step's test)."""

    def get_model(self) -> Any:
        from pydantic_ai.models.function import FunctionModel

        from agents_app.llm.demo import build_demo_model

        demo = build_demo_model()
        calls = RECORDED.setdefault(self.name, [])

        def request(messages: list[Any], info: Any) -> Any:
            calls.append((messages, info))
            return demo.function(messages, info)  # type: ignore[misc]

        async def stream(messages: list[Any], info: Any) -> AsyncIterator[Any]:
            calls.append((messages, info))
            async for item in demo.stream_function(messages, info):  # type: ignore[misc]
                yield item

        return FunctionModel(request, stream_function=stream, model_name=demo.model_name)


class CustomBuildAgent(RecordingAgent):
    """Builds its own pydantic-ai agent: only a run of it knows what it sends (no direct first step)."""

    def build_pydantic_agent(self) -> Any:
        return super().build_pydantic_agent()
