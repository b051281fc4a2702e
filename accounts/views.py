"""Accounts pages: log in (with links to the others), self sign-up, invitations and their links, and
the notice that logging out leaves.

Password reset and change are Django's own views (``django.contrib.auth.urls``) with this site's
templates.
"""

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required, permission_required
from django.core.mail import send_mail
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from . import invitations
from .forms import InvitationSignupForm, InviteForm, SignupForm


class LoginView(auth_views.LoginView):
    """Django's login, whose page also offers sign-up (when open) and the password reset."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "signup_open": settings.SIGNUP_OPEN}


@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """``SIGNUP_OPEN``: anyone makes an account; otherwise the page does not exist."""
    if not settings.SIGNUP_OPEN:
        raise Http404("Sign-up is closed here: ask a member of staff for an invitation.")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        return _logged_in(request, form)
    return render(request, "accounts/signup.html", {"form": form, "title": "Create an account"})


@login_required
@permission_required("auth.add_user", raise_exception=True)
@require_http_methods(["GET", "POST"])
def invite(request: HttpRequest) -> HttpResponse:
    """Staff who may add users email someone a link to make their account."""
    form = InviteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"]
        link = request.build_absolute_uri(reverse("accounts:invitation", args=[invitations.make_token(email)]))
        context = {"link": link, "inviter": request.user, "days": settings.INVITATION_MAX_AGE.days}
        send_mail("Your invitation to Think for Django", render_to_string("accounts/invitation_email.txt", context),
                  None, [email])
        messages.success(request, f"Invitation sent to {email}.")
        return redirect("accounts:invite")
    return render(request, "accounts/invite.html", {"form": form, "days": settings.INVITATION_MAX_AGE.days})


@require_http_methods(["GET", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The link of an invitation: choose a username and password; the account has the invited email."""
    try:
        email = invitations.email_of(token)
    except invitations.InvalidInvitation as exc:
        raise Http404(str(exc)) from exc
    form = InvitationSignupForm(request.POST or None, email=email)
    if request.method == "POST" and form.is_valid():
        return _logged_in(request, form)
    return render(request, "accounts/signup.html", {"form": form, "title": "Accept your invitation"})


def say_logged_out(sender: type, request: HttpRequest | None, **kwargs: Any) -> None:
    """Leave "You have been logged out." for the page logging out lands on (the login page).

    A ``user_logged_out`` receiver, so every logout says it, ours and the admin's. Messages live
    in a cookie first, so the notice outlives the session that logging out flushes; a request
    without the messages middleware (``Client.logout()`` in tests) just has no notice.
    """
    if request is not None:
        messages.info(request, "You have been logged out.", fail_silently=True)


def _logged_in(request: HttpRequest, form: SignupForm) -> HttpResponse:
    user = form.save()
    login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
    return redirect(settings.LOGIN_REDIRECT_URL)
