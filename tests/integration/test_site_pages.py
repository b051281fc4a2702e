"""The site's own pages as a newcomer meets them: the top bar, logging in and out, the conversation index.

Server-rendered HTML without JavaScript, read through Django's test client as text (tags
stripped, whitespace collapsed): what the page says, not how it is marked up.
"""

import html
import re
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from agents_app.models import AgentInstance

LOGGED_OUT = "You have been logged out."


def text(fragment: str) -> str:
    """What a reader sees of some HTML: its text, unescaped, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def top_bar(page: str) -> str:
    return text(page.split('<nav class="account"', 1)[1].split("</nav>", 1)[0].split(">", 1)[1])


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_top_bar_says_who_is_signed_in_and_what_each_link_does(make_user: Any) -> None:
    admin = make_user("admin", is_staff=True)
    admin.user_permissions.add(Permission.objects.get(codename="add_user", content_type__app_label="auth"))
    assert top_bar(logged_in(admin).get("/").content.decode()) == \
        "Signed in as admin · Invite someone · Admin site · Log out"
    assert top_bar(logged_in(make_user("alice")).get("/").content.decode()) == "Signed in as alice · Log out"
    # A staff member who may not invite has the admin link only.
    assert top_bar(logged_in(make_user("sam", is_staff=True)).get("/").content.decode()) == \
        "Signed in as sam · Admin site · Log out"


def test_a_conversation_updated_under_a_minute_ago_was_updated_just_now(user: Any) -> None:
    fresh = AgentInstance.objects.create(slug="demo-agent", name="fresh", owner=user)
    older = AgentInstance.objects.create(slug="demo-agent", name="older", owner=user)
    AgentInstance.objects.filter(pk=older.pk).update(updated_at=timezone.now() - timedelta(minutes=5, seconds=3))
    page = logged_in(user).get("/").content.decode()
    listing = page.split('<ul class="instances"', 1)[1].split("</ul>", 1)[0]
    rows = {name: text(row.split("</li>", 1)[0]) for row in listing.split("<li>")[1:]
            for name in (fresh.name, older.name) if f"/ {name}</a>" in row}
    assert rows["fresh"] == "demo-agent / fresh updated just now"
    assert rows["older"] == "demo-agent / older updated 5 minutes ago"


def test_a_failed_login_keeps_the_username_and_not_the_password(make_user: Any) -> None:
    make_user("alice")
    response = Client().post("/accounts/login/", {"username": "alice", "password": "wrong secret"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Your username and password didn't match." in text(page)
    [username] = re.findall(r'<input[^>]*name="username"[^>]*>', page)
    assert 'value="alice"' in username
    [password] = re.findall(r'<input[^>]*name="password"[^>]*>', page)
    assert "value=" not in password and "wrong secret" not in page


def test_a_failed_login_escapes_the_username_it_keeps(db: None) -> None:
    page = Client().post("/accounts/login/", {"username": '"><b>x', "password": "pw"}).content.decode()
    assert 'value="&quot;&gt;&lt;b&gt;x"' in page and "<b>x" not in page


def test_logging_out_says_so_once(user: Any) -> None:
    client = logged_in(user)
    response = client.post("/accounts/logout/", follow=True)
    assert response.redirect_chain == [("/accounts/login/", 302)]
    assert LOGGED_OUT in text(response.content.decode())
    assert response.context["user"].is_anonymous
    assert LOGGED_OUT not in text(client.get("/accounts/login/").content.decode())


def test_logging_out_of_the_admin_lands_on_the_same_notice(make_user: Any) -> None:
    client = logged_in(make_user("root", is_staff=True, is_superuser=True))
    response = client.post("/admin/logout/", follow=True)
    assert LOGGED_OUT in text(response.content.decode())
