"""Exceptions of the agents app, in five families.

* ``AgentConfigurationError``: misuse by the developer, raised at definition or startup.
* ``ProtocolError`` (from ``protocol.parse``): bad client input; becomes an error frame.
* ``AgentAccessError``: the caller may not open this agent instance; becomes a close code / HTTP error.
* ``ConversationConflict``: a request the conversation's state refuses; becomes HTTP 409.
* ``ActionError``: an action call refused or cut short; becomes the model-visible error envelope.

``one_line`` writes any exception as one log line (the log stays one line per event under faults).
"""

from collections.abc import Sequence

from .protocol.parse import ProtocolError
from .protocol.types import CloseCode

__all__ = [
    "ABORTED_MESSAGE",
    "APPROVAL_INPUT_MESSAGE",
    "MISSING_PERMISSION_PREFIX",
    "NOT_AUTHORIZED_MESSAGE",
    "PENDING_MESSAGE",
    "ActionAbortedError",
    "ActionApprovalInputError",
    "ActionAuthorizationError",
    "ActionError",
    "ActionKeyConflict",
    "ActionPendingError",
    "ActionTimeoutError",
    "AgentAccessError",
    "AgentConfigurationError",
    "ConversationConflict",
    "NotAuthenticated",
    "PermissionDenied",
    "ProtocolError",
    "UnknownAgent",
    "UnknownInstance",
    "one_line",
]


class AgentConfigurationError(Exception):
    """The project's agent configuration is wrong (a bad ``AGENT_CLASSES`` entry, a bad model)."""


class AgentAccessError(Exception):
    """Base of the errors that refuse a connection or request to an agent instance."""

    close_code: CloseCode = CloseCode.FORBIDDEN
    http_status: int = 403


class UnknownAgent(AgentAccessError):
    """No registered agent class has this slug, or the instance name is not a valid one."""

    close_code = CloseCode.NOT_FOUND
    http_status = 400


class UnknownInstance(AgentAccessError):
    """The address names no existing conversation: reading one never makes it (``get-messages``),
    nor does a visit to another namespace (staff reading another user's); or a user the ``owner``
    parameter names does not exist."""

    close_code = CloseCode.NOT_FOUND
    http_status = 404


class NotAuthenticated(AgentAccessError):
    """Anonymous users may not open agent instances."""

    close_code = CloseCode.UNAUTHENTICATED
    http_status = 401


class PermissionDenied(AgentAccessError):
    """The address names another user's namespace and the caller is not staff."""

    close_code = CloseCode.FORBIDDEN
    http_status = 403


class ConversationConflict(Exception):
    """The conversation's state refuses the request: its name is taken, or a reply still runs."""


# --------------------------------------------------------------------------------------- actions
# The ActionError family (docs/architecture.md#error-envelopes). These are the signals of the action
# pipeline: each one ends an action call *without* crashing the turn, and becomes the
# model-visible envelope ``{"error": {"name": <name>, "message": str(exc)}}`` built by
# ``agents_app.actions.envelopes.error_envelope``. ``name`` is the reference's error name, which is
# part of what the model reads, so it is spelled exactly as on Cloudflare (and is not always the
# class name: the reference times out and aborts with a plain ``Error``).
#
# The exact messages live here, on the exceptions that carry them, so the envelope builders, the
# ledger and the pipeline share one spelling.

# Default reason of an authorization denial that gives none (``authorize_turn`` answered False).
NOT_AUTHORIZED_MESSAGE = "Action is not authorized"
# Prefix of the default authorizeAction reason, followed by the missing permissions, ", "-joined.
MISSING_PERMISSION_PREFIX = "Missing required permission: "
PENDING_MESSAGE = (
    "A prior attempt of this action is in an unknown state; not re-executed. "
    "Manual reconciliation may be required."
)
# Raised (not an envelope of its own: it becomes a plain "Error") when an idempotency-key
# function returns ""; format with the action's name.
EMPTY_KEY_MESSAGE = 'Action "{name}" returned an empty idempotency key'
APPROVAL_INPUT_MESSAGE = "Approved action input cannot be changed by beforeToolCall"
# The message of an abort (turn cancelled) whose reason is not itself an exception.
ABORTED_MESSAGE = "Action aborted"


