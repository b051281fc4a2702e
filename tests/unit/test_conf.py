"""``agents_app.conf.get``: a value read once is kept, and a setting changed with Django's
``setting_changed`` signal is read again."""

from typing import Any

from django.test import override_settings

from agents_app import conf


def test_a_kept_value_follows_every_way_a_setting_changes(settings: Any) -> None:
    name = "AGENT_MAX_ACTIVE_TURNS_PER_USER"
    default = conf.DEFAULTS[name]
    assert conf.get(name) == default
    assert conf.get(name) == default  # kept
    with override_settings(**{name: 3}):
        assert conf.get(name) == 3
    assert conf.get(name) == default
    setattr(settings, name, 5)  # pytest-django's fixture, as the other tests change settings
    assert conf.get(name) == 5
