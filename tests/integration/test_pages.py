"""Error pages in the site's style, JSON errors for API clients, and the favicon."""

from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client, override_settings


@pytest.fixture
def client_of(make_user: Any) -> Any:
    def logged_in(username: str = "alice", **extra: Any) -> Client:
        client = Client()
        client.force_login(make_user(username, **extra))
        return client

    return logged_in


def page(response: Any) -> str:
    return response.content.decode()


def test_an_unknown_page_is_a_404_page_in_the_sites_style(client_of: Any) -> None:
    response = client_of().get("/no/such/page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert 'id="error-page" data-status="404"' in page(response)
    assert "<h1>Page not found</h1>" in page(response)
    assert "agents_app/chat.css" in page(response)
    assert "Resolver404" not in page(response)


def test_a_refused_conversation_says_why_on_a_403_page(client_of: Any) -> None:
    response = client_of().get("/chat/demo-agent/default/?owner=bob")
    assert response.status_code == 403
    assert "Only staff may open another user&#x27;s conversation" in page(response)


def test_an_unknown_agent_is_a_404_page_that_names_it(client_of: Any) -> None:
    response = client_of().get("/chat/no-such-agent/x/")
    assert response.status_code == 404
    assert "No agent is registered under &#x27;no-such-agent&#x27;" in page(response)


@pytest.mark.parametrize(("path", "headers"), [
    ("/api/no-such-endpoint/", {}),
    ("/agents/demo-agent/x/no-such-thing", {}),
    ("/no/such/page/", {"HTTP_ACCEPT": "application/json"}),
])
def test_api_clients_get_json_errors(client_of: Any, path: str, headers: dict[str, str]) -> None:
    response = client_of().get(path, **headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "Page not found"}


@override_settings(ROOT_URLCONF="tests.support.crash_urls")
@pytest.mark.parametrize(("path", "json"), [("/crash/", False), ("/api/crash/", True)])
def test_a_crash_is_a_500_page_or_json(db: None, path: str, json: bool) -> None:
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 500
    if json:
        assert response.json() == {"detail": "Something went wrong on our side"}
    else:
        assert 'data-status="500"' in page(response)
        assert "a bug" not in page(response)


def test_a_stale_form_gets_a_friendly_csrf_page(db: None) -> None:
    response = Client(enforce_csrf_checks=True).post("/accounts/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403
    assert "This form has expired" in page(response)


def test_the_favicon_is_served(db: None) -> None:
    response = Client().get("/favicon.ico")
    assert (response.status_code, response["Location"]) == (301, "/static/agents_app/favicon.ico")
    with open(finders.find("agents_app/favicon.ico"), "rb") as icon:
        assert icon.read(4) == b"\x00\x00\x01\x00"  # an ICO file
    assert '<link rel="icon" href="/static/agents_app/favicon.svg"' in page(Client().get("/accounts/login/"))


def test_a_bad_request_is_a_400_page_that_keeps_the_reason_to_the_logs(db: None) -> None:
    response = Client().get("/accounts/login/", HTTP_HOST="not-allowed.example")
    assert response.status_code == 400
    assert 'data-status="400"' in page(response)
    assert "not-allowed.example" not in page(response)


@pytest.mark.parametrize("path", ["/api/agents/demo-agent/x%00y/", "/api/agents/demo-agent/x/messages/?owner=%00",
                                  "/admin/agents_app/agentinstance/?q=%00", "/chat/demo-agent/a%00/"])
def test_a_nul_character_in_the_url_is_a_bad_request(client_of: Any, path: str) -> None:
    """PostgreSQL cannot compare one: refused before any lookup (400, in JSON for API clients)."""
    response = client_of("root", is_staff=True, is_superuser=True).get(path)
    assert response.status_code == 400
    if path.startswith("/api/"):
        assert response.json() == {"detail": "Bad request"}
