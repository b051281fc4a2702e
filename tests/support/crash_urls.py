"""The project's URLs plus one view that crashes: what the 500 handler answers (tests/integration/test_pages.py)."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from thinkproject.urls import handler400, handler403, handler404, handler500, urlpatterns  # noqa: F401


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [path("crash/", crash), path("api/crash/", crash), *urlpatterns]
