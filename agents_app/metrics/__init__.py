"""Prometheus metrics of turns, sockets, recovery, approvals, schedules and model tokens.

See docs/operations.md#metrics: what each metric means, multi-process mode, who may scrape.
"""
