"""Named queries of the agents app: each question the engine asks the database, asked one way.

Managers built from these querysets are attached in ``models``; this module imports no model
(``self.model`` reaches the statuses), so ``models`` can import it.
"""

import functools
from typing import Any

from django.db import models
from django.utils import timezone

from . import statements


@functools.cache
def _all_columns(model: type[models.Model]) -> statements.Columns:
    return statements.Columns(model, "i")


@functools.cache
def _generation(model: type[models.Model]) -> statements.Columns:
    return statements.Columns(model, "i", ("generation",))


class AgentInstanceQuerySet(models.QuerySet[Any]):
    def generation_of(self, instance_pk: int) -> int:
        """The instance's clear generation now: turns accepted in an older one are stale."""
        return self.queue_state(instance_pk)[0]

    def queue_state(self, instance_pk: int) -> tuple[int, int]:
        """(generation, overlap sequence) now: what ``Turn.is_stale`` compares a queued turn with."""
        row = statements.instance_queue_state(self.model).row(instance_pk)
        if row is None:
            raise self.model.DoesNotExist(f"No agent instance {instance_pk}")
        return int(row[0]), int(row[1])

    def touch(self, instance_pk: int, **also: Any) -> int:
        """Mark the conversation changed now (``updated_at``; ``also``: more columns to set in the
        same statement), and return its clear generation then.

        The first write of every transcript writer's transaction: it takes the row's lock, the
        lock order of every writer (``agents_app.transcript``). One UPDATE, because the engine's
        other writes to the row are UPDATEs too, which skip ``auto_now``. Only the generation
        comes back (the end of a turn compares it with its turn's): the row's other columns cost a
        conversion each and a model object, every turn; ``touch_and_read`` reads them.
        """
        return int(self._touched(instance_pk, _generation(self.model), **also)[0])

    def touch_and_read(self, instance_pk: int) -> models.Model:
        """``touch``, reading the whole row back in the same statement: the admission decides on its
        generation and overlap sequence, and hands the row to the turn it inserts."""
        columns = _all_columns(self.model)
        instance = columns.instance(self._touched(instance_pk, columns), 0, statements.connection_for(self.model))
        assert instance is not None
        return instance

    def _touched(self, instance_pk: int, returned: statements.Columns, **also: Any) -> tuple[Any, ...]:
        row = statements.update_returning(self.model, {"pk": instance_pk}, returned, updated_at=timezone.now(), **also)
        if row is None:
            raise self.model.DoesNotExist(f"No agent instance {instance_pk}")
        return row


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
