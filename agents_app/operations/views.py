"""``/healthz`` and ``/readyz``: JSON, no login, for load balancers and orchestrators.

``/healthz`` answers 200 while the process serves HTTP at all (liveness: restart it when this
fails). ``/readyz`` runs ``health.READY`` (``?full=1``: ``health.FULL``) through
django-health-check's view and answers 200 when every check passes, else 503 (readiness: send it
no new connections). docs/operations.md#probes.
"""

import asyncio
import os
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.utils.cache import add_never_cache_headers
from health_check.views import HealthCheckView

from . import health, lifecycle


async def healthz(request: HttpRequest) -> JsonResponse:
    response = JsonResponse({"status": "ok", "pid": os.getpid(), "draining": lifecycle.draining()})
    add_never_cache_headers(response)
    return response


class ReadyView(HealthCheckView):
    """django-health-check's view with our checks, always answering JSON, 503 when one fails."""

    def get_checks(self) -> Any:
        full = self.request.GET.get("full") in ("1", "true", "yes")
        return (check() for check in (health.FULL if full else health.READY))

    async def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        with self.get_executor() as executor:  # as the library's own ``get``, which picks a format by Accept
            self.results = await asyncio.gather(*(check.get_result(executor) for check in self.get_checks()))
        failed = any(result.error for result in self.results)
        checks = {
            result.check.name: {
                "ok": result.error is None,
                "ms": round(result.time_taken * 1000, 1),
                **({"error": str(result.error)} if result.error else {}),
                **result.check.detail,
            }
            for result in self.results
        }
        return JsonResponse(
            {"status": "unavailable" if failed else "ok", "pid": os.getpid(), "checks": checks},
            status=503 if failed else 200,
        )


readyz = ReadyView.as_view()
