"""The scheduled prompts' admin through Django's test client, as an operator without superuser sees it.

The operator is staff with ``agents_app.manage_schedules`` only. Saving goes through the same
service as the API (``definitions.check_definition`` / ``save_operator_schedule``); "Run now" runs
the prompt (inline in the test settings) as a turn.
"""

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_app import transcript
from agents_app.models import AgentInstance, Schedule, ScheduleRun
from agents_app.schedules import declared
from agents_app.schedules import language as dsl
from tests.agents import ScheduledAgent

LIST = reverse("admin:agents_app_schedule_changelist")
ADD = reverse("admin:agents_app_schedule_add")
FORM = {"name": "daily-report", "agent": "demo-agent", "instance_name": "shop-1",
        "prompt": "Generate the daily report.", "schedule": "every day at 09:00 in Europe/Oslo", "timezone": "",
        "enabled": "on",
        # The inline of runs (read-only, but its management form is posted).
        "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0"}


@pytest.fixture
def operator(make_user: Any) -> Any:
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="manage_schedules", content_type__app_label="agents_app"))
    return user


@pytest.fixture
def client_of(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def errors_of(response: Any) -> dict[str, list[str]]:
    return {field: list(messages) for field, messages in response.context["adminform"].form.errors.items()}


def add(client: Client, **changes: str) -> Any:
    return client.post(ADD, {**FORM, **changes})


@pytest.mark.django_db
def test_an_operator_sees_only_scheduled_prompts_and_adds_one(client_of, operator):
    index = client_of.get(reverse("admin:index")).content.decode()
    assert "Scheduled prompts" in index and "Scheduled runs" in index
    assert "Pending approvals" not in index and "Turns" not in index

    response = add(client_of)
    assert response.status_code == 302, errors_of(response)
    row = Schedule.objects.select_related("instance").get()
    # On the instance of the global namespace (no owner), where scheduled prompts run.
    assert (row.instance.slug, row.instance.name, row.instance.owner, row.created_by) == (
        "demo-agent", "shop-1", None, operator)
    assert (row.source, row.schedule, row.timezone, row.enabled) == ("operator", FORM["schedule"], "", True)
    assert row.next_run_at == dsl.next_occurrence(dsl.parse(FORM["schedule"]), row.created_at)

    listing = client_of.get(LIST).content.decode()
    assert "demo-agent/shop-1" in listing
    assert "every day at 09:00 in Europe/Oslo" in listing
    # The next run, in the reader's zone by the page's script; in the schedule's zone without it.
    local = row.next_run_at.astimezone(dsl.ZoneInfo("Europe/Oslo"))
    assert f"<time class='local-time' datetime='{row.next_run_at.isoformat()}'>" in listing
    assert local.strftime("%Y-%m-%d 09:00 %Z") in listing
    assert "agents_app/schedules-admin.js" in listing


@pytest.mark.django_db
def test_the_instance_may_be_an_existing_one_offered_while_typing(client_of, user):
    existing = AgentInstance.objects.create(slug="demo-agent", name="existing-shop")
    AgentInstance.objects.create(slug="demo-agent", name="users-own", owner=user)
    page = client_of.get(ADD).content.decode()
    assert '<datalist id="schedule-instances">' in page
    assert '<option value="existing-shop" label="demo-agent/existing-shop">' in page
    assert "users-own" not in page  # a user's conversations are theirs, not the operators'
    assert add(client_of, instance_name="existing-shop").status_code == 302
    assert Schedule.objects.get().instance == existing  # not created again


@pytest.mark.django_db
@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"schedule": "every day at 25:00 in Europe/Oslo"}, "schedule",
     'Invalid schedule time "25:00": use HH:MM (00:00 to 23:59), 9am or 9:30pm. Try "every day at 09:00" or '
     '"every day at 9:30pm".'),
    ({"schedule": "evry day at 09:00"}, "schedule",
     'Could not read "evry day at 09:00": "evry" is not understood (did you mean "every"?). Try "every day at '
     '09:00" or "every monday at 9am in Europe/Oslo".'),
    ({"schedule": "every day at 09:00"}, "schedule",
     'Wall-clock schedule "every day at 09:00" requires a timezone or get_default_timezone(): add one, e.g. '
     '"every day at 09:00 in Europe/Oslo"'),
    ({"schedule": "every 1 minutes"}, "schedule", 'Use singular unit for "every 1 minutes"'),
    ({"schedule": "every 15 minutes", "timezone": "Europe/Oslo"}, "schedule",
     "Interval schedules cannot specify a timezone"),
    ({"schedule": "every day at 09:00 in Europe/Oslo", "timezone": "UTC"}, "schedule",
     'Schedule timezone "Europe/Oslo" does not match task timezone "UTC"'),
    ({"schedule": "61 * * * *"}, "schedule", 'Invalid cron expression "61 * * * *": Bad minute'),
    ({"agent": "no-such-agent"}, "agent", "Select a valid choice. no-such-agent is not one of the available choices."),
    ({"instance_name": "a/b"}, "instance_name",
     "Invalid instance name 'a/b': no slash or space, at most 200 characters"),
    ({"name": "daily report"}, "name", 'Invalid scheduled task id "daily report"; use letters, numbers, "_" or "-"'),
    ({"timezone": "Mars/Olympus"}, "timezone",
     "Select a valid choice. Mars/Olympus is not one of the available choices."),
    ({"prompt": ""}, "prompt", "This field is required."),
])
def test_a_bad_schedule_or_agent_is_a_form_error_and_saves_nothing(client_of, changes, field, message):
    response = add(client_of, **changes)
    assert response.status_code == 200
    assert errors_of(response) == {field: [message]}
    assert not Schedule.objects.exists()
    assert not AgentInstance.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("schedule", "weekdays", "wall_clock"), [
    ("every monday at 9am in Europe/Oslo", {0}, "09:00"),
    ("every weekday at 9:30pm in Europe/Oslo", {0, 1, 2, 3, 4}, "21:30"),
    ("every weekend at 10:00 in Europe/Oslo", {5, 6}, "10:00"),
])
def test_weekdays_and_12_hour_times_are_saved(client_of, schedule, weekdays, wall_clock):
    response = add(client_of, schedule=schedule)
    assert response.status_code == 302, errors_of(response)
    row = Schedule.objects.get()
    runs = dsl.next_occurrences(dsl.from_spec(row.spec), row.created_at)
    local = [moment.astimezone(dsl.ZoneInfo("Europe/Oslo")) for moment in [row.next_run_at, *runs]]
    assert {moment.weekday() for moment in local} <= weekdays
    assert {moment.strftime("%H:%M") for moment in local} == {wall_clock}


