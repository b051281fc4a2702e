"""Middleware of the project: Django's (HTTP) and Channels' (WebSockets)."""

from collections.abc import Callable
from typing import Any

from channels.auth import AuthMiddleware, UserLazyObject, get_user
from channels.sessions import CookieMiddleware, InstanceSessionWrapper, SessionMiddleware
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse

NUL = "\x00"


class RejectNulCharacters:
    """Answer 400 to a URL (path or query) with a NUL character, before any view sees it.

    No address or parameter here has a use for one, and PostgreSQL can neither store nor compare
    it: a lookup by such a value (an instance name, ``?owner=``, an admin search) would fail in the
    database, as a 500. Form and API fields refuse it already (``ProhibitNullCharactersValidator``).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.GET.lists()
        if NUL in request.path or any(NUL in key or any(NUL in value for value in values) for key, values in query):
            raise BadRequest("A NUL character in the URL")
        return self.get_response(request)


class WebSocketSessionMiddleware(SessionMiddleware):
    """Channels' ``SessionMiddleware`` without its wrapper around every message the consumer sends.

    The wrapper saves a changed session, and sets its cookie, on ``http.response.start`` only,
    which a WebSocket never sends; it still looked at the session on every frame, about 4 % of a
    server's CPU while 50 rooms stream (bench/README.md, "Third round"). The session is resolved
    from the cookie as before, and ``scope["session"]`` is the same object.
    """

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


class _UserOnFirstUse(UserLazyObject):
    """``scope["user"]``, read from the session the first time it is used, from sync code.

    Channels' ``AuthMiddleware`` reads it before the consumer starts, in a thread hop of its own;
    here it is read in the hop where the consumer first needs it (``ChatConsumer.connect``'s
    ``registry.locate``), one hop instead of two on every connect (docs/decisions.md#websocket-session-middleware).
    Used on the event loop first, the read fails as any ORM call there does (``SynchronousOnlyOperation``).
    """

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.__dict__["_session"] = session  # LazyObject's __setattr__ would set it on the user

    def _setup(self) -> None:
        self._wrapped = get_user.func({"session": self.__dict__["_session"]})


class UserOnFirstUseMiddleware(AuthMiddleware):
    """Channels' ``AuthMiddleware`` with ``scope["user"]`` resolved on first use (``_UserOnFirstUse``)."""

    def populate_scope(self, scope: dict[str, Any]) -> None:
        if "session" not in scope:
            raise ValueError("No session in the scope: SessionMiddleware must be above UserOnFirstUseMiddleware")
        if "user" not in scope:
            scope["user"] = _UserOnFirstUse(scope["session"])

    async def resolve_scope(self, scope: dict[str, Any]) -> None:
        """Nothing before the consumer: the user is read on first use."""


def websocket_auth_stack(inner: Any) -> Any:
    """``channels.auth.AuthMiddlewareStack`` with ``WebSocketSessionMiddleware`` and the user read on
    first use (``UserOnFirstUseMiddleware``): cookies, the session, ``scope["user"]``."""
    return CookieMiddleware(WebSocketSessionMiddleware(UserOnFirstUseMiddleware(inner)))
