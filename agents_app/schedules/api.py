"""The REST API of scheduled prompts: list, create, update, delete, run now (``manage_schedules``).

The same service calls as the admin's (``schedules.definitions``, ``schedules.runs``): ``check_definition`` checks what
is sent (the schedule language's own messages come back on the ``schedule`` field),
``save_operator_schedule`` stores it, ``run_now`` claims a run and hands it to a worker. Schedules
declared in code or by agents are listed too; of those, only ``enabled`` may be changed here.
``preview`` reads a schedule and gives its next three runs without saving anything.
"""

from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app.models import Schedule, ScheduleRun
from agents_app.registry import agent_classes

from ..api.permissions import AUTHENTICATION_CLASSES
from . import definitions, runs


class CanManageSchedules(BasePermission):
    """The caller may see and change scheduled prompts: ``definitions.can_manage`` (the admin's rule)."""

    message = (
        'Scheduled prompts need the "agents_app.manage_schedules" permission (Can manage scheduled prompts); '
        "ask an administrator to grant it."
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        return definitions.can_manage(request.user)


class DeclaredElsewhere(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Only enabled can be changed on a schedule declared in code or by an agent."
    default_code = "declared_elsewhere"


class ScheduleRunSerializer(serializers.ModelSerializer[ScheduleRun]):
    """One run: when it was due, what started it, what came of it (``request_id``: its turn)."""

    class Meta:
        model = ScheduleRun
        fields = ["id", "occurrence_key", "scheduled_for", "trigger", "status", "request_id", "error",
                  "claimed_at", "started_at", "finished_at"]
        read_only_fields = fields


class ScheduleSerializer(serializers.ModelSerializer[Schedule]):
    """A scheduled prompt. ``agent`` + ``instance`` name the agent instance (created if new)."""

    agent = serializers.ChoiceField(source="instance.slug", choices=[], help_text="Agent slug, e.g. demo-agent.")
    instance = serializers.CharField(source="instance.name", max_length=200,
                                     help_text="Instance name: an existing one, or a new one.")
    timezone = serializers.CharField(
        required=False, allow_blank=True, max_length=64,
        help_text='IANA zone, e.g. Europe/Oslo; blank: the schedule\'s "in …", else the agent\'s default.',
    )
    last_run = ScheduleRunSerializer(read_only=True, allow_null=True)

    class Meta:
        model = Schedule
        fields = ["id", "name", "agent", "instance", "prompt", "schedule", "timezone", "enabled", "source",
                  "next_run_at", "last_run", "consecutive_failures", "created_at", "updated_at"]
        read_only_fields = ["id", "source", "next_run_at", "last_run", "consecutive_failures", "created_at",
                            "updated_at"]
        extra_kwargs = {
            "prompt": {"help_text": "Posted as a user message at each run.", "allow_blank": False},
            "schedule": {"help_text": '"every day at 09:00", "every monday at 9am in Europe/Oslo", '
                                      '"every 15 minutes", or cron ("0 9 * * 1-5"); check one with preview.',
                         "allow_blank": False},
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = sorted(agent_classes())

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        row: Schedule | None = self.instance
        # "agent" and "instance" arrive as {"instance": {"slug", "name"}} (their sources).
        target = attrs.pop("instance", {})
        attrs.update({key: target[field] for key, field in (("agent", "slug"), ("instance", "name"))
                      if field in target})
        if row is not None and row.source != Schedule.Source.OPERATOR:
            if set(attrs) - {"enabled"}:
                raise DeclaredElsewhere()
            return attrs
        current = {"agent": row.instance.slug, "instance": row.instance.name, "name": row.name,
                   "schedule": row.schedule, "timezone": row.timezone, "prompt": row.prompt} if row else {}
        merged = {**current, **attrs}
        for field in ("name", "agent", "instance", "prompt", "schedule"):
            if not merged.get(field):
                raise serializers.ValidationError({field: "This field is required."})
        parsed, problems = definitions.check_definition(
            merged["agent"], merged["instance"], merged["name"], merged["schedule"], merged.get("timezone") or "",
            pk=row.pk if row else None)
        if problems:
            raise serializers.ValidationError(problems)
        return {**merged, "parsed": parsed}

    def save(self, **kwargs: Any) -> Schedule:
        data = self.validated_data
        row = self.instance or Schedule()
        if "parsed" not in data:  # enabled, on a schedule declared elsewhere
            if "enabled" in data:
                definitions.set_enabled([row.pk], data["enabled"])
            row.refresh_from_db()
            self.instance = row
            return row
        row.name, row.prompt, row.schedule = data["name"], data["prompt"], data["schedule"]
        row.timezone, row.enabled = data.get("timezone") or "", data.get("enabled", row.enabled)
        self.instance = definitions.save_operator_schedule(row, data["agent"], data["instance"], data["parsed"],
                                                         self.context["request"].user)
        return self.instance


class PreviewRequestSerializer(serializers.Serializer[Any]):
    """A schedule to check before saving it: the fields of a scheduled prompt that say when it runs."""

    agent = serializers.ChoiceField(choices=[], help_text="Agent slug (its default zone may apply).")
    instance = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    schedule = serializers.CharField(max_length=200, help_text='e.g. "every monday at 9am in Europe/Oslo".')
    timezone = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = sorted(agent_classes())


class PreviewSerializer(serializers.Serializer[Any]):
    """What the schedule means (normalized, in which zone) and when it would run next."""

    schedule = serializers.CharField()
    kind = serializers.CharField()
    timezone = serializers.CharField(allow_null=True)
    next_runs = serializers.ListField(child=serializers.DateTimeField())


class OldestFirst(CursorPagination):
    """Oldest schedule first, 50 a page, with no ``COUNT(*)``."""

    page_size = 50
    ordering = ("id",)


@extend_schema_view(
    list=extend_schema(summary="Scheduled prompts (every source), oldest first"),
    retrieve=extend_schema(summary="One scheduled prompt"),
    create=extend_schema(summary="Add a scheduled prompt"),
    update=extend_schema(summary="Change a scheduled prompt (only enabled, for one declared elsewhere)"),
    partial_update=extend_schema(summary="Change some fields of a scheduled prompt (enabled: pause or resume)"),
    destroy=extend_schema(summary="Delete a scheduled prompt and its run history"),
)
class ScheduleViewSet(viewsets.ModelViewSet):
    """Prompts posted to agent instances on a schedule, and their runs."""

    serializer_class = ScheduleSerializer
    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [IsAuthenticated, CanManageSchedules]
    pagination_class = OldestFirst

    def get_queryset(self) -> QuerySet[Schedule]:
        return Schedule.objects.select_related("instance", "last_run")

    def perform_destroy(self, instance: Schedule) -> None:
        if instance.source == Schedule.Source.CODE:
            raise DeclaredElsewhere("This schedule is declared in get_scheduled_tasks(): remove it there.")
        definitions.delete(instance)

    @extend_schema(summary="Check a schedule: what it means and its next three runs (nothing is saved)",
                   operation_id="schedules_preview", request=PreviewRequestSerializer,
                   responses={200: PreviewSerializer})
    @action(detail=False, methods=["post"])
    def preview(self, request: Request) -> Response:
        """The schedule language's reading of ``schedule`` (or its errors by field, 400), as the admin form shows it."""
        asked = PreviewRequestSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        answer, problems = definitions.preview(data["agent"], data["instance"], data["schedule"], data["timezone"])
        if answer is None:
            raise serializers.ValidationError(problems)
        return Response(PreviewSerializer(answer).data)

    @extend_schema(summary="Run now: one run right away (the next scheduled run does not move)",
                   operation_id="schedules_run", request=None, responses={202: ScheduleRunSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str) -> Response:
        """Claim a run of this schedule now and hand it to a worker; its status follows on the run."""
        run = async_to_sync(runs.run_now)(self.get_object().pk, actor=request.user)
        run.refresh_from_db()
        return Response(ScheduleRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
