"""The stored transcript as pydantic-ai's ``UIMessage`` model reads it, and what it cannot read.

pydantic-ai validates UI messages with ``extra="forbid"``, but the AI SDK lets clients and
providers add fields to messages and parts, and Cloudflare stores some of its own (``toolName`` on
tool parts, our approval descriptors). Such fields stay in the transcript (clients get back what
they sent); ``for_model`` projects each message and part onto the fields its pydantic-ai model
declares, so one extra key never fails a turn, nor, since ``useAgentChat`` re-sends the whole
history, every later turn of the conversation.

What still fails validation (a text part whose text is no string) is refused at the door
(``check``, with a one-line reason) rather than stored, for the same reason.
"""

import asyncio
import contextlib
import functools
import json
import threading
import time
import typing
from collections import OrderedDict
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
    repair_messages,
)
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai import request_types as ui

from ..protocol import codec
from . import files

UIMessageData = dict[str, Any]

_MESSAGE = TypeAdapter(ui.UIMessage)


def _members(union: Any) -> list[type[BaseModel]]:
    """The model classes of a (nested) union of part models."""
    members: list[type[BaseModel]] = []
    for arg in typing.get_args(union) or (union,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            members.append(arg)
        else:
            members.extend(_members(arg))
    return members


def _keys(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in model.model_fields.items())


def _literal(model: type[BaseModel], name: str) -> str | None:
    field = model.model_fields.get(name)
    return field.default if field is not None and isinstance(field.default, str) else None


# (type or type prefix, state) → the part model of that kind and state (tool parts differ by state).
_PART_MODELS: dict[tuple[str, str | None], type[BaseModel]] = {}
for _model in _members(ui.UIMessagePart):
    _kind = _literal(_model, "type") or ("data-" if _model is ui.DataUIPart else "tool-")
    _PART_MODELS[(_kind, _literal(_model, "state") if _kind in ("tool-", "dynamic-tool") else None)] = _model
_MESSAGE_KEYS = _keys(ui.UIMessage)
_APPROVAL_KEYS = _keys(ui.ToolApprovalRequested) | _keys(ui.ToolApprovalResponded)


def _part_model(part: dict[str, Any]) -> type[BaseModel] | None:
    kind = str(part.get("type", ""))
    family = "tool-" if kind.startswith("tool-") else "data-" if kind.startswith("data-") else kind
    return _PART_MODELS.get((family, part.get("state") if family in ("tool-", "dynamic-tool") else None))


def _project_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    model = _part_model(part)
    if model is None:
        return part  # a kind pydantic-ai does not know: validation says so
    keys = _keys(model)
    projected = {key: value for key, value in part.items() if key in keys}
    if isinstance(projected.get("approval"), dict):
        projected["approval"] = {k: v for k, v in projected["approval"].items() if k in _APPROVAL_KEYS}
    return projected


def _project_message(message: UIMessageData) -> UIMessageData:
    """The message with only the fields pydantic-ai's models declare (module docstring)."""
    return {**{k: v for k, v in message.items() if k in _MESSAGE_KEYS},
            "parts": [_project_part(part) for part in message.get("parts", [])]}


# Validated messages kept per process, by their JSON text. ``useAgentChat`` re-sends the whole
# transcript with every request and each turn gives it to the model again, so without this every
# message was validated twice per turn for the rest of its conversation (about 30 µs each time,
# against about 3 µs to write its JSON). A message's JSON is all its validation depends on (a
# float that is not a number is validated as the ``null`` the codec writes for it).
VALIDATED_CACHE_SIZE: Final = 8192
# Longer messages are validated every time: their JSON would be a large key to keep.
VALIDATED_CACHE_MAX_CHARS: Final = 16_384


def _validate(message: UIMessageData) -> ui.UIMessage:
    """``UIMessage`` validation of the projected message, each part against its own kind's model.

    pydantic validates a part against the union of every part model, trying each member (in the
    smart union's strict pass, then its lax one): 26 µs for a one-text user message, 54 for a
    two-part reply, against 4 and 17 with the parts validated first and handed over as instances
    (bench/README.md, "Twenty-third round"). A part's type and state name the one member that can
    accept it (``_part_model``), so the result is the same; anything else (an unknown kind, a part
    its model refuses) goes through the union as before, for the union's verdict and errors."""
    projected = _project_message(message)
    parts = projected["parts"]
    models = [model for part in parts if isinstance(part, dict) and (model := _part_model(part)) is not None]
    if len(models) == len(parts):
        with contextlib.suppress(ValidationError):  # a part its model refuses: the union's verdict, below
            projected["parts"] = [model.model_validate(part) for model, part in zip(models, parts, strict=True)]
    return _MESSAGE.validate_python(projected)


@functools.lru_cache(maxsize=VALIDATED_CACHE_SIZE)
def _validated_json(text: str) -> ui.UIMessage:
    return _validate(json.loads(text))


def _validated(message: UIMessageData) -> tuple[ui.UIMessage, bool]:
    """The message validated, and whether it came from (or went into) the cache."""
    try:
        text = codec.dumps(message)
    except (TypeError, ValueError):  # not JSON (a programmatic message): validated as it is
        text = None
    if text is None or len(text) > VALIDATED_CACHE_MAX_CHARS:
        return _validate(message), False
    return _validated_json(text), True


def for_model(messages: list[UIMessageData]) -> list[ui.UIMessage]:
    """The transcript as pydantic-ai's UI messages.

    Raises:
        UnreadableMessage: a message the model cannot read even without unknown fields.
    """
    return [validated for validated, _ in _validate_each(messages)]


def _validate_each(messages: list[UIMessageData]) -> list[tuple[ui.UIMessage, bool]]:
    """``_validated`` of each message (``for_model``)."""
    # One message per call: validating a long list in one call would hold the GIL in pydantic-core
    # for tens of milliseconds, stalling the event loop even when this runs on another thread.
    validated = []
    for index, message in enumerate(messages):
        try:
            validated.append(_validated(message))
        except ValidationError as exc:
            raise UnreadableMessage(_reason(exc, messages, index)) from None
        if index % SLICE_MESSAGES == SLICE_MESSAGES - 1:
            _let_the_loop_run()
    return validated


def _let_the_loop_run() -> None:
    """On a worker thread, a pause that lets the event loop's thread take the GIL. On the loop's
    own thread (a short transcript, ``model_history``), none: the loop would hand the GIL to the
    database thread and wait to get it back, in the middle of a turn's start. (A unit of database
    work on the loop's thread hides the loop, ``database._as_the_threads``: none converts history.)"""
    if asyncio._get_running_loop() is None:
        time.sleep(0)


# Transcripts at least this long are converted on a worker thread, off the event loop that serves
# every connection of the process (5,000 messages take about 0.3 s to validate and convert).
OFF_LOOP_MESSAGES = 200


# Messages validated between two pauses of a worker thread (see ``for_model``).
SLICE_MESSAGES = 100


def _history(messages: list[UIMessageData], repair_last_response: bool) -> list[ModelMessage]:
    """Validate and convert, pausing in between: a thread that converts thousands of messages in
    one go holds the GIL long enough to stall the event loop's other connections."""
    return _repaired(_converted(_validate_each(messages)), repair_last_response)


# Parts that pydantic-ai's repair pairs, drops or synthesizes (calls and their results).
_PAIRED_PARTS: Final = (ToolCallPart, ToolReturnPart, RetryPromptPart)


def _repaired(history: list[ModelMessage], repair_last_response: bool) -> list[ModelMessage]:
    """``repair_messages`` of the history, which is the history itself when it holds no tool call
    or result and its requests and responses alternate: its passes then drop, add and merge nothing.
    That is every text-only conversation, where the repair's walks were about a third of the
    history's work (bench/README.md, "Twenty-eighth round"); ``tests/unit/test_history_conversion.py``
    compares the two."""
    previous_was_request = None
    for message in history:
        is_request = isinstance(message, ModelRequest)
        if is_request is previous_was_request:
            return repair_messages(history, repair_last_response=repair_last_response)
        for part in message.parts:
            if isinstance(part, _PAIRED_PARTS):
                return repair_messages(history, repair_last_response=repair_last_response)
        previous_was_request = is_request
    return history


# Conversions of exchanges (a user message and the replies after it) kept per process, by the
# identity of their validated messages: ``_validated_json`` hands out the same object for the same
# JSON while it keeps it, and an entry keeps its messages alive, so an identity seen again is the
# same message. ``useAgentChat`` re-sends the whole transcript with every request and each turn
# gives it to the model again: without this, each turn converted every earlier exchange again
# (about 40 µs a message, most of a long conversation's turn).
CONVERTED_CACHE_SIZE: Final = 4096
_converted_exchanges: OrderedDict[tuple[int, ...], tuple[list[ui.UIMessage], list[ModelMessage]]] = OrderedDict()
_converted_lock = threading.Lock()


def _converted(validated: list[tuple[ui.UIMessage, bool]]) -> list[ModelMessage]:
    """``VercelAIAdapter.load_messages`` of the validated messages, exchange by exchange, earlier
    exchanges from the cache (those of messages ``_validated`` kept, whose identity says what they are).

    Converting the whole list equals joining the conversions of its exchanges where each joint
    opens a new model message: the exchange before it ends with a model response and the one after
    it starts with a request (its user prompt). Elsewhere pydantic-ai's builder merges the two (a
    tool's return and the next prompt go in one request), so exchanges that do not join that way
    are converted together, as one run. A run's conversion starts and ends with the kinds of its
    first and last exchange's own, so the joints between runs are those of their exchanges.
    """
    exchanges = _exchanges(validated)
    # The last exchange is the new request: the run fills in its fields, so it is not kept.
    converted = [_exchange([message for message, _ in exchange]) if all(kept for _, kept in exchange)
                 else _load(exchange) for exchange in exchanges[:-1]]
    converted += [_load(exchanges[-1])] if exchanges else []
    history: list[ModelMessage] = []
    start = 0
    for end in range(1, len(exchanges) + 1):
        if end < len(exchanges) and not _joins(converted[end - 1], converted[end]):
            continue
        run = exchanges[start:end]
        history += converted[start] if len(run) == 1 else _load([pair for exchange in run for pair in exchange])
        start = end
    return history


def _exchanges(validated: list[tuple[ui.UIMessage, bool]]) -> list[list[tuple[ui.UIMessage, bool]]]:
    """The messages cut before each user message (a leading run of others is an exchange too)."""
    exchanges: list[list[tuple[ui.UIMessage, bool]]] = []
    for pair in validated:
        if pair[0].role == "user" or not exchanges:
            exchanges.append([pair])
        else:
            exchanges[-1].append(pair)
    return exchanges


def _load(validated: list[tuple[ui.UIMessage, bool]]) -> list[ModelMessage]:
    return VercelAIAdapter.load_messages([message for message, _ in validated])


def _joins(before: list[ModelMessage], after: list[ModelMessage]) -> bool:
    return bool(before) and bool(after) and isinstance(before[-1], ModelResponse) and isinstance(after[0], ModelRequest)


def _exchange(exchange: list[ui.UIMessage]) -> list[ModelMessage]:
    """One exchange converted, from the cache if it was before; copies of the kept messages, since a
    run sets fields on the messages of its history (pydantic-ai replaces parts lists, never edits them)."""
    key = tuple(map(id, exchange))
    with _converted_lock:
        entry = _converted_exchanges.get(key)
        if entry is not None:
            _converted_exchanges.move_to_end(key)
    if entry is None:
        entry = (exchange, VercelAIAdapter.load_messages(exchange))
        _let_the_loop_run()  # between exchanges
        with _converted_lock:
            _converted_exchanges[key] = entry
            if len(_converted_exchanges) > CONVERTED_CACHE_SIZE:
                _converted_exchanges.popitem(last=False)
    return [_copied(message) for message in entry[1]]


def _copied(message: ModelMessage) -> ModelMessage:
    """``copy.copy`` of a model message, a plain dataclass instance (no slots, no copy hooks:
    ``tests/unit/test_history_conversion.py`` checks): a new object with the same attributes, in a
    quarter of the time (about 0.5 against 1.8 µs, for every earlier message of every turn)."""
    clone = object.__new__(type(message))
    clone.__dict__.update(message.__dict__)
    return clone


async def model_history(messages: list[UIMessageData], *, repair_last_response: bool) -> list[ModelMessage]:
    """The transcript as pydantic-ai model messages (validated, converted, unanswered calls repaired).

    A long transcript is converted on a worker thread. Raises ``UnreadableMessage`` as ``for_model``.
    """
    if len(messages) < OFF_LOOP_MESSAGES:
        return _history(messages, repair_last_response)
    return await asyncio.to_thread(_history, messages, repair_last_response)


def check(messages: list[UIMessageData]) -> None:
    """Raise ``UnreadableMessage`` for a message ``for_model`` would refuse, or with an inline file
    above ``AGENT_MAX_FILE_BYTES`` (``llm.files``), before it is stored."""
    if (reason := files.oversized(messages)) is not None:
        raise UnreadableMessage(reason)
    for_model(messages)


class UnreadableMessage(ValueError):
    """A message no turn could send to the model; its text is one line for people, not a pydantic dump."""


def _reason(exc: ValidationError, messages: list[UIMessageData], index: int) -> str:
    """One line: which message and part, and the first problem of the part model it is meant to be.

    A part is validated against a union of every part model, so pydantic reports each member's
    complaint (the "98 validation errors" dump); the one that matters is its own kind's.
    """
    location = list(exc.errors(include_url=False)[0]["loc"])
    message = messages[index]
    where = f"message {message.get('id')!r}"
    if len(location) > 1 and location[0] == "parts" and isinstance(location[1], int):
        part = _project_message(message)["parts"][location[1]]
        model = _part_model(part) if isinstance(part, dict) else None
        if model is None:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            return f"The model cannot read {where}, part {location[1]}: unknown part type {kind!r}"
        try:
            model.model_validate(part)
        except ValidationError as own:
            first = own.errors(include_url=False)[0]
            field = ".".join(str(item) for item in first["loc"])
            return f"The model cannot read {where}, part {location[1]} ({part.get('type')}): {field}: {first['msg']}"
    return f"The model cannot read {where}: {exc.errors(include_url=False)[0]['msg']}"
