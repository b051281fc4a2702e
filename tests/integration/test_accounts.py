"""How people get an account: optional sign-up, staff invitations by email, password reset."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core import mail
from django.test import Client, override_settings

from accounts import invitations

NEW_ACCOUNT = {"username": "newcomer", "password1": "a long enough secret", "password2": "a long enough secret"}


def link_in(message: Any) -> str:
    return re.search(r"https?://[^/\s]+(/\S+)", message.body).group(1)


@pytest.fixture
def inviter(make_user: Any) -> Client:
    """A staff member who may add users (``auth.add_user``), logged in."""
    staff = make_user("sam", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="add_user", content_type__app_label="auth"))
    client = Client()
    client.force_login(staff)
    return client


# --------------------------------------------------------------------------------------- sign-up
def test_sign_up_is_closed_by_default(db: None) -> None:
    response = Client().get("/accounts/signup/")
    assert response.status_code == 404
    assert "ask a member of staff for an invitation" in response.content.decode()
    login = Client().get("/accounts/login/").content.decode()
    assert 'id="signup-link"' not in login
    assert "Ask a member of staff for an invitation" in login


@override_settings(SIGNUP_OPEN=True)
def test_open_sign_up_makes_an_account_and_logs_in(db: None) -> None:
    client = Client()
    assert 'id="signup-link"' in client.get("/accounts/login/").content.decode()
    response = client.post("/accounts/signup/", {**NEW_ACCOUNT, "email": "new@example.com"})
    assert (response.status_code, response["Location"]) == (302, "/")
    assert client.get("/").context["user"].username == "newcomer"
    assert get_user_model().objects.get(username="newcomer").email == "new@example.com"


@override_settings(SIGNUP_OPEN=True)
def test_sign_up_refuses_a_taken_email_and_a_weak_password(make_user: Any) -> None:
    make_user("old", email="taken@example.com")
    response = Client().post("/accounts/signup/", {**NEW_ACCOUNT, "email": "TAKEN@example.com"})
    assert response.status_code == 200
    assert "There is already an account with this email address." in response.content.decode()
    response = Client().post("/accounts/signup/", {**NEW_ACCOUNT, "email": "x@example.com", "password1": "short",
                                                   "password2": "short"})
    assert "too short" in response.content.decode()
    assert not get_user_model().objects.filter(username="newcomer").exists()


# --------------------------------------------------------------------------------------- invitations
def test_an_invitation_link_makes_one_account_with_the_invited_email(inviter: Client) -> None:
    response = inviter.post("/accounts/invite/", {"email": "guest@example.com"})
    assert (response.status_code, response["Location"]) == (302, "/accounts/invite/")
    [message] = mail.outbox
    assert message.to == ["guest@example.com"]
    assert "sam invites you" in message.body
    link = link_in(message)
    guest = Client()
    page = guest.get(link)
    assert page.status_code == 200
    assert 'value="guest@example.com"' in page.content.decode()
    # A changed email field is ignored: the account gets the invited address.
    response = guest.post(link, {**NEW_ACCOUNT, "email": "other@example.com"})
    assert response.status_code == 302
    assert get_user_model().objects.get(username="newcomer").email == "guest@example.com"
    again = Client().get(link)
    assert again.status_code == 404
    assert "This invitation was used already." in again.content.decode()


def test_who_may_invite(make_user: Any) -> None:
    anonymous = Client().get("/accounts/invite/")
    assert (anonymous.status_code, anonymous["Location"]) == (302, "/accounts/login/?next=/accounts/invite/")
    staff = Client()
    staff.force_login(make_user("plain-staff", is_staff=True))
    assert staff.get("/accounts/invite/").status_code == 403
    assert 'id="invite-link"' not in staff.get("/").content.decode()


def test_the_invite_link_is_in_the_nav_of_who_may_invite(inviter: Client) -> None:
    assert 'id="invite-link"' in inviter.get("/").content.decode()


def test_inviting_an_existing_account_is_refused(inviter: Client, make_user: Any) -> None:
    make_user("member", email="member@example.com")
    response = inviter.post("/accounts/invite/", {"email": "member@example.com"})
    assert "There is already an account with this email address." in response.content.decode()
    assert mail.outbox == []


@pytest.mark.parametrize(("token", "why"), [
    ("forged", "This is not a valid invitation link."),
    (None, "This invitation has expired. Ask for a new one."),
])
def test_a_forged_or_expired_invitation_is_refused(db: None, token: str | None, why: str) -> None:
    with override_settings(INVITATION_MAX_AGE=timedelta(seconds=-1)):
        response = Client().get(f"/accounts/invitation/{token or invitations.make_token('late@example.com')}/")
    assert response.status_code == 404
    assert why in response.content.decode()


# --------------------------------------------------------------------------------------- password reset
def test_password_reset_by_email(make_user: Any) -> None:
    make_user("forgetful", email="me@example.com")
    client = Client()
    form = client.get("/accounts/password_reset/")
    assert 'id="password-reset-form"' in form.content.decode()
    assert client.post("/accounts/password_reset/", {"email": "me@example.com"})["Location"] == (
        "/accounts/password_reset/done/")
    [message] = mail.outbox
    set_password = client.get(link_in(message), follow=True)
    assert 'id="set-password-form"' in set_password.content.decode()
    done = client.post(set_password.redirect_chain[-1][0], {"new_password1": "brand new secret",
                                                           "new_password2": "brand new secret"})
    assert done["Location"] == "/accounts/reset/done/"
    assert Client().login(username="forgetful", password="brand new secret")


def test_the_login_page_links_the_password_reset(db: None) -> None:
    assert 'href="/accounts/password_reset/" id="forgot-password"' in Client().get("/accounts/login/").content.decode()


def test_a_used_or_forged_reset_link_says_so(db: None) -> None:
    page = Client().get("/accounts/reset/MQ/set-password/", follow=True).content.decode()
    assert "This link does not work any more" in page
