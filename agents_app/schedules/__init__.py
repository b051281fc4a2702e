"""Scheduled prompts: operators' daily tasks and the schedules agents declare in code.

``language`` is pure (the schedule syntax, cron, time zones, occurrence keys; the agent class
imports it); ``definitions`` stores operators' schedules; ``declared`` keeps the schedules of
agents' code and the agent scheduling API; ``runs`` claims each occurrence exactly once and runs
it as a turn; ``admin``, ``api`` and ``tasks`` are its adapters.
"""
