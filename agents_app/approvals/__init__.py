"""Staff decisions on parked action calls.

Public: ``service`` (``approve_execution``, ``reject_execution``, ``can_approve``: the one entry
point the admin, the REST API, the chat page and Celery share), ``admin``, ``api``. The call that
parks lives with the actions (``actions.parking``). ``serializers`` and ``tasks`` are adapters'
internals.
"""
