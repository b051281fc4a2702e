"""Every hand-written SQL statement is in ``agents_app.statements``, each a named function.

The texts of the named statements are pinned here on SQLite (PostgreSQL runs the same text:
``tests/crossprocess/test_statements_databases.py`` runs them on both).
"""

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, models

from agents_app import statements
from agents_app.models import (
    AgentInstance,
    ChatMessage,
    MCPServerConfig,
    RecoveryIncident,
    RequestContext,
    StreamRecord,
    StreamSegment,
    Turn,
)

PACKAGE = Path(statements.__file__).parent
SQL = re.compile(r"""f["'](SELECT|INSERT|UPDATE|DELETE)\b|noqa: S608""")


def test_no_sql_is_written_outside_statements() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py")) if path.name != "statements.py" and "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1) if SQL.search(line)
    ]
    assert found == []


def test_named_statements_read_what_they_say() -> None:
    assert statements.instance_queue_state(AgentInstance).build(connection) == (
        'SELECT i."generation", i."overlap_sequence" FROM "agents_app_agentinstance" i WHERE i."id" = %s')
    message = statements.Columns(ChatMessage, "m", ("id", "message_id", "position", "data"))
    assert statements.queue_user_and_transcript(Turn, MCPServerConfig, RequestContext, message).build(connection) == (
        'SELECT q.newest, q.active, q.owned, q.kept, m."id", m."message_id", m."position", m."data" FROM (SELECT '
        '(SELECT MAX(t."generation") FROM "agents_app_turn" t WHERE t."instance_id" = %s '
        'AND t."status" IN (%s, %s)) AS newest, (SELECT COUNT(*) FROM "agents_app_turn" u WHERE u."user_id" = %s '
        'AND u."status" IN (%s, %s)) AS active, EXISTS (SELECT 1 FROM "agents_app_mcpserverconfig" o '
        'WHERE o."instance_id" = %s) AS owned, EXISTS (SELECT 1 FROM "agents_app_requestcontext" c '
        'WHERE c."instance_id" = %s AND c."body" IS %s AND c."client_tools" IS %s) AS kept) q '
        'LEFT JOIN "agents_app_chatmessage" m ON m."instance_id" = %s ORDER BY m."position"')
    # The status a partial index's condition names is written out (``statements._choice``).
    assert statements.latest_turn(Turn, Turn.Status.QUEUED).build(connection) == (
        'SELECT t."id", t."status", (SELECT q."id" FROM "agents_app_turn" q WHERE q."instance_id" = %s '
        'AND q."status" = \'queued\' LIMIT 1) AS queued FROM "agents_app_turn" t WHERE t."instance_id" = %s '
        'ORDER BY t."id" DESC LIMIT 1')
    newer = statements.newer_turn_and_queued(Turn, Turn.Status.QUEUED)
    assert statements._update_returning_sql(Turn, ("status",), ("pk",), newer, connection.alias) == (
        'UPDATE "agents_app_turn" SET "status" = %s WHERE "id" = %s RETURNING (SELECT n."id" FROM "agents_app_turn" n '
        'WHERE n."instance_id" = "agents_app_turn"."instance_id" AND n."id" > "agents_app_turn"."id" ORDER BY n."id" '
        'DESC LIMIT 1), (SELECT n."status" FROM "agents_app_turn" n WHERE n."instance_id" = '
        '"agents_app_turn"."instance_id" AND n."id" > "agents_app_turn"."id" ORDER BY n."id" DESC LIMIT 1), '
        '(SELECT q."id" FROM "agents_app_turn" q WHERE q."instance_id" = "agents_app_turn"."instance_id" '
        'AND q."status" = \'queued\' LIMIT 1)')
    assert statements.transcript_rows(message).build(connection) == (
        'SELECT m."id", m."message_id", m."position", m."data" FROM "agents_app_chatmessage" m '
        'WHERE m."instance_id" = %s ORDER BY m."position"')
    assert statements.row_by_pk(statements.Columns(ChatMessage, "m", ("data", "position"))).build(connection) == (
        'SELECT m."data", m."position" FROM "agents_app_chatmessage" m WHERE m."id" = %s')
    assert statements._insert_sql(ChatMessage, False, 1, True, connection.alias, unless_taken=True) == (
        'INSERT INTO "agents_app_chatmessage" ("instance_id", "message_id", "role", "position", "data", '
        '"created_at", "updated_at") VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING '
        '"agents_app_chatmessage"."id"')
    assert statements.last_position(ChatMessage).build(connection) == (
        'SELECT MAX(m."position") FROM "agents_app_chatmessage" m WHERE m."instance_id" = %s')
    save = statements.save_message(ChatMessage)
    assert save.build(connection) == (
        'INSERT INTO "agents_app_chatmessage" ("instance_id", "message_id", "role", "position", "data", '
        '"created_at", "updated_at") VALUES (%s, %s, %s, (SELECT COALESCE(MAX("position"), -1) + 1 '
        'FROM "agents_app_chatmessage" WHERE "instance_id" = %s), %s, %s, %s) ON CONFLICT ("instance_id", '
        '"message_id") DO UPDATE SET "role" = EXCLUDED."role", "data" = EXCLUDED."data", '
        '"updated_at" = EXCLUDED."updated_at"')
    assert save.params == ("instance", "message_id", "role", "instance", "data", "created_at", "updated_at")


