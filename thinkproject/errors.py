"""Error responses: pages in the site's style for people, JSON for API clients.

Django calls these for the errors no view answered itself (``handler400`` … ``handler500`` in
``urls.py``): an unknown URL, a refused request, a crash. DRF's views answer their own errors in
JSON already; these make an unknown URL under ``/api/`` (or ``/agents/``, where get-messages lives)
answer in JSON too, as ``{"detail": "..."}`` like DRF, and every other page an HTML page.
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import Resolver404

# Paths whose clients read JSON: the REST API, and get-messages under the WebSocket addresses.
JSON_PATHS = ("/api/", "/agents/")


def wants_json(request: HttpRequest) -> bool:
    """An API client: a JSON path, or an ``Accept`` header asking for JSON and not for HTML."""
    accept = request.headers.get("Accept", "")
    return request.path.startswith(JSON_PATHS) or ("application/json" in accept and "text/html" not in accept)


def explanation(exception: Exception | None) -> str | None:
    """The message an ``Http404`` or ``PermissionDenied`` was raised with, if it has one for people.

    An unmatched URL (``Resolver404``) carries the resolver's internals instead: no message then.
    """
    if exception is None or isinstance(exception, Resolver404) or not exception.args:
        return None
    message = exception.args[0]
    return message if isinstance(message, str) and message else None


def error_response(request: HttpRequest, status: int, title: str, exception: Exception | None) -> HttpResponse:
    detail = explanation(exception) or title
    if wants_json(request):
        return JsonResponse({"detail": detail}, status=status)
    return render(request, "error.html", {"status": status, "title": title, "detail": detail}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    # Never the exception's text: a SuspiciousOperation's message is for the logs, not the client.
    return error_response(request, 400, "Bad request", None)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(request, 403, "You may not open this page", exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(request, 404, "Page not found", exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500, rendered without the request's context: whatever failed (the database?) is not asked again."""
    title = "Something went wrong on our side"
    if wants_json(request):
        return JsonResponse({"detail": title}, status=500)
    page = render_to_string("error.html", {"status": 500, "title": title,
                                           "detail": "The error was logged. Try again in a moment."})
    return HttpResponse(page, status=500)