def preview(client: Client, **query: str) -> Any:
    return client.get(reverse("admin:agents_app_schedule_preview"), query)


@pytest.mark.django_db
def test_the_form_previews_the_next_three_runs_while_the_operator_types(client_of):
    answer = preview(client_of, agent="demo-agent", instance_name="shop-1",
                     schedule="every weekday at 9am in europe/oslo", timezone="").json()
    assert (answer["ok"], answer["schedule"], answer["timezone"]) == (True, "every weekday at 09:00", "Europe/Oslo")
    runs = [datetime.fromisoformat(moment) for moment in answer["next_runs"]]
    assert len(runs) == 3 and runs == sorted(runs) and runs[0] > timezone.now()
    oslo = [moment.astimezone(dsl.ZoneInfo("Europe/Oslo")) for moment in runs]
    assert all(moment.weekday() < 5 and moment.strftime("%H:%M") == "09:00" for moment in oslo)
    assert "local-time" in answer["html"] and answer["next_runs"][0] in answer["html"]

    typo = preview(client_of, agent="demo-agent", instance_name="", schedule="evry day at 09:00")
    assert typo.json() == {"ok": False, "errors": {"schedule": (
        'Could not read "evry day at 09:00": "evry" is not understood (did you mean "every"?). Try "every day at '
        '09:00" or "every monday at 9am in Europe/Oslo".')}}
    zone = preview(client_of, agent="demo-agent", schedule="every day at 09:00 in Europe/Olso").json()
    assert zone["errors"] == {"schedule": 'Invalid timezone "Europe/Olso"; did you mean "Europe/Oslo"?'}
    assert preview(client_of, agent="demo-agent", schedule="").json() == {"ok": False, "errors": {}}
    assert not Schedule.objects.exists() and not AgentInstance.objects.exists()