class ActionError(Exception):
    """Base of the errors that end an action call with a model-visible envelope.

    Raised by the pipeline, never by user code: an ``execute`` that raises anything else gets the
    generic envelope too, named after its class. Never a control-flow signal to catch and ignore:
    the model must see it, so the conversation can explain what happened.
    """

    # The envelope's ``error.name``.
    name: str = "ActionError"


class ActionAuthorizationError(ActionError):
    """``authorize_action`` denied the call; ``execute`` never ran and no ledger row was written.

    ``permissions`` are the permissions the call required (resolved from the action's
    ``permissions``), repeated in the envelope so the model can tell the user what is missing.
    """

    name = "ActionAuthorizationError"

    def __init__(self, reason: str | None = None, *, permissions: Sequence[str] = ()) -> None:
        super().__init__(reason or NOT_AUTHORIZED_MESSAGE)
        self.permissions: tuple[str, ...] = tuple(permissions)

    @staticmethod
    def missing_message(missing: Sequence[str]) -> str:
        """The default ``authorize_action`` reason: ``Missing required permission: a, b``."""
        return MISSING_PERMISSION_PREFIX + ", ".join(missing)


class ActionPendingError(ActionError):
    """A ``pending`` ledger row holds the key: a prior attempt may or may not have run.

    Re-running could repeat a side effect, so the call is refused until the row is reclaimed
    (explicit keys, after the lease) or reconciled by hand.
    """

    name = "ActionPendingError"

    def __init__(self) -> None:
        super().__init__(PENDING_MESSAGE)


class ActionKeyConflict(ActionError):
    """The idempotency key was used before by another action or with other input.

    A programming error in the action's ``idempotency_key``: retrying cannot help. (Named without
    the ``Error`` suffix because that is the reference's name, which the model reads.)
    """

    name = "ActionKeyConflict"

    def __init__(self, ledger_key: str, action_name: str) -> None:
        super().__init__(
            f'Idempotency key "{ledger_key}" for action "{action_name}" was reused with different input. '
            "This is a programming error; do not retry."
        )
        # The full ledger key (``action:echo:k``), as the message quotes it.
        self.ledger_key = ledger_key
        self.action_name = action_name


class ActionApprovalInputError(ActionError):
    """The user approved one input, but ``before_tool_call`` rewrote it: ``execute`` does not run.

    Otherwise an approval could be laundered into a call the user never saw.
    """

    name = "ActionApprovalInputError"

    def __init__(self) -> None:
        super().__init__(APPROVAL_INPUT_MESSAGE)


class ActionTimeoutError(ActionError):
    """``execute`` did not finish within the action's ``timeout_ms``.

    Named ``"Error"`` in the envelope, as the reference's timer aborts with a plain ``Error``.
    """

    name = "Error"

    def __init__(self, timeout_ms: float) -> None:
        # 5 and 5.0 both print as "5ms", as JavaScript prints the number 5.
        shown = int(timeout_ms) if float(timeout_ms).is_integer() else timeout_ms
        super().__init__(f"Action timed out after {shown}ms")
        self.timeout_ms = timeout_ms


class ActionAbortedError(ActionError):
    """The turn was cancelled while the action ran, for no reason that is itself an exception.

    Named ``"Error"`` in the envelope, as in the reference (``Error("Action aborted")``).
    """

    name = "Error"

    def __init__(self, message: str = ABORTED_MESSAGE) -> None:
        super().__init__(message)


def one_line(error: BaseException) -> str:
    """``error`` as one log line: its type and message, without a traceback."""
    return " ".join(f"{type(error).__name__}: {error}".split())
