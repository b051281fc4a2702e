from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo agent's own table (refunds its ``refund_order`` action made)."""

    name = "agents_app.demo"
    label = "demo"
    verbose_name = "Demo agent"
    default_auto_field = "django.db.models.BigAutoField"
