"""The REST API: pending durable-pause approvals and instance transcripts.

A thin adapter (docs/architecture.md#thin-adapters): it parses, calls one service of ``agents_app.approvals.service``,
``registry`` or ``transcript``, and formats; it never writes an approval row itself.
"""
