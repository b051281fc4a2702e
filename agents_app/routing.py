"""WebSocket URL routes: ``/agents/<slug>/<name>`` (query strings such as ``_pk`` are ignored)."""

from django.urls import re_path

from .consumers import ChatConsumer

websocket_urlpatterns = [
    re_path(r"^agents/(?P<slug>[^/]+)/(?P<name>[^/]+)/?$", ChatConsumer.as_asgi()),
]
