from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """How people get an account: optional self sign-up, staff invitations, password reset."""

    name = "accounts"
    verbose_name = "Accounts"
