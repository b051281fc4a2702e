"""ASGI entry point: HTTP through Django, WebSockets through Channels (session auth, Origin check)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "thinkproject.settings")
django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402 - needs Django set up first
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

# The embedded setup serves /static/ itself, so `daphne thinkproject.asgi:application` is a
# complete server; behind a proxy that serves `collectstatic` output, set SERVE_STATIC=0.
http_application = ASGIStaticFilesHandler(django_asgi_app) if settings.SERVE_STATIC else django_asgi_app

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agents_app.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
