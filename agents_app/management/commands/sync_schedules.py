"""``manage.py sync_schedules``: make the rows of ``get_scheduled_tasks()`` match the code now."""

from typing import Any

from django.core.management.base import BaseCommand

from agents_app.schedules.declared import sync_declared


class Command(BaseCommand):
    help = ("Add, change and remove the schedules agents declare in get_scheduled_tasks(), for every "
            "instance (run after a deploy; Celery beat also does it every ten minutes).")

    def handle(self, *args: Any, **options: Any) -> None:
        counts = sync_declared()
        self.stdout.write(", ".join(f"{count} {what}" for what, count in counts.items()))
