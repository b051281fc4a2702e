"""An instance's life around its turns: connections opening and closing, and its end.

``connections``: the ``on_connect``/``on_close`` hooks as the WebSocket consumer calls them;
``service``: ``destroy()``, an instance and all it stored deleted after its turns are cancelled;
``admin``: the staff page that destroys one, behind a confirmation (docs/architecture.md#destroy).
"""
