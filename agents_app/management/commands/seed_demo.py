"""``manage.py seed_demo``: the staff user and demo agent instance a fresh ``make run`` shows."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from agents_app.protocol.naming import DEFAULT_INSTANCE_NAME
from agents_app.registry import agent_classes, open_instance


class Command(BaseCommand):
    help = "Create the demo staff user (with a new password, printed once) and its default conversation of each agent."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = user_model.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(f"Created staff user {username!r} with password: {password}")
            self.stdout.write("  (shown once; change it with: manage.py changepassword)")
        else:
            self.stdout.write(f"Staff user {username!r} exists (reset with: manage.py changepassword {username})")
        for slug in agent_classes():
            open_instance(slug, DEFAULT_INSTANCE_NAME, user)  # as the user's first visit makes it
            self.stdout.write(f"Agent instance {slug}/{DEFAULT_INSTANCE_NAME} of {username!r} ready")
