"""System checks for the agents configuration (``manage.py check``)."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

E001 = "agents_app.E001"
E003 = "agents_app.E003"
E004 = "agents_app.E004"
E005 = "agents_app.E005"
E006 = "agents_app.E006"
E007 = "agents_app.E007"
W001 = "agents_app.W001"
W002 = "agents_app.W002"


@register(Tags.compatibility)
def check_agent_classes(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E001: every AGENT_CLASSES entry imports, is a ChatAgent, and has its own slug."""
    from .errors import AgentConfigurationError
    from .registry import agent_classes

    agent_classes.cache_clear()
    try:
        agent_classes()
    except AgentConfigurationError as exc:
        return [Error(str(exc), hint="Fix AGENT_CLASSES in settings.py.", id=E001)]
    return []


def registered_classes() -> dict[str, Any]:
    """The agent classes by slug; empty when AGENT_CLASSES is broken (E001 reports that)."""
    from .errors import AgentConfigurationError
    from .registry import agent_classes

    try:
        return agent_classes()
    except AgentConfigurationError:
        return {}


@register(Tags.compatibility)
def check_agent_actions(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E003: every agent's ``get_actions()`` is a dict of valid ``action()`` declarations.

    A malformed action then fails ``manage.py check`` (and startup), not a conversation.
    """
    from types import SimpleNamespace

    from .errors import AgentConfigurationError

    errors = []
    for slug, agent_class in sorted(registered_classes().items()):
        try:
            agent_class(SimpleNamespace(name="(system check)", pk=None)).compiled_actions()
        except AgentConfigurationError as exc:
            errors.append(Error(f"{agent_class.__qualname__} ({slug}): {exc}", hint="Fix its get_actions().", id=E003))
    return errors


@register(Tags.compatibility)
def check_agent_options(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E005: ``message_concurrency``, ``max_persisted_messages``, ``max_steps`` and
    ``recovery_strategy`` hold values they take."""
    from .concurrency import STRATEGIES, is_valid
    from .llm import recovery as llm_recovery

    errors = []
    for slug, agent_class in sorted(registered_classes().items()):
        problems = []
        if not is_valid(agent_class.message_concurrency):
            problems.append(f"message_concurrency must be one of {', '.join(STRATEGIES)} or Debounce(ms=...), "
                            f"not {agent_class.message_concurrency!r}")
        for option, minimum in (("max_persisted_messages", 0), ("max_steps", 1)):
            value = getattr(agent_class, option)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
                problems.append(f"{option} must be None or an integer ≥ {minimum}, not {value!r}")
        problems += _lease_problems(agent_class)
        if (strategy_problem := llm_recovery.strategy_problem(agent_class.recovery_strategy)) is not None:
            problems.append(strategy_problem)
        errors += [Error(f"{agent_class.__qualname__} ({slug}): {problem}", hint="Fix the class attribute.", id=E005)
                   for problem in problems]
    return errors


def _lease_problems(agent_class: Any) -> list[str]:
    """``action_ledger_pending_retry_lease``: a timedelta, None, or the setting (the default)."""
    from types import SimpleNamespace

    from django.core.exceptions import ImproperlyConfigured

    from .actions import ledger

    try:
        ledger.lease_of(agent_class(SimpleNamespace(name="(system check)", pk=None)))
    except ImproperlyConfigured as exc:
        return [str(exc)]
    return []


@register(Tags.compatibility)
def check_scheduled_tasks(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E006: every agent's ``get_scheduled_tasks()`` declares valid ids, schedules and time zones.

    Asked of an instance that is not saved (named "(system check)"), as E003 asks ``get_actions()``:
    a typo in a schedule then fails ``manage.py check``, not every run of the task.
    """
    from .errors import AgentConfigurationError
    from .models import AgentInstance
    from .schedules.declared import declared_tasks

    errors = []
    for slug, agent_class in sorted(registered_classes().items()):
        try:
            declared_tasks(agent_class(AgentInstance(slug=slug, name="(system check)")))
        except AgentConfigurationError as exc:
            errors.append(Error(f"{agent_class.__qualname__} ({slug}): {exc}", hint="Fix its get_scheduled_tasks().",
                                id=E006))
    return errors


@register(Tags.compatibility)
def check_agent_model(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E004: AGENT_MODEL names a model this installation can build."""
    from .errors import AgentConfigurationError
    from .llm import get_model

    try:
        get_model()
    except AgentConfigurationError as exc:
        return [Error(str(exc), hint="Set AGENT_MODEL=demo to run offline.", id=E004)]
    return []


@register(Tags.compatibility, deploy=True)
def check_channel_layer(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """W001: the in-memory channel layer cannot fan out across processes."""
    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    if backend.endswith("InMemoryChannelLayer"):
        return [Warning("The in-memory channel layer only reaches connections of one process.",
                        hint="Use channels_redis in production.", id=W001)]
    return []


# ``UPDATE … RETURNING`` (``statements.update_returning``) came in SQLite 3.35.
SQLITE_MINIMUM = (3, 35)
SQLITE_ENGINES = ("django.db.backends.sqlite3", "thinkproject.sqlite")


@register(Tags.compatibility)
def check_sqlite_version(app_configs: Any, **kwargs: Any) -> list[Error]:
    """E007: the SQLite library Python links reads a row back from an UPDATE (3.35 or later)."""
    import sqlite3

    if settings.DATABASES["default"]["ENGINE"] not in SQLITE_ENGINES or sqlite3.sqlite_version_info >= SQLITE_MINIMUM:
        return []
    return [Error(f"SQLite {sqlite3.sqlite_version} is too old: the agents app needs "
                  f"{'.'.join(map(str, SQLITE_MINIMUM))} or later (UPDATE … RETURNING).",
                  hint="Use a Python built with a newer SQLite, or PostgreSQL (DATABASE_URL).", id=E007)]


@register(Tags.database)
def check_sqlite_concurrency(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """W002: SQLite shared by Daphne and Celery needs WAL mode and IMMEDIATE transactions."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] not in SQLITE_ENGINES:
        return []
    options = db.get("OPTIONS", {})
    if options.get("transaction_mode") != "IMMEDIATE" or "journal_mode=WAL" not in options.get("init_command", ""):
        return [Warning("SQLite without WAL and IMMEDIATE transactions will report 'database is locked'.",
                        hint="Set OPTIONS transaction_mode='IMMEDIATE' and init_command with journal_mode=WAL.",
                        id=W002)]
    return []


