"""A user's conversations over HTTP: list, start, delete, send a message.

``service`` is what the chat index page and the REST API share; ``api`` and ``serializers`` are
the REST endpoints.
"""
