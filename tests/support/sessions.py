"""A logged-in session without the login form, for in-process WebSocket clients (tests, bench)."""

from typing import Any


def session_key(user: Any) -> str:
    """Store a session of ``user`` authenticated by the settings' first backend; its key (the cookie value)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return session.session_key or ""
