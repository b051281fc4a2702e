"""WebSocket URL routes: ``/agents/<slug>/<name>`` (the consumer reads ``owner`` from the query; ``_pk`` is ignored)."""

from django.urls import re_path

from .consumers import ChatConsumer

websocket_urlpatterns = [
    # A sub-agent's address is its parent's plus /sub/<slug>/<name> at any depth
    # (docs/protocol.md#sub-agent-addresses).
    re_path(r"^agents/(?P<slug>[^/]+)/(?P<name>[^/]+)(?P<sub>(?:/sub/[^/]+/[^/]+)*)/?$", ChatConsumer.as_asgi()),
]
