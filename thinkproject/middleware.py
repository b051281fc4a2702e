"""Middleware of the project."""

from collections.abc import Callable

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
