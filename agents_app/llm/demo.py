"""The offline demo model: deterministic, no key, no network.

A pydantic-ai ``FunctionModel`` whose reply is a pure function of the message history, so it
exercises the real streaming, tool and approval paths. Its prompt grammar (``/tool``, ``/slow``,
``/burst``, ``/fail``, naming a tool, else an echo) is in README.md, "The demo model". A system
note (``<system>…</system>``) is acknowledged as ``(demo model, offline) Noted: …``, never acted
on, unless it names earlier tool calls (a staff decision after later messages): then it says what
came of those calls. After tool results it summarises them (a parked call as ``Asked staff to
approve NAME.``). Asked to go on with nothing new from the user, it sends the rest of a text reply
cut short (crash recovery), else says in words what the latest results are as they read now (a
continuation after a later decision: ``Deployed 1.0.0 to production.``, ``Staff rejected NAME:
REASON.``), else says it goes on (``continue_last_turn``).
"""

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage

MODEL_NAME = "demo-offline"
ECHO_PREFIX = "(demo model, offline) You said: "
_TOOL = re.compile(r"^/tool\s+([\w\-]+)\s*(\{.*\})?\s*$", re.S)
_SLOW = re.compile(r"^/slow\s+(\d+)(?:\s+(\d+))?\s*$")
_BURST = re.compile(r"^/burst\s+(\d+)\s*$")
# How pydantic-ai hands over a system message that is not the first one.
_SYSTEM_NOTE = re.compile(r"^<system>(.*)</system>$", re.S)
NOTED_PREFIX = "(demo model, offline) Noted: "
# Asked to go on after a plain reply, with nothing new from the user.
GOING_ON = "(demo model, offline) Going on from where I stopped."
_SCHEMA_DEFAULTS = {"string": "demo", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
# Upper bound on generated words, so a typo cannot stream forever.
MAX_WORDS = 100_000


class DemoModelError(RuntimeError):
    """The in-band failure that ``/fail`` asks for."""


def numbered_word(i: int) -> str:
    """Word i of /slow and /burst: distinct and checkable, like the reference peer's deltas."""
    return f"w{i} "


def _synth_args(schema: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The arguments the prompt gives (``NAME VALUE``), and the required ones it does not, made up."""
    props = schema.get("properties", {})
    args = {
        key: props[key].get("default", _SCHEMA_DEFAULTS.get(props[key].get("type", "string"), "demo"))
        for key in schema.get("required", [])
    }
    for key, prop in props.items():
        raw = _given(prompt, key)
        if raw is not None:
            args[key] = _typed(raw, prop.get("type", "string"), args.get(key))
    return args


def _given(prompt: str, key: str) -> str | None:
    """What the prompt gives parameter ``key``: ``key VALUE``, ``key: VALUE`` or ``key=VALUE``, where
    VALUE is a quoted string or a word (without a trailing comma or semicolon)."""
    found = re.search(rf"(?<![\w-]){re.escape(key)}(?:\s*[:=]\s*|\s+)(?:\"([^\"]*)\"|'([^']*)'|(\S+))", prompt)
    if found is None:
        return None
    double, single, word = found.groups()
    if word is not None:
        return word.rstrip(",;")
    return double if double is not None else single


def _typed(raw: str, json_type: str, fallback: Any) -> Any:
    """``raw`` as a value of the JSON schema type; ``fallback`` when it is not one (or not a scalar)."""
    if json_type in ("array", "object"):
        return fallback
    try:
        if json_type == "integer":
            return int(raw)
        if json_type == "number":
            return float(raw)
    except ValueError:
        return fallback
    if json_type == "boolean":
        return raw.lower() in ("true", "yes", "1")
    return raw


def _is_paused(content: Any) -> bool:
    """A call parked until someone decides: its result is the envelope for the model, not news."""
    return isinstance(content, dict) and content.get("status") == "paused"


def _summarise(parts: list[Any], *, in_words: bool = False) -> str:
    """What the results in ``parts`` were; ``in_words``: as sentences (``_in_words``), for results
    that came in later (a staff decision) rather than as the raw output the model got."""
    lines = []
    for part in parts:
        if isinstance(part, ToolReturnPart):
            if in_words and part.outcome not in ("retried", "failed", "denied"):
                lines.append(_sentence(_in_words(part.tool_name, part.content)))
            elif part.outcome in ("retried", "failed"):
                content = part.content
                reason = content["error"] if isinstance(content, dict) and "error" in content else content
                lines.append(f"{part.tool_name} failed: {reason}")
            elif part.outcome == "denied":
                lines.append(f"The call to {part.tool_name} was denied: {part.model_response_str()}")
            elif _is_paused(part.content):
                lines.append(f"Asked staff to approve {part.tool_name}")
            else:
                lines.append(f"{part.tool_name} returned {part.model_response_str()}")
        elif isinstance(part, RetryPromptPart) and part.tool_name:
            lines.append(f"{part.tool_name} failed: {part.model_response()}")
    return _sentence(" ".join(lines))


def _in_words(name: str, content: Any) -> str:
    """A later result as a sentence: a rejection by staff, a failure, or what the call returned
    (its text as it is; an object as its fields; anything else as compact JSON)."""
    if isinstance(content, dict):
        if _is_paused(content):
            return f"Asked staff to approve {name}"
        if content.get("status") == "rejected":
            return f"Staff rejected {name}: {_plain(content.get('reason')) or 'no reason given'}"
        if content.get("status") == "error" and "error" in content:
            return f"{name} failed: {_plain(content['error'])}"
        fields = ", ".join(f"{str(key).replace('_', ' ')} {_plain(value)}" for key, value in content.items())
        return f"{name} returned {fields}" if fields else f"{name} returned nothing"
    if isinstance(content, list) and content:
        return f"{name} returned {', '.join(_plain(item) for item in content)}"
    if content is None or content == [] or (isinstance(content, str) and not content.strip()):
        return f"{name} returned nothing"
    return content.strip() if isinstance(content, str) else f"{name} returned {_plain(content)}"


def _plain(value: Any) -> str:
    """A value as words: text as it is, anything else as compact JSON."""
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _sentence(text: str) -> str:
    """``text`` ending in one full stop (a result streamed word by word ends in a space)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _results_named_in(messages: list[ModelMessage], text: str) -> list[ToolReturnPart]:
    """The tool results in the history whose call id ``text`` names (a note about a decided call)."""
    return [
        part for message in messages if isinstance(message, ModelRequest) for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_call_id
        and re.search(rf"(?<![\w-]){re.escape(part.tool_call_id)}(?![\w-])", text)
    ]


class Plan:
    """What the next response is: text words, tool calls, a delay, and whether it fails."""

    def __init__(self, *, words: list[str] | None = None, calls: list[tuple[str, str, str]] | None = None,
                 delay: float = 0.0, fail: bool = False) -> None:
        self.words = words or []
        self.calls = calls or []
        self.delay = delay
        self.fail = fail


def plan(messages: list[ModelMessage], info: AgentInfo, default_delay: float) -> Plan:
    """The response to the history: deterministic in the messages and the tool schemas."""
    last = messages[-1]
    parts = list(last.parts) if isinstance(last, ModelRequest) else []
    if not parts:
        # Nothing new from the user. A reply cut mid-text (crash recovery) goes on with the words
        # it had not sent; a continuation after a tool result changed (an approval decided
        # later) summarises the latest results again, as they read now; with none, it just
        # goes on (continue_last_turn after a plain reply).
        if (rest := _rest_of_cut_reply(messages, info, default_delay)) is not None:
            return rest
        parts = next((list(m.parts) for m in reversed(messages) if isinstance(m, ModelRequest) and any(
            isinstance(p, ToolReturnPart | RetryPromptPart) for p in m.parts)), [])
        if not parts:
            return Plan(words=re.findall(r"\S+\s*", GOING_ON), delay=default_delay)
        return Plan(words=re.findall(r"\S+\s*", _summarise(parts, in_words=True)), delay=default_delay)
    if any(isinstance(p, ToolReturnPart | RetryPromptPart) for p in parts):
        return Plan(words=re.findall(r"\S+\s*", _summarise(parts)), delay=default_delay)
    prompt = " ".join(
        # A file the user attached (an image, a PDF) is not text the demo can echo: only the text is.
        p.content if isinstance(p.content, str) else " ".join(c for c in p.content if isinstance(c, str))
        for p in parts
        if isinstance(p, UserPromptPart)
    ).strip()
    if note := _SYSTEM_NOTE.match(prompt):
        # A system note later in the conversation reaches the model as a wrapped user prompt. One
        # that names earlier calls (a staff decision after later messages) is answered with what
        # came of them; any other (an outcome whose tool call is gone) is acknowledged, never
        # acted on.
        if named := _results_named_in(messages[:-1], note.group(1)):
            return Plan(words=re.findall(r"\S+\s*", _summarise(named, in_words=True)), delay=default_delay)
        return Plan(words=re.findall(r"\S+\s*", NOTED_PREFIX + note.group(1).strip()), delay=default_delay)
    tools = {t.name: t for t in info.function_tools}
    # Call ids are unique within a conversation: the number of responses so far, then the index.
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if m := _TOOL.match(prompt):
        name, raw = m.group(1), m.group(2) or "{}"
        if name in tools:
            return Plan(calls=[(name, raw, f"demo_{turn}_0")])
        available = ", ".join(sorted(tools)) or "none"
        return Plan(words=re.findall(r"\S+\s*", f"Unknown tool {name!r}. Available: {available}."))
    if m := _SLOW.match(prompt):
        count = min(int(m.group(1)), MAX_WORDS)
        delay = int(m.group(2)) / 1000 if m.group(2) else 0.05
        return Plan(words=[numbered_word(i) for i in range(count)], delay=delay)
    if m := _BURST.match(prompt):
        return Plan(words=[numbered_word(i) for i in range(min(int(m.group(1)), MAX_WORDS))])
    if prompt == "/fail":
        return Plan(words=["This ", "reply ", "will ", "fail "], delay=default_delay, fail=True)
    words = set(re.findall(r"[a-z0-9]+", prompt.lower()))
    for name, tool in tools.items():
        lowered = name.lower()
        if lowered in prompt.lower() or any(
            len(token) >= 4 and token in words for token in re.split(r"[_\-]", lowered)
        ):
            args = json.dumps(_synth_args(tool.parameters_json_schema, prompt))
            return Plan(calls=[(name, args, f"demo_{turn}_0")])
    return Plan(words=re.findall(r"\S+\s*", ECHO_PREFIX + (prompt or "nothing")), delay=default_delay)


def _rest_of_cut_reply(messages: list[ModelMessage], info: AgentInfo, default_delay: float) -> Plan | None:
    """What a text reply cut short (its text a prefix of the whole) had left to say, or None."""
    if len(messages) < 3 or not isinstance(messages[-2], ModelResponse):
        return None
    cut = messages[-2].parts
    if not cut or not all(isinstance(p, TextPart) for p in cut):
        return None
    sent = "".join(p.content for p in cut if isinstance(p, TextPart))
    whole = plan(messages[:-2], info, default_delay)
    full = "".join(whole.words)
    if whole.calls or whole.fail or not full.startswith(sent) or len(full) == len(sent):
        return None
    return Plan(words=re.findall(r"\S+\s*|\s+", full[len(sent):]), delay=whole.delay)


# The input tokens a request counts, as FunctionModel guesses them (its "overhead of every call").
_INPUT_TOKENS = 50


class DemoModel(FunctionModel):
    """The demo's ``FunctionModel``, streaming through a ``StreamedResponse`` of its own.

    ``FunctionModel`` is pydantic-ai's testing model: it reads the stream function through a
    peekable stream that takes an anyio lock per item, and sums the usage item by item. On a
    200-word reply that was half of what pydantic-ai spent per streamed event, more than the
    rest of the chunk's way to the socket (bench/README.md, "Third round"). ``DemoStream`` does
    what pydantic-ai asks of a model's stream (``StreamedResponse._get_event_iterator``, events
    from its parts manager) and counts the words once. Requests that do not stream, and the
    ``function``/``stream_function`` others wrap (``tests/agents.py``), are ``FunctionModel``'s.
    """

    @asynccontextmanager
    async def request_stream(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters, run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        info = AgentInfo(
            function_tools=model_request_parameters.declared_function_tools,
            allow_text_output=model_request_parameters.allow_text_output,
            output_tools=model_request_parameters.output_tools,
            model_settings=model_settings, model_request_parameters=model_request_parameters, instructions=None,
        )
        assert self.stream_function is not None
        items = self.stream_function(messages, info)
        try:
            yield DemoStream(model_request_parameters=model_request_parameters, _model_name=self.model_name,
                             _items=items)
        finally:
            await items.aclose()  # type: ignore[attr-defined]


@dataclass
class DemoStream(StreamedResponse):
    """The events of the demo model's stream function: words as text deltas, calls as tool-call deltas."""

    _model_name: str = ""
    _items: AsyncIterator[str | dict[int, DeltaToolCall]] | None = None
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        assert self._items is not None
        words = 0
        try:
            async for item in self._items:
                if isinstance(item, str):
                    words += len(item.split())
                    for event in self._parts_manager.handle_text_delta(vendor_part_id="content", content=item):
                        yield event
                    continue
                for index, delta in item.items():
                    if delta.json_args:
                        words += len(delta.json_args.split())
                    for event in self._parts_manager.handle_tool_call_delta_events(
                        vendor_part_id=index, tool_name=delta.name, args=delta.json_args,
                        tool_call_id=delta.tool_call_id,
                    ):
                        yield event
        finally:
            self._usage = RequestUsage(input_tokens=_INPUT_TOKENS, output_tokens=words)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider_name(self) -> None:
        return None

    @property
    def provider_url(self) -> None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._timestamp


def build_demo_model(delay: float = 0.0) -> FunctionModel:
    """The demo model; ``delay`` (seconds between words) makes streaming visible in a browser."""

    def request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        p = plan(messages, info, 0.0)
        if p.fail:
            raise DemoModelError("The demo model failed on purpose (/fail).")
        if p.calls:
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=c) for n, a, c in p.calls])
        return ModelResponse(parts=[TextPart("".join(p.words))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        p = plan(messages, info, delay)
        for index, (name, args, call_id) in enumerate(p.calls):
            yield {index: DeltaToolCall(name=name, tool_call_id=call_id)}
            for piece in re.findall(r".{1,8}", args, re.S):
                yield {index: DeltaToolCall(json_args=piece)}
        for word in p.words:
            if p.delay:
                await asyncio.sleep(p.delay)
            yield word
        if p.fail:
            raise DemoModelError("The demo model failed on purpose (/fail).")

    return DemoModel(request, stream_function=stream, model_name=MODEL_NAME)
