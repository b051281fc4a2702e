"""A server added at runtime chooses its own URL, so it may only read the secrets
``AGENT_MCP_SECRET_NAMES`` lists, and its URL may not carry credentials: through the handle, the
REST API and the admin's form, and again when a connection resolves a stored row's references
(docs/architecture.md#runtime-server-secrets). A real listener stands for the server a staff
member would point at their own address: it must never receive the project's secrets.
"""

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agents_app.mcp import connections, state
from agents_app.mcp.servers import MCPConfigurationError, MCPServer, setting
from agents_app.models import AgentInstance, MCPServerConfig, MCPServerStatus
from tests.mcp_agents import McpRuntimeAgent

pytestmark = pytest.mark.django_db(transaction=True)

# What an attacker with manage_mcp_servers would ask for, and the names the tests allow.
STOLEN = ["Bearer setting:SECRET_KEY", "setting:DATABASES", "Token env:AGENT_MODEL_API_KEY"]
CREDENTIAL_URLS = ["http://user:pw@127.0.0.1:9/mcp", "http://127.0.0.1:9/mcp?token=abc",
                   "http://127.0.0.1:9/mcp?x=1&api_key=abc"]


class Listener:
    """A port that records every byte a client sends it (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.received = bytearray()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.sock.accept()
            except TimeoutError:
                continue
            with client:
                client.settimeout(0.5)
                try:
                    while chunk := client.recv(65536):
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    yield
    await connections.close_loop()


def manager(make_user: Any) -> Any:
    user = make_user("manager", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="manage_mcp_servers"))
    return user


def assert_no_secret_sent(received: bytes) -> None:
    assert django_settings.SECRET_KEY.encode() not in received
    assert b"Authorization" not in received


@pytest.mark.parametrize("header", STOLEN)
async def test_the_handle_refuses_a_reference_the_allow_list_does_not_name(user, listener, header):
    handle = await McpRuntimeAgent.aget("steal", owner=user)
    with pytest.raises(MCPConfigurationError, match="not in AGENT_MCP_SECRET_NAMES"):
        await handle.add_mcp_server("mine", listener.url, headers={"Authorization": header})
    with pytest.raises(MCPConfigurationError, match="not in AGENT_MCP_SECRET_NAMES"):
        await handle.add_mcp_server("mine", listener.url, headers={"Authorization": setting("SECRET_KEY")})
    assert not await MCPServerConfig.objects.filter(name="mine").aexists()
    assert_no_secret_sent(bytes(listener.received))


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
async def test_the_handle_refuses_credentials_in_the_url(user, url):
    handle = await McpRuntimeAgent.aget("urls", owner=user)
    with pytest.raises(MCPConfigurationError, match="every client sees the URL"):
        await handle.add_mcp_server("mine", url, connect=False)


async def test_the_handle_reads_a_prefixed_reference_as_the_api_and_admin_do(user):
    handle = await McpRuntimeAgent.aget("prefixed", owner=user)
    await handle.add_mcp_server("docs", "http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer env:DOCS_KEY"},
                                connect=False)
    row = await MCPServerConfig.objects.aget(name="docs")
    assert row.headers == {"Authorization": {"source": "env", "name": "DOCS_KEY", "prefix": "Bearer "}}


def test_the_api_refuses_stolen_references_and_credentials_in_the_url(make_user, listener):
    client = APIClient()
    client.force_authenticate(manager(make_user))
    base = "/api/agents/mcp-runtime-agent/room/mcp-servers/"
    for header in STOLEN:
        response = client.post(base, {"name": "mine", "url": listener.url, "headers": {"Authorization": header}},
                               format="json")
        assert response.status_code == 400, response.content
        assert "not in AGENT_MCP_SECRET_NAMES" in response.content.decode()
    for url in CREDENTIAL_URLS:
        response = client.post(base, {"name": "mine", "url": url}, format="json")
        assert response.status_code == 400, response.content
        assert "every client sees the URL" in response.content.decode()
    assert not MCPServerConfig.objects.exists()
    allowed = client.post(base, {"name": "docs", "url": listener.url, "headers": {"X-Key": "Key env:DOCS_KEY"}},
                          format="json")
    assert allowed.status_code == 201, allowed.content
    assert_no_secret_sent(bytes(listener.received))


def test_the_admin_form_refuses_stolen_references_and_credentials_in_the_url(make_user, user, listener):
    instance = AgentInstance.objects.create(slug="demo-agent", name="room-1", owner=user)
    client = Client()
    client.force_login(manager(make_user))
    add = reverse("admin:agents_app_mcpserverconfig_add")
    fields = {"instance": instance.pk, "name": "mine", "url": listener.url, "transport": "streamable-http",
              "headers_text": "", "approval_text": "", "tool_prefix": ""}
    for header in STOLEN:
        page = client.post(add, {**fields, "headers_text": f"Authorization: {header}"})
        assert page.status_code == 200
        assert "not in AGENT_MCP_SECRET_NAMES" in page.content.decode()
    for url in CREDENTIAL_URLS:
        page = client.post(add, {**fields, "url": url})
        assert page.status_code == 200
        assert "every client sees the URL" in page.content.decode()
    assert not MCPServerConfig.objects.exists()
    assert_no_secret_sent(bytes(listener.received))


async def test_a_stored_reference_no_longer_allowed_fails_when_resolved(user, listener, settings):
    handle = await McpRuntimeAgent.aget("later", owner=user)
    await handle.add_mcp_server("docs", listener.url, headers={"Authorization": "Bearer setting:MCP_KEY"},
                                connect=False)
    settings.MCP_KEY = "the-mcp-key"
    settings.AGENT_MCP_SECRET_NAMES = []  # taken off the list after the add
    instance = await AgentInstance.objects.aget(name="later")
    [server] = await sync_to_async(state.runtime_servers)(instance.pk)
    assert isinstance(server, MCPServer) and server.runtime
    assert await connections.probe(instance.pk, server, declared=[]) == MCPServerStatus.State.FAILED
    status = await MCPServerStatus.objects.aget(instance=instance, name="docs")
    assert "setting:MCP_KEY is not in AGENT_MCP_SECRET_NAMES" in status.error
    assert b"the-mcp-key" not in bytes(listener.received)
