"""WebSocket URL routes: ``/agents/<slug>/<name>`` (the consumer reads ``owner`` from the query; ``_pk`` is ignored)."""

from django.urls import re_path

from .consumers import ChatConsumer

websocket_urlpatterns = [
    re_path(r"^agents/(?P<slug>[^/]+)/(?P<name>[^/]+)/?$", ChatConsumer.as_asgi()),
]
