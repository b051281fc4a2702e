# On PostgreSQL, a change of a turn's status notifies channel "agents_app_turns" with the turn's
# instance: waits for turns listen there instead of polling (agents_app/waits.py). NOTIFY is sent at
# commit, once per instance and transaction. SQLite has no NOTIFY: nothing is made there.

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION agents_app_turn_status_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agents_app_turns', NEW.instance_id::text);
    RETURN NULL;
END
$$
"""
TRIGGER = """
CREATE TRIGGER agents_app_turn_status_changed AFTER UPDATE OF status ON agents_app_turn
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION agents_app_turn_status_changed()
"""
DROP = ("DROP TRIGGER IF EXISTS agents_app_turn_status_changed ON agents_app_turn",
        "DROP FUNCTION IF EXISTS agents_app_turn_status_changed()")


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION)
        schema_editor.execute(TRIGGER)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('agents_app', '0013_covered_foreign_key_indexes'),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