def test_joined_statements_read_every_column_in_order() -> None:
    instance = statements.Columns(AgentInstance, "i")
    flag = statements.turn_instance_and_cancel_flag(Turn, instance, MCPServerConfig).build(connection)
    assert flag == (f'SELECT {instance.bound(connection).select}, EXISTS (SELECT 1 FROM "agents_app_mcpserverconfig" o '
                    'WHERE o."instance_id" = i."id"), t."cancel_requested" FROM "agents_app_turn" t '
                    'JOIN "agents_app_agentinstance" i ON i."id" = t."instance_id" WHERE t."id" = %s')
    stream = statements.Columns(StreamRecord, "s")
    replay = statements.stream_and_segments(stream, StreamSegment).build(connection)
    s = stream.bound(connection).select
    assert replay == (
        f'SELECT {s}, g."first_index", g."bodies" FROM (SELECT {s} FROM "agents_app_streamrecord" s '
        'WHERE s."instance_id" = %s AND s."request_id" = %s ORDER BY s."id" DESC LIMIT 1) s '
        'LEFT JOIN "agents_app_streamsegment" g ON g."stream_id" = s."id" ORDER BY g."first_index"')
    turn, user = statements.Columns(Turn, "t"), statements.Columns(get_user_model(), "u")
    head = statements.queued_head(turn, user, AgentInstance, Turn.Status.QUEUED).build(connection)
    assert head == (
        f'SELECT {turn.bound(connection).select}, {user.bound(connection).select}, i."generation", '
        'i."overlap_sequence" FROM "agents_app_turn" t JOIN "agents_app_agentinstance" i ON i."id" = t."instance_id" '
        'LEFT JOIN "auth_user" u ON u."id" = t."user_id" WHERE t."instance_id" = %s '
        'AND t."status" = \'queued\' ORDER BY t."priority" DESC, t."id" ASC LIMIT 1')


@pytest.mark.parametrize("value", ["", "Queued", "queued'", "a b", "x'; DROP TABLE t; --"])
def test_only_a_choice_constant_is_written_into_a_statement(value: str) -> None:
    with pytest.raises(ValueError, match="not a choice constant"):
        statements._choice(value)


