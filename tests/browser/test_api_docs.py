"""The API's documentation in Chromium with no network but this server: Swagger UI and Redoc load
their scripts from /static/ (drf-spectacular-sidecar) and render every operation."""

from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.browser.pages import Live

pytestmark = pytest.mark.browser


@pytest.fixture
def offline_page(browser: Browser) -> tuple[Page, list[str]]:
    """An anonymous page whose requests to any other host fail; returns it and those requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    elsewhere: list[str] = []

    def only_this_server(route: Route) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", only_this_server)
    yield context.new_page(), elsewhere
    context.close()


def test_swagger_ui_renders_every_operation_offline(offline_page: tuple[Page, list[str]], live: Live) -> None:
    page, elsewhere = offline_page
    page.goto(f"{live.http}/api/docs/")
    expect(page.locator(".opblock-summary-path[data-path='/api/agents/{slug}/{name}/messages/']")).to_have_count(2)
    # Every operation of the schema the page was built from, each once.
    schema = page.request.get(f"{live.http}/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"}).json()
    operations = sum(method in {"get", "post", "put", "patch", "delete"}
                     for path in schema["paths"].values() for method in path)
    expect(page.locator(".opblock")).to_have_count(operations)
    expect(page.locator(".information-container .title")).to_contain_text("Think for Django API")
    # The description is Markdown, rendered: a code span, not doubled backticks.
    expect(page.locator(".information-container code").first).to_be_visible()
    assert "``" not in page.locator(".information-container").inner_text()
    assert elsewhere == []


def test_redoc_renders_the_operations_offline(offline_page: tuple[Page, list[str]], live: Live) -> None:
    page, elsewhere = offline_page
    page.goto(f"{live.http}/api/redoc/")
    expect(page.get_by_role("heading", name="Send a message")).to_be_visible()
    expect(page.get_by_role("heading", name="Pending approvals, oldest first")).to_be_visible()
    assert elsewhere == []
