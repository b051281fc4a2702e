"""``GET /metrics``: the Prometheus text exposition of every process on this host, and the database gauges.

Who may read it is a setting (docs/operations.md#metrics): a bearer token (``AGENT_METRICS_TOKEN``)
or a client address in ``AGENT_METRICS_ALLOWED_IPS``. Anyone else gets 404, as if there were
nothing here: the page names agents and volumes an outsider has no business seeing.
"""

import hmac
import ipaddress
import os
from pathlib import Path

from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from .. import conf
from .collector import DatabaseCollector

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        raise Http404
    registry = CollectorRegistry(auto_describe=True)
    directory = os.environ.get(MULTIPROC_DIR)
    if directory:
        forget_dead_processes(Path(directory))
        # Every process's files (this one's included), summed by the metric's own rule.
        MultiProcessCollector(registry)
    else:
        registry.register(REGISTRY)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def allowed(request: HttpRequest) -> bool:
    """A matching bearer token, or a client address in the allow-list."""
    token = conf.get("AGENT_METRICS_TOKEN")
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(
        client in ipaddress.ip_network(entry, strict=False) for entry in conf.get("AGENT_METRICS_ALLOWED_IPS") or ()
    )


def forget_dead_processes(directory: Path) -> None:
    """Drop the live gauges (open sockets) of processes that are gone, however they ended.

    uvicorn ends a worker by re-raising the SIGTERM it caught, so no exit hook of the worker runs;
    a crash runs none either. Counters and histograms of dead processes stay: totals never drop.
    Every process writing to the directory must share this one's PID namespace (one host or
    container: docs/operations.md#multi-process).
    """
    for path in directory.glob("gauge_live*_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_process_dead(pid, str(directory))
        except PermissionError:
            continue  # alive, another user's
