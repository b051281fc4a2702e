# The four foreign keys keep no index of their own: an index each of their models already has
# starts with the column (docs/decisions.md#foreign-key-indexes). Django's AlterField would copy
# each table on SQLite to drop an index; the index is dropped by name instead (the same name on
# SQLite and PostgreSQL), and the models' state is changed on its own.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (table, column, index name as Django created it)
COVERED = [
    ("agents_app_chatmessage", "instance_id", "agents_app_chatmessage_instance_id_c5af0118"),
    ("agents_app_streamrecord", "instance_id", "agents_app_streamrecord_instance_id_9b00c3aa"),
    ("agents_app_streamsegment", "stream_id", "agents_app_streamsegment_stream_id_589bef23"),
    ("agents_app_turnusage", "user_id", "agents_app_turnusage_user_id_f8e3d71c"),
]


class Migration(migrations.Migration):

    dependencies = [
        ('agents_app', '0012_usage_and_quotas'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{index}"',
                                  reverse_sql=f'CREATE INDEX "{index}" ON "{table}" ("{column}")')
                for table, column, index in COVERED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='chatmessage',
                    name='instance',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='agents_app.agentinstance'),
                ),
                migrations.AlterField(
                    model_name='streamrecord',
                    name='instance',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='streams', to='agents_app.agentinstance'),
                ),
                migrations.AlterField(
                    model_name='streamsegment',
                    name='stream',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='segments', to='agents_app.streamrecord'),
                ),
                migrations.AlterField(
                    model_name='turnusage',
                    name='user',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
            ],
        ),
    ]
