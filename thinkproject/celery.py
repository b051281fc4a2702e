"""Celery application: configured from Django settings with the ``CELERY_`` namespace."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "thinkproject.settings")

app = Celery("thinkproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