def test_resume_state_reads_the_newest_of_each_in_one_statement() -> None:
    stream = statements.Columns(StreamRecord, "s", ("id", "request_id"))
    turn = statements.Columns(Turn, "t", ("id", "status"))
    assert statements.resume_state(AgentInstance, stream, turn, RecoveryIncident).build(connection) == (
        'SELECT i."terminal_request_id", s."id", s."request_id", t."id", t."status", p."id", p."request_id", '
        'r."root_request_id" FROM "agents_app_agentinstance" i '
        'LEFT JOIN "agents_app_streamrecord" s ON s."id" = (SELECT MAX(n."id") FROM "agents_app_streamrecord" n '
        'WHERE n."instance_id" = i."id" AND n."status" IN (%s)) '
        'LEFT JOIN "agents_app_turn" t ON t."id" = s."turn_id" '
        'LEFT JOIN "agents_app_turn" p ON p."id" = (SELECT MAX(n."id") FROM "agents_app_turn" n '
        'WHERE n."instance_id" = i."id" AND n."status" IN (%s, %s)) '
        'LEFT JOIN "agents_app_recoveryincident" r ON r."id" = (SELECT MAX(n."id") '
        'FROM "agents_app_recoveryincident" n WHERE n."instance_id" = i."id" AND n."status" IN (%s, %s, %s)) '
        'WHERE i."id" = %s')


def test_an_instance_of_some_columns_in_any_order_has_them_and_defers_the_rest() -> None:
    columns = statements.Columns(Turn, "t", ("worker", "id", "status"))
    turn = columns.instance([0, "host:1 c", 7, "running"], 1, connection)
    assert turn is not None
    assert (turn.pk, turn.worker, turn.status) == (7, "host:1 c", "running")
    assert turn.get_deferred_fields() >= {"request_id", "heartbeat_at"}


def test_a_json_column_reads_as_the_orm_reads_it() -> None:
    """The scanner's shortcut (``statements._json_reader``) gives Django's value, or its error, for
    every kind of text: what the project stores, and what it never writes."""
    import json

    from django.db import models

    field = ChatMessage._meta.get_field("data")
    [read] = statements._json_reader(field, connection)
    expression = field.get_col(ChatMessage._meta.db_table)
    texts = [json.dumps({"id": "m1", "parts": [{"type": "text", "text": "é \ud800 \u2028"}]}), '"text"', "[1, 2]",
             "12345678901234567890123", "null", ' {"a": 1}', '{"a": 1} ', "{'a': 1}", "1, 2", "", "NaN",
             "[" * 5000, None]
    for text in texts:
        outcomes = []
        for convert in (read, field.from_db_value):
            try:
                outcomes.append(("value", convert(text, expression, connection)))
            except Exception as exc:  # the same error on both sides is what is compared
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1], text
    # A field with a decoder of its own keeps Django's converter.
    decoded = models.JSONField(decoder=json.JSONDecoder)
    assert statements._json_reader(decoded, connection) == decoded.get_db_converters(connection)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a naive datetime, warned of on both sides
def test_a_written_value_is_the_parameter_the_orm_makes() -> None:
    """``statements._db_value`` shortens ``get_db_prep_save`` for the values a turn writes: for
    every field of the app's models and a value of each kind, the same parameter (a JSON value:
    the same JSON; the text is compact, as frames are written)."""
    import datetime
    import json
    import zoneinfo

    from django.apps import apps
    from django.db import connections
    from django.utils import timezone

    wrapper = connections["default"]
    now = timezone.now()
    values = [None, "", "text é", 0, 7, True, False, 2.5, now, now.replace(tzinfo=None),
              now.astimezone(zoneinfo.ZoneInfo("Europe/Paris")), datetime.date(2026, 12, 6),
              {"a": [1, 2.5, None, "é \u2028"]}, ["x", {"y": 1}], {}]
    checked = 0
    for model in apps.get_app_config("agents_app").get_models():
        for field in model._meta.concrete_fields:
            for value in values:
                try:
                    expected = field.get_db_prep_save(value, wrapper)
                except Exception as exc:  # what the field refuses, it still refuses
                    refused = type(exc)
                    try:
                        statements._db_value(field, value, wrapper)
                    except refused:
                        continue
                    raise AssertionError(f"{field} took {value!r}, which get_db_prep_save refuses") from None
                found = statements._db_value(field, value, wrapper)
                if isinstance(field, models.JSONField) and expected is not None:
                    assert json.loads(found) == json.loads(expected), (field, value)
                else:
                    assert (type(found), found) == (type(expected), expected), (field, value)
                checked += 1
    assert checked > 500
