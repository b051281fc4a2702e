"""Admin of scheduled prompts: what operators use to run prompts on agents on a schedule.

Operators need staff status and ``agents_app.manage_schedules`` (``definitions.can_manage``). They
add a prompt for an agent instance with a schedule (the schedule language or cron), see its next
and last runs, run it now, pause or resume it; schedules declared in code or by agents may be
paused, resumed or run, not edited. Every change goes through ``definitions`` and ``runs``, as the
REST API's do. While an operator types, the form previews the next three runs (``preview_view``).
"""

from typing import Any
from zoneinfo import ZoneInfo

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from .. import registry
from ..admin_base import ReadOnlyAdmin
from ..models import AgentInstance, Schedule, ScheduleRun
from ..registry import agent_classes
from . import declared, definitions, runs
from . import language as dsl

# Runs shown on a schedule's page, newest first (the full history is in "Scheduled runs").
RUN_HISTORY = 20
# Characters of a run's error shown in a list (all of it is in the title, and on the run).
ERROR_PREVIEW_CHARS = 80
# Characters of a name or an instance's address shown in a list (all of it is in the title).
NAME_CHARS = 36
# Instance names offered while typing one (the most recently active).
INSTANCE_SUGGESTIONS = 200
NO_TIMEZONE = "— the schedule's “in …”, else the agent's default —"


def local_time(moment: Any, zone: str | None = None) -> SafeString:
    """A time the page shows in the reader's own zone (``schedules-admin.js``); without scripts, in ``zone`` (UTC)."""
    if moment is None:
        return format_html("{}", "—")
    shown = moment.astimezone(ZoneInfo(zone or "UTC"))
    return format_html("<time class='local-time' datetime='{}'>{}</time>", moment.isoformat(),
                       shown.strftime("%Y-%m-%d %H:%M %Z"))


def clipped(text: str, chars: int) -> SafeString:
    """``text`` cut to ``chars`` characters for a list column, whole in the title (shown on hover)."""
    return format_html("<span class='clipped' title='{}'>{}</span>", text, Truncator(text).chars(chars))


def status_label(run: ScheduleRun) -> SafeString:
    return format_html("<span class='run-status' data-status='{}'>{}</span>", run.status, run.get_status_display())


def run_error(run: ScheduleRun) -> SafeString:
    """The start of a run's error, under its status (all of it in the title)."""
    if not run.error:
        return SafeString("")
    return format_html("<div class='run-error'>{}</div>", clipped(run.error.strip(), ERROR_PREVIEW_CHARS))


def instance_link(instance: AgentInstance) -> SafeString:
    """An instance's address, cut for a list, linking to its conversation."""
    return format_html("<a href='{}'>{}</a>", registry.staff_chat_url(instance), clipped(instance.address, NAME_CHARS))


def run_links(run: ScheduleRun) -> SafeString:
    """The run's turn (in the turns admin) and the conversation it is in (the chat page)."""
    chat = registry.staff_chat_url(run.instance)
    if not run.request_id or run.schedule.action != Schedule.Action.PROMPT:
        return format_html("<a href='{}'>conversation</a>", chat)
    turn = reverse("admin:agents_app_turn_changelist")
    return format_html("<a href='{}?instance__id__exact={}&amp;request_id__exact={}'>turn</a> · "
                       "<a href='{}'>conversation</a>", turn, run.instance_id, run.request_id, chat)


def scheduled_cell(run: ScheduleRun) -> SafeString:
    """When a run was due, and "run now" when an operator started it."""
    trigger = format_html(" <span class='run-trigger'>{}</span>", "run now") \
        if run.trigger == ScheduleRun.Trigger.MANUAL else ""
    return format_html("{}{}", local_time(run.scheduled_for, run.schedule.spec.get("timezone")), trigger)


