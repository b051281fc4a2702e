"""Accounts URLs, mounted at ``/accounts/`` beside Django's own (password reset and change)."""

from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("invite/", views.invite, name="invite"),
    path("invitation/<str:token>/", views.invitation, name="invitation"),
]