@pytest.mark.django_db
def test_the_preview_is_for_operators_only(make_user):
    staff = make_user("staffer", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert preview(client, agent="demo-agent", schedule="every 5 minutes").status_code == 403


@pytest.mark.django_db
def test_the_zones_offered_are_real_places_and_a_stored_legacy_zone_stays_selectable(client_of):
    page = client_of.get(ADD).content.decode()
    assert '<option value="Europe/Oslo">' in page and '<option value="UTC">' in page
    for odd in ("Factory", "localtime", "posixrules", "Etc/GMT+5", "EST5EDT", "US/Eastern"):
        assert f'<option value="{odd}">' not in page
    add(client_of, schedule="every day at 09:00", timezone="UTC")
    Schedule.objects.update(timezone="US/Eastern")  # as the API may store it
    row = Schedule.objects.get()
    change = reverse("admin:agents_app_schedule_change", args=[row.pk])
    assert '<option value="US/Eastern" selected>' in client_of.get(change).content.decode()
    assert client_of.post(change, {**FORM, "schedule": "every day at 09:00", "timezone": "US/Eastern"}
                          ).status_code == 302


@pytest.mark.django_db
def test_run_now_and_pause_are_at_the_top_of_the_page(client_of):
    add(client_of)
    row = Schedule.objects.get()
    change = reverse("admin:agents_app_schedule_change", args=[row.pk])
    page = client_of.get(change).content.decode()
    assert page.index('id="run-now-form"') < page.index('id="schedule_form"') < page.index("<fieldset")
    assert page.index('id="enable-form"') < page.index('id="schedule_form"')
    assert '<input type="submit" value="Pause">' in page

    enable = reverse("admin:agents_app_schedule_enable", args=[row.pk])
    paused = client_of.post(enable, {"enabled": "0"}, follow=True)
    assert [m.message for m in paused.context["messages"]] == ["Paused daily-report."]
    assert not Schedule.objects.get().enabled
    assert '<input type="submit" value="Resume">' in paused.content.decode()
    Schedule.objects.update(next_run_at=timezone.now() - timedelta(days=2))
    client_of.post(enable, {"enabled": "1"})
    resumed = Schedule.objects.get()
    assert resumed.enabled and resumed.next_run_at > timezone.now()  # no catch-up run for the pause
    assert client_of.get(enable).status_code == 405


@pytest.mark.django_db
def test_a_name_is_unique_per_instance(client_of):
    assert add(client_of).status_code == 302
    response = add(client_of)
    assert errors_of(response) == {"name": ['demo-agent/shop-1 has a schedule named "daily-report" already']}
    assert add(client_of, instance_name="shop-2").status_code == 302


@pytest.mark.django_db
def test_editing_the_prompt_keeps_the_next_run_and_editing_the_schedule_moves_it(client_of):
    add(client_of)
    row = Schedule.objects.get()
    change = reverse("admin:agents_app_schedule_change", args=[row.pk])
    assert client_of.post(change, {**FORM, "prompt": "Shorter, please."}).status_code == 302
    assert Schedule.objects.get().next_run_at == row.next_run_at
    assert client_of.post(change, {**FORM, "schedule": "0 6 * * *", "timezone": "UTC"}).status_code == 302
    moved = Schedule.objects.get()
    assert (moved.next_run_at.hour, moved.spec["kind"]) == (6, "cron")


@pytest.mark.django_db(transaction=True)
def test_run_now_runs_the_prompt_and_the_list_shows_the_last_run(client_of, operator):
    add(client_of)
    row = Schedule.objects.get()
    page = client_of.get(reverse("admin:agents_app_schedule_change", args=[row.pk])).content.decode()
    assert 'id="run-now-form"' in page
    response = client_of.post(reverse("admin:agents_app_schedule_run", args=[row.pk]), follow=True)
    assert [m.message for m in response.context["messages"]] == [
        "Started daily-report: its run is on its way to a worker."]
    run = ScheduleRun.objects.get()
    assert (run.trigger, run.status, run.triggered_by) == ("manual", "completed", operator)
    user_message, reply = transcript.load(row.instance)
    assert user_message["metadata"]["schedule"] == "daily-report"
    assert reply["parts"][-1]["text"] == "(demo model, offline) You said: Generate the daily report."

    listing = client_of.get(LIST).content.decode()
    assert "<span class='run-status' data-status='completed'>Completed</span>" in listing
    assert f"?instance__id__exact={row.instance_id}&amp;request_id__exact={run.request_id}'>turn</a>" in listing
    assert "href='/chat/demo-agent/shop-1/?owner='>conversation</a>" in listing
    detail = client_of.get(reverse("admin:agents_app_schedule_change", args=[row.pk])).content.decode()
    assert "Recent runs (newest 20)" in detail and "run now" in detail


@pytest.mark.django_db(transaction=True)
def test_a_failing_run_shows_its_error_and_failure_count(client_of):
    add(client_of, prompt="/fail")
    row = Schedule.objects.get()
    client_of.post(LIST, {"action": "run_selected", ACTION_CHECKBOX_NAME: [row.pk]})
    client_of.post(LIST, {"action": "run_selected", ACTION_CHECKBOX_NAME: [row.pk]})
    listing = client_of.get(LIST).content.decode()
    assert "data-status='error'" in listing
    run = ScheduleRun.objects.order_by("-pk").first()
    assert run.error and f"<div class='run-error'><span class='clipped' title='{run.error}'>{run.error[:20]}" in listing
    assert "<div class='run-failures'>2 failures in a row</div>" in listing


@pytest.mark.django_db
def test_pause_and_resume_actions(client_of):
    add(client_of)
    row = Schedule.objects.get()
    Schedule.objects.filter(pk=row.pk).update(next_run_at=timezone.now() - timedelta(days=2))
    response = client_of.post(LIST, {"action": "pause_selected", ACTION_CHECKBOX_NAME: [row.pk]}, follow=True)
    assert [m.message for m in response.context["messages"]][-1] == "Paused 1 schedule."
    assert "<span class='schedule-paused'>paused</span>" in response.content.decode()
    client_of.post(LIST, {"action": "resume_selected", ACTION_CHECKBOX_NAME: [row.pk]})
    row.refresh_from_db()
    assert row.enabled and row.next_run_at > timezone.now()  # no catch-up run for the pause


@pytest.mark.django_db
def test_code_schedules_are_listed_but_only_switched_on_and_off(client_of):
    ScheduledAgent.TASKS = {"digest": {"schedule": "every 2 hours", "prompt": "Digest?"}}
    try:
        instance = AgentInstance.objects.create(slug="scheduled-agent", name="coded")
    finally:
        ScheduledAgent.TASKS = {}
    row = Schedule.objects.get(instance=instance)
    change = reverse("admin:agents_app_schedule_change", args=[row.pk])
    page = client_of.get(change).content.decode()
    assert 'name="enabled"' in page and 'name="prompt"' not in page and 'name="schedule"' not in page
    assert "get_scheduled_tasks()" in page and "Digest?" in page
    assert client_of.post(change, {"enabled": "", **{k: v for k, v in FORM.items() if k.startswith("runs-")}},
                          ).status_code == 302
    assert not Schedule.objects.get(pk=row.pk).enabled
    assert 'class="deletelink"' not in page
    delete = reverse("admin:agents_app_schedule_delete", args=[row.pk])
    assert client_of.post(delete, {"post": "yes"}).status_code == 403


@pytest.mark.django_db
def test_system_tasks_are_shown_read_only_below_the_list(client_of):
    listing = client_of.get(LIST).content.decode()
    tasks = listing.split('id="system-tasks"', 1)[1]
    for task in declared.system_tasks():
        assert f"<td>{task['name']}</td><td><code>{task['task']}</code></td>" in tasks
    assert "<input" not in tasks.split("</table>", 1)[0]


@pytest.mark.django_db
def test_staff_without_the_permission_see_nothing_of_it(make_user):
    staff = make_user("staffer", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert "Scheduled prompts" not in client.get(reverse("admin:index")).content.decode()
    assert client.get(LIST).status_code == 403
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, FORM).status_code == 403
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_the_list_costs_the_same_with_many_schedules(client_of, user, django_assert_max_num_queries):
    instances = AgentInstance.objects.bulk_create(
        [AgentInstance(slug="demo-agent", name=f"shop-{i}", owner=user) for i in range(60)])
    spec = dsl.to_spec(dsl.parse("every 1 hour"))
    Schedule.objects.bulk_create([Schedule(name="hourly", instance=i, prompt="p", schedule="every 1 hour", spec=spec,
                                           next_run_at=timezone.now()) for i in instances])
    with django_assert_max_num_queries(8):
        assert client_of.get(LIST).status_code == 200
