"""Per-user namespaces of instance names (README "Conversations").

Before, a name was unique per agent class: the first user to open ``demo-agent/default`` owned it
and everybody else got a 403. Now each owner has their own names, and instances without an owner
form the global namespace, which is where every instance of a shared class lives.

Existing rows keep their owner, so each conversation stays with the user who had it, except the
instances of shared classes: they move to the global namespace (owner NULL), where every user
opens them as before. Which classes are shared is known only to the code, so this migration asks
the registry (``AGENT_CLASSES`` as configured when it runs).

Reversing it restores the old constraint, which fails once two users have an instance of the same
name; then delete or rename one of them first.
"""

from django.conf import settings
from django.db import migrations, models


def move_shared_instances_to_the_global_namespace(apps, schema_editor):
    from agents_app.errors import AgentConfigurationError
    from agents_app.registry import agent_classes

    try:
        shared = [slug for slug, agent_class in agent_classes().items() if agent_class.shared]
    except AgentConfigurationError:
        shared = []  # a broken AGENT_CLASSES is reported by manage.py check (agents_app.E001)
    AgentInstance = apps.get_model("agents_app", "AgentInstance")
    AgentInstance.objects.filter(slug__in=shared).update(owner=None)


class Migration(migrations.Migration):

    dependencies = [
        ("agents_app", "0006_chat_recovery"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="agentinstance",
            name="unique_agent_instance",
        ),
        migrations.RunPython(move_shared_instances_to_the_global_namespace, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="agentinstance",
            constraint=models.UniqueConstraint(
                condition=models.Q(("owner__isnull", False)), fields=("slug", "owner", "name"),
                name="unique_instance_per_owner",
            ),
        ),
        migrations.AddConstraint(
            model_name="agentinstance",
            constraint=models.UniqueConstraint(
                condition=models.Q(("owner__isnull", True)), fields=("slug", "name"), name="unique_ownerless_instance",
            ),
        ),
    ]
