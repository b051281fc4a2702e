from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_out


class AccountsConfig(AppConfig):
    """How people get an account: optional self sign-up, staff invitations, password reset."""

    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from .views import say_logged_out

        user_logged_out.connect(say_logged_out, dispatch_uid="accounts.say_logged_out")
