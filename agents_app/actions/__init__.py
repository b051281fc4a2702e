"""Actions: declared, guarded side effects the model may call (docs/architecture.md#actions).

``action()`` declares one; an agent's ``get_actions()`` lists them. This package's pure parts
(``descriptor``, ``envelopes``, ``attachments``) touch no database and import no models, so an
agent module may import ``action`` before Django's app registry is ready.
"""

from .attachments import (
    MAX_REPLY_ATTACHMENTS_PER_TURN,
    NO_ATTACHMENTS,
    AttachmentAttempt,
    NullReplyAttachments,
    ReplyAttachments,
)
from .descriptor import (
    ACTION_KINDS,
    APPROVAL_RISKS,
    DEFAULT_ACTION_TIMEOUT_MS,
    Action,
    ActionKind,
    ApprovalRisk,
    action,
    approval_descriptor,
    call_maybe_async,
    compile_actions,
    evaluate_approval,
    is_action,
    resolve_idempotency_key,
    resolve_permissions,
)
from .envelopes import (
    ACTION_OUTPUT_MAX_CHARS,
    CIRCULAR,
    aborted_error,
    authorization_error,
    error_envelope,
    key_conflict_error,
    missing_permission_message,
    pending_error,
    prepare_output,
    to_json_safe,
    truncation_note,
)

__all__ = [
    "ACTION_KINDS",
    "ACTION_OUTPUT_MAX_CHARS",
    "APPROVAL_RISKS",
    "CIRCULAR",
    "DEFAULT_ACTION_TIMEOUT_MS",
    "MAX_REPLY_ATTACHMENTS_PER_TURN",
    "NO_ATTACHMENTS",
    "Action",
    "ActionKind",
    "ApprovalRisk",
    "AttachmentAttempt",
    "NullReplyAttachments",
    "ReplyAttachments",
    "aborted_error",
    "action",
    "approval_descriptor",
    "authorization_error",
    "call_maybe_async",
    "compile_actions",
    "error_envelope",
    "evaluate_approval",
    "is_action",
    "key_conflict_error",
    "missing_permission_message",
    "pending_error",
    "prepare_output",
    "resolve_idempotency_key",
    "resolve_permissions",
    "to_json_safe",
    "truncation_note",
]
