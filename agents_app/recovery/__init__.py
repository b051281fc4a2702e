"""Crash recovery: finding turns a dead process left running and continuing them.

``policy`` is pure (``ChatRecovery``, budgets, reasons; imported by the models and the agent
class); ``liveness`` knows which processes are alive (heartbeats); ``service`` cuts a turn and
runs its recovery attempts; ``admin`` and ``tasks`` are its adapters. See docs/operations.md.
"""
