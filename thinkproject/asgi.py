"""ASGI entry point: HTTP through Django, WebSockets through Channels (session auth, Origin check)."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "thinkproject.settings")
django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402 - needs Django set up first
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

# The embedded setup serves /static/ itself, so `daphne thinkproject.asgi:application` is a
# complete server; behind a proxy that serves `collectstatic` output, set SERVE_STATIC=0.
http_application = ASGIStaticFilesHandler(django_asgi_app) if settings.SERVE_STATIC else django_asgi_app

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from genai_prices.data_snapshot import get_snapshot  # noqa: E402

from agents_app.operations import lifespan, server  # noqa: E402
from agents_app.web.routing import websocket_urlpatterns  # noqa: E402
from thinkproject import server_logs  # noqa: E402
from thinkproject.middleware import websocket_auth_stack  # noqa: E402 - needs Django set up first

# pydantic-ai loads the model price table when it builds its first model (~0.2 s): at start-up,
# not on the event loop in the middle of the first turn while other connections stream.
get_snapshot()
# The MCP client (44 MB, over a second to import) when an agent class declares MCP servers: now,
# not on the first connection's event loop. Daphne sends no lifespan events, so the lifespan's
# warming (operations.server.warm, which also looks for runtime servers) runs under uvicorn only.
server.load_mcp_client_if_declared()
server_logs.install()

# The process now holds its long-lived objects (Django, pydantic, the apps: several hundred
# thousand). The garbage collector's full passes walk every tracked object with the GIL held;
# frozen, these are left out, so the garbage of a big request does not stall every other
# connection of the process (measured: a full pass during a 2,000-message request stopped the
# event loop for ~100 ms; tests/integration/test_fairness.py).
gc.freeze()
gc.set_threshold(*settings.GC_THRESHOLDS)

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(websocket_auth_stack(URLRouter(websocket_urlpatterns))),
        # Start-up and shutdown of the process (docs/operations.md#lifespan).
        "lifespan": lifespan.application,
    }
)