class ScheduleForm(forms.ModelForm):
    """An operator's scheduled prompt. Checked by ``definitions.check_definition`` (the API's check too)."""

    agent = forms.ChoiceField(choices=lambda: [(slug, slug) for slug in sorted(agent_classes())])
    instance_name = forms.CharField(
        label="Instance", max_length=200,
        help_text="An instance of the agent: pick one, or type a new name to create it.",
        widget=forms.TextInput(attrs={"list": "schedule-instances", "autocomplete": "off"}),
    )
    timezone = forms.ChoiceField(
        required=False, choices=lambda: [("", NO_TIMEZONE), *((z, z) for z in dsl.timezone_names())],
        help_text="For wall-clock schedules and cron (interval schedules take none).",
    )

    class Meta:
        model = Schedule
        fields = ["name", "agent", "instance_name", "prompt", "schedule", "timezone", "enabled"]
        widgets = {"prompt": forms.Textarea(attrs={"rows": 4, "cols": 80})}
        help_texts = {
            "name": 'Letters, digits, "_" or "-" (e.g. daily-report): each run is named after it.',
            "prompt": "Posted as a user message at each run; the agent replies as in a chat.",
            "schedule": ('"every day at 09:00", "every monday at 9am in Europe/Oslo", "every weekday at 8:30pm", '
                         '"every mon,thu at 07:00", "every 15 minutes", or cron: "0 9 * * 1-5".'),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial.setdefault("agent", self.instance.instance.slug)
            self.initial.setdefault("instance_name", self.instance.instance.name)
            stored = self.instance.timezone
            if stored and stored not in dsl.timezone_names():  # an old name ("US/Eastern") the API took
                self.fields["timezone"].choices = [*self.fields["timezone"].choices, (stored, stored)]
        self.fields["prompt"].required = True
        self.fields["schedule"].required = True
        self.parsed: dsl.Schedule | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        self.parsed, problems = definitions.check_definition(
            data["agent"], data["instance_name"], data["name"], data["schedule"], data.get("timezone") or "",
            pk=self.instance.pk)
        for field, message in problems.items():
            self.add_error("instance_name" if field == "instance" else field, message)
        return data


class StateForm(forms.ModelForm):
    """A schedule declared in code or by an agent: only switching it on or off is the operator's."""

    class Meta:
        model = Schedule
        fields = ["enabled"]


class RecentRunsFormSet(BaseInlineFormSet):
    """The newest ``RUN_HISTORY`` runs only: a schedule running every minute has half a million a year."""

    def get_queryset(self) -> QuerySet[ScheduleRun]:
        return super().get_queryset().select_related("instance__owner", "schedule").order_by("-scheduled_for", "-pk")[
            :RUN_HISTORY]


class ScheduleRunInline(admin.TabularInline):
    model = ScheduleRun
    formset = RecentRunsFormSet
    fields = ["scheduled", "status_badge", "started", "finished", "links"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = f"Recent runs (newest {RUN_HISTORY})"

    @admin.display(description="scheduled for")
    def scheduled(self, run: ScheduleRun) -> str:
        return scheduled_cell(run)

    @admin.display(description="status")
    def status_badge(self, run: ScheduleRun) -> str:
        return format_html("{}{}", status_label(run), run_error(run))

    @admin.display(description="started")
    def started(self, run: ScheduleRun) -> str:
        return local_time(run.started_at, run.schedule.spec.get("timezone"))

    @admin.display(description="finished")
    def finished(self, run: ScheduleRun) -> str:
        return local_time(run.finished_at, run.schedule.spec.get("timezone"))

    @admin.display(description="turn")
    def links(self, run: ScheduleRun) -> str:
        return run_links(run)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return definitions.can_manage(request.user)


class OperatorOnly(admin.ModelAdmin):
    """Seen and changed by whoever has ``manage_schedules``, and by no one else."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return definitions.can_manage(request.user)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return definitions.can_manage(request.user)


@admin.register(Schedule)
class ScheduleAdmin(OperatorOnly):
    form = ScheduleForm
    # Five columns fit a 1280 px window beside the navigation and the filters: whether it is on is
    # in "next run" (paused), its failures in a row and its error in "last run", its source under
    # its instance.
    list_display = ["schedule_name", "agent_instance", "schedule_text", "next_run", "last_run_summary"]
    list_filter = ["enabled", "source"]
    search_fields = ["name", "instance__name", "instance__slug", "prompt"]
    list_select_related = ["instance__owner", "last_run"]
    show_full_result_count = False
    ordering = ["next_run_at", "pk"]
    actions = ["run_selected", "pause_selected", "resume_selected"]
    inlines = [ScheduleRunInline]
    readonly_fields = ["next_run", "last_run_summary", "consecutive_failures", "source"]
    save_on_top = True  # a schedule's page is long (its runs): its buttons are at the top too

    class Media:
        js = ["agents_app/schedules-admin.js"]
        css = {"all": ["agents_app/admin.css", "agents_app/schedules-admin.css"]}

    # --- who may do what ------------------------------------------------------------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return definitions.can_manage(request.user)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return definitions.can_manage(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        # A declared task comes back at the next sync: change get_scheduled_tasks() instead.
        return definitions.can_manage(request.user) and (obj is None or obj.source != Schedule.Source.CODE)

    def has_manage_permission(self, request: HttpRequest) -> bool:
        return definitions.can_manage(request.user)

    # --- the form -------------------------------------------------------------------------------
    def get_form(self, request: HttpRequest, obj: Schedule | None = None, change: bool = False,
                 **kwargs: Any) -> type[forms.ModelForm]:
        if obj is not None and obj.source != Schedule.Source.OPERATOR:
            kwargs["form"] = StateForm
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> list[tuple[Any, dict[str, Any]]]:
        if obj is not None and obj.source != Schedule.Source.OPERATOR:
            return [(None, {"fields": ["source", "agent_instance", "schedule_text", "declared", "enabled",
                                       "next_run", "last_run_summary", "consecutive_failures"]})]
        state = ["next_run", "last_run_summary", "consecutive_failures"] if obj is not None else []
        return [(None, {"fields": ["name", "agent", "instance_name", "prompt", "schedule", "timezone", "enabled",
                                   *state]})]

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> list[str]:
        if obj is not None and obj.source != Schedule.Source.OPERATOR:
            return [*self.readonly_fields, "agent_instance", "schedule_text", "declared"]
        return list(self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.ModelForm, change: bool) -> None:
        if isinstance(form, ScheduleForm):
            assert form.parsed is not None  # clean() succeeded
            definitions.save_operator_schedule(obj, form.cleaned_data["agent"], form.cleaned_data["instance_name"],
                                             form.parsed, request.user)
        elif "enabled" in form.changed_data:
            definitions.set_enabled([obj.pk], obj.enabled)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        definitions.delete(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        declared = queryset.filter(source=Schedule.Source.CODE).count()
        for row in queryset.exclude(source=Schedule.Source.CODE).select_related("instance"):
            definitions.delete(row)
        if declared:
            self.message_user(request, ngettext(
                "Kept %d schedule declared in code: remove it from get_scheduled_tasks() instead.",
                "Kept %d schedules declared in code: remove them from get_scheduled_tasks() instead.", declared,
            ) % declared, messages.WARNING)

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], add: bool = False,
                           change: bool = False, form_url: str = "", obj: Schedule | None = None) -> Any:
        """Offer the instances that exist while the operator types a name (of the global namespace,
        where scheduled prompts run), the schedule's preview, and "Run now", "Pause" or "Resume" on a saved one."""
        context["instance_suggestions"] = (AgentInstance.objects.filter(owner=None).order_by("-updated_at")
                                           .values_list("slug", "name")[:INSTANCE_SUGGESTIONS])
        context["can_run"] = obj is not None and self.has_manage_permission(request)
        if isinstance(context["adminform"].form, ScheduleForm):
            context["preview_url"] = reverse("admin:agents_app_schedule_preview")
        return super().render_change_form(request, context, add, change, form_url, obj)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(request, {**(extra_context or {}), "system_tasks": declared.system_tasks()})

    # --- columns --------------------------------------------------------------------------------
    @admin.display(description="name", ordering="name")
    def schedule_name(self, obj: Schedule) -> str:
        return clipped(obj.name, NAME_CHARS)

    @admin.display(description="agent / instance", ordering="instance__slug")
    def agent_instance(self, obj: Schedule) -> str:
        if obj.source == Schedule.Source.OPERATOR:
            return instance_link(obj.instance)
        return format_html("{}<div class='schedule-source'>{}</div>", instance_link(obj.instance),
                           obj.get_source_display())

    @admin.display(description="schedule")
    def schedule_text(self, obj: Schedule) -> str:
        spec = obj.spec
        text = obj.schedule or spec.get("normalized") or spec.get("type", "")
        if obj.spec.get("kind") == definitions.ONCE:
            text = "once"
        zone = spec.get("timezone")
        return f"{text} ({zone})" if zone and zone.lower() not in text.lower() else text

    @admin.display(description="declared as")
    def declared(self, obj: Schedule) -> str:
        if obj.action == Schedule.Action.PROMPT:
            return obj.prompt or "a prompt function"
        return f"{obj.callback}(payload, ctx)" if obj.action == Schedule.Action.METHOD else "handler(ctx)"

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str:
        if not obj.enabled:
            return format_html("<span class='schedule-paused'>{}</span>", "paused")
        return local_time(obj.next_run_at, obj.spec.get("timezone"))

    @admin.display(description="last run")
    def last_run_summary(self, obj: Schedule) -> str:
        run = obj.last_run
        if run is None:
            return "—"
        run.schedule, run.instance = obj, obj.instance  # for the links, without a query
        failures = obj.consecutive_failures
        streak = format_html("<div class='run-failures'>{}</div>", ngettext(
            "%d failure in a row", "%d failures in a row", failures) % failures) if failures else ""
        return format_html("{} {} {}{}{}", local_time(run.scheduled_for, obj.spec.get("timezone")), status_label(run),
                           run_links(run), streak, run_error(run))

    # --- run now, pause, resume -----------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [path("preview/", wrap(self.preview_view), name=f"{prefix}_preview"),
                path("<path:object_id>/run/", wrap(require_POST(self.run_view)), name=f"{prefix}_run"),
                path("<path:object_id>/enable/", wrap(require_POST(self.enable_view)), name=f"{prefix}_enable"),
                *super().get_urls()]

    def preview_view(self, request: HttpRequest) -> JsonResponse:
        """What the schedule being typed means and its next three runs, or its errors by field.

        Asked by the form's script (``schedules-admin.js``) as the operator types; saves nothing.
        """
        if not self.has_manage_permission(request):
            raise PermissionDenied
        query = request.GET
        schedule = query.get("schedule", "").strip()
        if not schedule:
            return JsonResponse({"ok": False, "errors": {}})
        answer, problems = definitions.preview(query.get("agent", ""), query.get("instance_name", ""), schedule,
                                               query.get("timezone", ""))
        if answer is None:
            return JsonResponse({"ok": False, "errors": problems})
        zone = answer["timezone"]
        meaning = f"{answer['schedule']} ({zone})" if zone else answer["schedule"]
        runs = format_html_join(", ", "{}", ((local_time(moment, zone),) for moment in answer["next_runs"]))
        html = format_html("<span class='schedule-meaning'>{}</span> — next runs, in your time: {}", meaning, runs)
        return JsonResponse({"ok": True, "schedule": answer["schedule"], "timezone": zone,
                             "next_runs": [moment.isoformat() for moment in answer["next_runs"]], "html": html})

    def enable_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Pause" and "Resume" buttons at the top of a schedule's page."""
        if not self.has_manage_permission(request):
            raise PermissionDenied
        schedule = self.get_object(request, object_id)
        if schedule is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        enabled = request.POST.get("enabled") == "1"
        definitions.set_enabled([schedule.pk], enabled)
        self.message_user(request, f"Resumed {schedule.name}: it runs next at its next occurrence from now."
                          if enabled else f"Paused {schedule.name}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:agents_app_schedule_change", args=[schedule.pk]))

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Run now" button of a schedule's page."""
        if not self.has_manage_permission(request):
            raise PermissionDenied
        schedule = self.get_object(request, object_id)
        if schedule is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        self._run(request, [schedule])
        return HttpResponseRedirect(reverse("admin:agents_app_schedule_change", args=[schedule.pk]))

    @admin.action(permissions=["manage"], description="Run now")
    def run_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._run(request, list(queryset))

    def _run(self, request: HttpRequest, rows: list[Schedule]) -> None:
        for row in rows:
            async_to_sync(runs.run_now)(row.pk, actor=request.user)
        self.message_user(request, ngettext("Started %(names)s: its run is on its way to a worker.",
                                            "Started %(names)s: their runs are on their way to a worker.", len(rows))
                          % {"names": ", ".join(row.name for row in rows)}, messages.SUCCESS)

    @admin.action(permissions=["manage"], description="Pause")
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        changed = definitions.set_enabled(queryset.values_list("pk", flat=True), False)
        self.message_user(request, ngettext("Paused %d schedule.", "Paused %d schedules.", changed) % changed)

    @admin.action(permissions=["manage"], description="Resume")
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        changed = definitions.set_enabled(queryset.values_list("pk", flat=True), True)
        self.message_user(request, ngettext("Resumed %d schedule (next run: its next occurrence from now).",
                                            "Resumed %d schedules (next run: their next occurrence from now).",
                                            changed) % changed)


