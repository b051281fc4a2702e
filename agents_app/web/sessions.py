"""The session and the signed-in user, read by a kept statement each instead of a queryset.

Every WebSocket connect and every HTTP request reads both (Channels' ``AuthMiddleware``, Django's
``AuthenticationMiddleware``). Building and compiling the two querysets cost several times what
running their statements does, and a burst of new sockets waits for them in turn on the one
database thread (docs/decisions.md#session-and-user-reads). What is read, and what a missing or
expired session or a missing or inactive user gives, are Django's own; writes stay Django's.
``SESSION_ENGINE = "agents_app.web.sessions"`` and ``agents_app.web.sessions.UserBackend`` in
``AUTHENTICATION_BACKENDS`` (the project's settings) use them.
"""

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.backends import db
from django.core.exceptions import ValidationError
from django.utils import timezone

from .. import statements


class SessionStore(db.SessionStore):
    """Django's database session store; ``load`` reads the row with ``statements.row_by_pk``."""

    def load(self) -> dict[str, Any]:
        """The session's data while it has not expired; else nothing, and no key (as Django's:
        a new one is made when the session is saved, never the one the client sent)."""
        if self.session_key is not None:
            columns = _columns(self.model, "session_data", "expire_date")
            select = statements.row_by_pk(columns)
            row = select.row(self.session_key)
            if row is not None:
                data, expire_date = columns.values(row, 0, select.connection)
                if expire_date > timezone.now():
                    return self.decode(data)
        self._session_key = None
        return {}


@functools.cache
def _columns(model: Any, *names: str) -> statements.Columns:
    return statements.Columns(model, "t", names)


class UserBackend(ModelBackend):
    """Django's ``ModelBackend``; ``get_user`` reads the user's row with ``statements.row_by_pk``
    (the user model's default manager is not asked: a custom one's filtering does not apply)."""

    def get_user(self, user_id: Any) -> Any:
        model = get_user_model()
        try:
            pk = model._meta.pk.to_python(user_id)
        except ValidationError:
            return None
        columns = _columns(model)
        select = statements.row_by_pk(columns)
        row = select.row(pk)
        user = columns.instance(row, 0, select.connection) if row is not None else None
        return user if user is not None and self.user_can_authenticate(user) else None
