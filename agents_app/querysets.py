"""Named queries of the agents app: each question the engine asks the database, asked one way.

Managers built from these querysets are attached in ``models``; this module imports no model
(``self.model`` reaches the statuses), so ``models`` can import it.
"""

from typing import Any

from django.db import models
from django.utils import timezone


class AgentInstanceQuerySet(models.QuerySet[Any]):
    def generation_of(self, instance_pk: int) -> int:
        """The instance's clear generation now: turns accepted in an older one are stale."""
        return int(self.values_list("generation", flat=True).get(pk=instance_pk))

    def queue_state(self, instance_pk: int) -> tuple[int, int]:
        """(generation, overlap sequence) now: what ``Turn.is_stale`` compares a queued turn with."""
        generation, sequence = self.values_list("generation", "overlap_sequence").get(pk=instance_pk)
        return int(generation), int(sequence)
    def touch(self, instance_pk: int) -> None:
        """Mark the conversation changed now (``updated_at``).

        One UPDATE, because the engine's other writes to the row are UPDATEs too, which skip
        ``auto_now``.
        """
        self.filter(pk=instance_pk).update(updated_at=timezone.now())


class TurnQuerySet(models.QuerySet[Any]):
    def of(self, instance: models.Model | int) -> "TurnQuerySet":
        """Turns of one instance (an instance or its pk)."""
        return self.filter(instance_id=getattr(instance, "pk", instance))

    def active(self) -> "TurnQuerySet":
        """Queued or running: turns that still hold or wait for the instance's lock."""
        return self.filter(status__in=self.model.ACTIVE_STATUSES)

    def queued(self) -> "TurnQuerySet":
        return self.filter(status=self.model.Status.QUEUED)

    def running(self) -> "TurnQuerySet":
        return self.filter(status=self.model.Status.RUNNING)

    def finished(self) -> "TurnQuerySet":
        return self.exclude(status__in=self.model.ACTIVE_STATUSES)