@admin.register(ScheduleRun)
class ScheduleRunAdmin(OperatorOnly, ReadOnlyAdmin):
    """Every run of every schedule, read-only: what ran when, and what came of it."""

    # Five columns fit a 1280 px window beside the navigation and the filters: the trigger is marked
    # in "scheduled for", the error is under the status (cut; all of it in the title), and when it
    # started and finished is on the run's page.
    list_display = ["run", "agent_instance", "scheduled", "status_badge", "links"]
    list_filter = ["status", "trigger"]
    search_fields = ["occurrence_key", "request_id", "instance__name"]
    list_select_related = ["instance__owner", "schedule"]
    show_full_result_count = False

    class Media:
        js = ["agents_app/schedules-admin.js"]
        css = {"all": ["agents_app/admin.css", "agents_app/schedules-admin.css"]}

    @admin.display(description="run", ordering="occurrence_key")
    def run(self, run: ScheduleRun) -> str:
        """The schedule's name (its occurrence key in the title: ``<name>:<scheduled time in ms>``)."""
        return format_html("<span title='{}'>{}</span>", run.occurrence_key, Truncator(run.schedule.name).chars(
            NAME_CHARS))

    @admin.display(description="agent / instance")
    def agent_instance(self, run: ScheduleRun) -> str:
        return clipped(run.instance.address, NAME_CHARS)

    @admin.display(description="scheduled for", ordering="scheduled_for")
    def scheduled(self, run: ScheduleRun) -> str:
        return scheduled_cell(run)

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: ScheduleRun) -> str:
        return format_html("{}{}", status_label(run), run_error(run))

    @admin.display(description="turn")
    def links(self, run: ScheduleRun) -> str:
        return run_links(run)
