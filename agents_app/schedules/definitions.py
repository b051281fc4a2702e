"""Operators' schedules: who may manage them, parsing a schedule for an agent instance, storing
one (its next run computed from the schedule language), deleting and switching them on or off.

The admin and the REST API call these; the schedules declared in code go through them too.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.utils import timezone

from .. import events, registry
from ..models import AgentInstance, Schedule
from . import language as dsl

__all__ = ["ONCE", "can_manage", "check_definition", "delete", "parse_for", "preview", "save_operator_schedule",
           "set_enabled", "store"]

# The ``spec`` of a one-off schedule of the agent API (it runs once, then its row is removed).
ONCE = "once"


def can_manage(user: Any) -> bool:
    """Whether ``user`` may see and change scheduled prompts: ``agents_app.manage_schedules`` (or superuser)."""
    return bool(user is not None and user.is_active and user.has_perm("agents_app.manage_schedules"))


# --- operators' schedules ---------------------------------------------------------------------------
def parse_for(slug: str, name: str, schedule: str, time_zone: str = "") -> dsl.Schedule:
    """What ``schedule`` (DSL or cron) means on instance ``slug/name`` (existing or not yet).

    The instance's ``get_default_timezone()`` applies when neither the schedule nor ``time_zone``
    names a zone.

    Raises:
        ScheduleError: with the reference's message (the admin form and the API show it as is).
        UnknownAgent: no agent class has that slug.
    """
    agent = registry.get_agent_class(slug)(AgentInstance(slug=slug, name=name))
    return dsl.parse(schedule, timezone=time_zone or None, default_timezone=agent.get_default_timezone())


def store(row: Schedule, parsed: dsl.Schedule, *, now: datetime | None = None) -> Schedule:
    """Save an operator's schedule: its parsed form, and its next run when that changes.

    The next run is computed from now when the schedule is new, when what it means changed, or when
    it is switched back on; otherwise (a new prompt, a new name) it stays, and no occurrence runs twice.
    """
    now = now or timezone.now()
    before = Schedule.objects.filter(pk=row.pk).values("spec", "enabled").first() if row.pk else None
    row.spec = dsl.to_spec(parsed)
    if before is None or before["spec"] != row.spec or (row.enabled and not before["enabled"]):
        row.next_run_at = dsl.next_occurrence(parsed, now)
    row.save()
    if before is None:
        events.emit_chat(row.instance, events.SCHEDULE_CREATE, id=row.name, callback=str(row.action))
    return row


def check_definition(agent: str, instance_name: str, name: str, schedule: str, time_zone: str = "", *,
                     pk: int | None = None) -> tuple[dsl.Schedule | None, dict[str, str]]:
    """An operator's schedule checked as the admin form and the API both check it.

    Returns the parsed schedule, or None and the problems by field (``agent``, ``instance``,
    ``name``, ``schedule``, ``timezone``), each message ready to show.
    """
    errors: dict[str, str] = {}
    if agent not in registry.agent_classes():
        errors["agent"] = f"No agent is registered under {agent!r}"
    if not registry.valid_name(instance_name):
        errors["instance"] = f"Invalid instance name {instance_name!r}: no slash or space, at most 200 characters"
    try:
        dsl.validate_task_id(name)
    except dsl.ScheduleError as exc:
        errors["name"] = str(exc)
    parsed, problems = _parse_checked(agent, instance_name, schedule, time_zone, errors)
    if parsed is None:
        return None, problems
    taken = Schedule.objects.filter(instance__slug=agent, instance__name=instance_name, instance__owner=None,
                                    instance__parent=None, name=name).exclude(pk=pk)
    if taken.exists():
        return None, {"name": f'{agent}/{instance_name} has a schedule named "{name}" already'}
    return parsed, {}


def _parse_checked(agent: str, instance_name: str, schedule: str, time_zone: str,
                   errors: dict[str, str]) -> tuple[dsl.Schedule | None, dict[str, str]]:
    """``schedule`` parsed for ``agent``, unless ``errors`` (other fields') or the schedule's own say no.

    The expression is read before any zone (a typo is reported as a typo), and a bad ``time_zone``
    is reported beside it, each on its field.
    """
    errors = dict(errors)
    try:
        dsl.check_expression(schedule)
    except dsl.ScheduleError as exc:
        errors["schedule"] = str(exc)
    if time_zone:
        try:
            dsl.validate_timezone(time_zone)
        except dsl.ScheduleError as exc:
            errors["timezone"] = str(exc)
    if errors:
        return None, errors
    try:
        return parse_for(agent, instance_name, schedule, time_zone), {}
    except dsl.ScheduleError as exc:
        return None, {"schedule": str(exc)}


def preview(agent: str, instance_name: str, schedule: str, time_zone: str = "", *, now: datetime | None = None,
            count: int = 3) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """What ``schedule`` means on ``agent`` and its next ``count`` runs from ``now``, saving nothing.

    Returns the preview (``schedule``: its normalized form, ``kind``, ``timezone``, ``next_runs``:
    aware datetimes) or None and the problems by field, as ``check_definition`` words them. The
    instance name only matters to an agent whose default zone depends on it (blank is fine).
    """
    if agent not in registry.agent_classes():
        return None, {"agent": f"No agent is registered under {agent!r}"}
    parsed, problems = _parse_checked(agent, instance_name, schedule, time_zone, {})
    if parsed is None:
        return None, problems
    return {"schedule": parsed.normalized, "kind": parsed.kind, "timezone": parsed.timezone,
            "next_runs": dsl.next_occurrences(parsed, now or timezone.now(), count)}, {}


def save_operator_schedule(row: Schedule, agent: str, instance_name: str, parsed: dsl.Schedule, user: Any, *,
                           now: datetime | None = None) -> Schedule:
    """Save what an operator submitted (``check_definition`` passed): on instance ``agent/instance_name``
    of the global namespace (no owner: the instances code opens with ``aget(name)``, which staff
    open in the chat with ``?owner=``), created if it does not exist yet.
    """
    row.instance, _ = AgentInstance.objects.get_or_create(slug=agent, name=instance_name, owner=None, parent=None)
    row.source = Schedule.Source.OPERATOR
    row.action = Schedule.Action.PROMPT
    if row.created_by_id is None and getattr(user, "pk", None):
        row.created_by = user
    return store(row, parsed, now=now)


def delete(row: Schedule) -> None:
    """Remove a schedule (and its run history)."""
    row.delete()
    events.emit_chat(row.instance, events.SCHEDULE_CANCEL, id=row.name, callback=str(row.action))


def set_enabled(schedule_ids: Iterable[int], enabled: bool, *, now: datetime | None = None) -> int:
    """Pause or resume schedules; returns how many changed.

    A resumed schedule runs next at its first occurrence after now: the time it spent paused
    leaves no occurrence to catch up.
    """
    now = now or timezone.now()
    if not enabled:
        return Schedule.objects.filter(pk__in=list(schedule_ids), enabled=True).update(enabled=False)
    changed = 0
    for pk, spec, next_run_at in Schedule.objects.filter(pk__in=list(schedule_ids), enabled=False).values_list(
            "pk", "spec", "next_run_at"):
        upcoming = next_run_at if spec["kind"] == ONCE else dsl.next_occurrence(dsl.from_spec(spec), now)
        changed += Schedule.objects.filter(pk=pk, enabled=False).update(enabled=True, next_run_at=upcoming)
    return changed
