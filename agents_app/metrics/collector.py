"""Gauges that are database facts, read when ``/metrics`` is scraped (one query each, on an index).

They describe the whole deployment, not one process, so they are computed once per scrape by the
process that answers it, never kept in the multi-process files (where every process would report
its own copy of the same number).
"""

from collections.abc import Iterator

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..models import LedgerEntry, PendingApproval, Schedule, Turn


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = timezone.now()
        turns = {
            status: GaugeMetricFamily(f"agents_turns_{name}", help_text, labels=["agent"])
            for status, name, help_text in (
                (Turn.Status.QUEUED, "queued", "Turns waiting in their instance's queue."),
                (Turn.Status.RUNNING, "active", "Turns running now, on any process."),
            )
        }
        rows = (
            Turn.objects.filter(status__in=list(turns))
            .values("status", "instance__slug")
            .annotate(n=Count("id"))
            .order_by()
        )
        for row in rows:
            turns[row["status"]].add_metric([row["instance__slug"]], row["n"])
        yield from turns.values()

        pending = GaugeMetricFamily(
            "agents_pending_approvals", "Paused action calls waiting for a decision.", labels=["agent"]
        )
        for row in PendingApproval.objects.values("agent").annotate(n=Count("execution_id")).order_by():
            pending.add_metric([row["agent"]], row["n"])
        yield pending
        oldest = PendingApproval.objects.aggregate(oldest=Min("created_at"))["oldest"]
        yield GaugeMetricFamily(
            "agents_oldest_pending_approval_age_seconds",
            "Age of the oldest pending approval (0 when none waits).",
            value=(now - oldest).total_seconds() if oldest else 0.0,
        )

        yield GaugeMetricFamily(
            "agents_ledger_pending_rows",
            "Action-ledger rows still pending (an action running, or cut while it ran).",
            value=LedgerEntry.objects.filter(status=LedgerEntry.Status.PENDING).count(),
        )

        due = Schedule.objects.filter(enabled=True, next_run_at__lt=now).aggregate(first=Min("next_run_at"))["first"]
        yield GaugeMetricFamily(
            "agents_schedule_overdue_seconds",
            "How long the most overdue enabled schedule has been due and not started "
            "(0 when none is: beat and the workers keep up).",
            value=(now - due).total_seconds() if due else 0.0,
        )
