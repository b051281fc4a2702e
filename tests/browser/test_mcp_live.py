"""MCP servers in Chromium: the chat page's panel of the instance's servers, kept live from
``cf_agent_mcp_servers`` frames, and the admin's MCP pages.

This module runs a stack of its own, as ``make run`` does: the demo MCP server in its own
process and a live server whose demo agent declares it (``DEMO_MCP_URL``). A turn connects the
server (the panel turns ready with its tools); a staff member with ``manage_mcp_servers`` adds a
runtime server in the admin and removes it again, and the open chat page follows each change
without a reload.
"""

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.conftest import TIMEOUT_MS
from tests.browser.pages import ECHO, PASSWORD, USERNAME, Live, assistant_texts, open_chat, send_message
from tests.support.demo_mcp import DemoMcpServer
from tests.support.live import LiveStack, RedisServer, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

SERVER = "demo-tools"
CALL = '/tool convert_units {"value": 10, "from_unit": "km", "to_unit": "mi"}'
REPLY = "convert_units returned 10 km = 6.214 mi."
# Staff who may add and remove MCP servers and read instances (their page lists the servers).
MANAGER = "mcp-manager"
MANAGER_SEED = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
user = get_user_model().objects.create_user({MANAGER!r}, password={PASSWORD!r}, is_staff=True)
user.user_permissions.add(*Permission.objects.filter(codename__in=["manage_mcp_servers", "view_agentinstance"]))
"""
# A header whose reference names a variable nobody set: the server's connection fails on it.
MISSING = "DEMO_MCP_MISSING_TOKEN"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The browser tests' stack, plus the demo MCP server the demo agent declares."""
    workdir = tmp_path_factory.mktemp("browser-mcp")
    redis = RedisServer(workdir)
    mcp = DemoMcpServer(workdir)
    stack = LiveStack(workdir, redis.url, extra_env={"DEMO_MCP_URL": mcp.url,
                                                      "AGENT_MCP_SECRET_NAMES": f"env:{MISSING}"})
    try:
        stack.create_user(USERNAME, PASSWORD)
        stack.manage("shell", "-c", MANAGER_SEED)
        yield Live(stack, stack.start_server())
    finally:
        stack.stop()
        mcp.stop()
        redis.stop()


@pytest.fixture
def admin(browser: Browser, cookies_of: Callable[[str], Any]) -> Iterator[Page]:
    """A page of the MCP manager (staff), at a 1280 px wide window: the admin's pages."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, storage_state=cookies_of(MANAGER))
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx.new_page()
    ctx.close()


def server_item(page: Page, name: str = SERVER) -> Locator:
    return page.locator(f"#mcp-servers .mcp-server[data-id='{name}']")


def instance_pk(live: Live, room: str) -> str:
    code = (f"from agents_app.models import AgentInstance as A; "
            f"print(A.objects.get(slug='demo-agent', name={room!r}, owner__username={USERNAME!r}).pk)")
    return live.stack.manage("shell", "-c", code).split()[-1]


def test_the_chat_page_shows_the_declared_server_and_follows_its_state(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    panel = page.locator("#mcp-servers")
    expect(panel).to_be_visible()
    item = server_item(page)
    expect(item.locator(".mcp-name")).to_have_text(SERVER)
    expect(item).to_have_attribute("data-state", "not-connected")
    expect(panel.locator(".mcp-summary")).to_have_text("0 of 1 ready")

    send_message(page, CALL)
    wait_until(lambda: assistant_texts(page)[-1:] == [REPLY], "the reply after the MCP tool", timeout=30, page=page)
    expect(item).to_have_attribute("data-state", "ready")
    expect(item.locator(".mcp-counts")).to_have_text("2 tools · 1 prompt · 1 resource")
    expect(item.locator(".mcp-tools")).to_have_text("convert_units, count_words")
    expect(item.locator(".mcp-error")).to_have_count(0)
    expect(panel.locator(".mcp-summary")).to_have_text("1 of 1 ready")
    expect(page.locator(".msg.assistant .part.tool[data-tool=convert_units] .tool-io.output pre")).to_contain_text(
        "10 km = 6.214 mi")

    # A reload (and any other tab) starts from the stored state: ready at once.
    page.reload()
    page.wait_for_selector("#status[data-state=connected]")
    expect(server_item(page)).to_have_attribute("data-state", "ready")
    assert page.evaluate("() => window.thinkChat.mcpServers().servers")[SERVER]["state"] == "ready"


def test_a_server_added_in_the_admin_shows_on_the_open_chat_and_goes_when_removed(
        page: Page, admin: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, "hello")
    wait_until(lambda: assistant_texts(page)[-1:] == [f"{ECHO}hello"], "the first reply", timeout=30, page=page)
    expect(server_item(page)).to_have_attribute("data-state", "ready")
    pk = instance_pk(live, room)

    admin.goto(f"{live.http}/admin/agents_app/agentinstance/{pk}/change/")
    admin.click("#add-mcp-server")
    expect(admin.locator("#id_instance")).to_have_value(pk)
    admin.fill("#id_name", "broken")
    admin.fill("#id_url", f"http://127.0.0.1:{free_port()}/mcp")
    admin.fill("#id_headers_text", "Authorization: Bearer s3cret")
    admin.click("input[name=_save]")
    expect(admin.locator(".field-headers_text .errorlist")).to_contain_text("not a reference")
    admin.fill("#id_headers_text", f"Authorization: Bearer env:{MISSING}")
    admin.click("input[name=_save]")

    # The admin connected once, and the open chat got every change without a reload.
    expect(admin.locator(".messagelist")).to_contain_text("MCP server broken: failed")
    broken = server_item(page, "broken")
    expect(broken).to_have_attribute("data-state", "failed")
    expect(broken.locator(".mcp-error")).to_contain_text(MISSING)
    expect(page.locator("#mcp-servers .mcp-summary")).to_have_text("1 of 2 ready")
    row = admin.locator("#result_list tbody tr", has_text="broken")
    expect(row).to_contain_text("failed")
    expect(row.locator("td.field-last_error span")).to_have_attribute("title", re.compile(MISSING))
    expect(row.locator("td.field-tool_count")).to_have_text("0")
    overflow = admin.locator("#changelist-form .results").evaluate("e => e.scrollWidth - e.clientWidth")
    assert overflow <= 0, f"{overflow} px of the MCP servers list are cut"

    # The instance's page lists both: declared and ready with its tools, runtime and failed.
    admin.goto(f"{live.http}/admin/agents_app/agentinstance/{pk}/change/")
    table = admin.locator("table#mcp-servers")
    expect(table.locator(f"tr[data-server='{SERVER}']")).to_contain_text("declared")
    expect(table.locator(f"tr[data-server='{SERVER}'] td").last).to_have_text("2")
    expect(table.locator("tr[data-server='broken']")).to_contain_text("failed")

    admin.goto(f"{live.http}/admin/agents_app/mcpserverconfig/?q=broken")
    admin.locator("#result_list tbody tr", has_text="broken").locator("th a").click()
    admin.goto(admin.url.replace("/change/", "/delete/"))
    admin.click("input[type=submit]")
    expect(admin.locator(".messagelist")).to_contain_text("deleted")
    expect(server_item(page, "broken")).to_have_count(0)
    expect(page.locator("#mcp-servers .mcp-summary")).to_have_text("1 of 1 ready")
