from channels.layers import get_channel_layer
from django.apps import AppConfig
from django.core.signals import setting_changed
from django.db.models.signals import post_save


def _reset_registry(*, setting: str, **kwargs: object) -> None:
    if setting == "AGENT_CLASSES":
        from .registry import agent_classes

        agent_classes.cache_clear()


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .agent import register_handle_factory
        from .handles import AgentHandle
        from .mcp import checks as mcp_checks  # noqa: F401 - registers the MCP system checks
        from .metrics import observers, tracing
        from .models import AgentInstance
        from .schedules.declared import on_instance_saved

        # ``MyAgent.aget()`` returns handles, which live a layer above the agent class.
        register_handle_factory(AgentHandle)
        setting_changed.connect(_reset_registry)
        # A new instance gets the schedules its class declares (``get_scheduled_tasks()``) at once.
        post_save.connect(on_instance_saved, sender=AgentInstance, dispatch_uid="agents_app.schedules.declared")
        # Metrics follow the app's events; traces, when switched on (docs/operations.md#metrics).
        observers.install()
        tracing.install()
        # The process's channel layer, made now, before any thread runs a turn: channels' registry
        # makes it on first use without a lock, and a Celery worker's threads starting turns at once
        # each made one. A turn's control channel, named by one, was then received on another, and
        # its flush requests went unanswered until the reply ended (docs/architecture.md#turn-control).
        get_channel_layer()
