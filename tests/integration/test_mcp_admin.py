"""The admin's MCP pages through Django's test client: who sees them, an add checked and made through
the service, the list with the state a connection left, the filter, a delete.

The add connects once to a port where nothing listens, so the server is ``failed`` with the
reason, as a real connection leaves it; the live pages (Chromium, a real MCP server) are
``tests/browser/test_mcp_live.py``.
"""

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from agents_app.models import AgentInstance, MCPServerConfig, MCPServerStatus
from tests.support.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:agents_app_mcpserverconfig_changelist"
ADD = "admin:agents_app_mcpserverconfig_add"


@pytest.fixture
def instance(user: Any) -> AgentInstance:
    return AgentInstance.objects.create(slug="demo-agent", name="room-1", owner=user)


def staff(make_user: Any, name: str, *codenames: str) -> Client:
    user = make_user(name, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def form(instance: AgentInstance, **fields: str) -> dict[str, Any]:
    return {"instance": instance.pk, "name": "docs", "url": f"http://127.0.0.1:{free_port()}/mcp",
            "transport": "streamable-http", "headers_text": "", "approval_text": "", "tool_prefix": "", **fields}


def test_only_staff_with_the_permission_see_and_change_the_servers(make_user: Any, instance: AgentInstance) -> None:
    plain = staff(make_user, "plain")
    assert plain.get(reverse(CHANGELIST)).status_code == 403
    assert plain.post(reverse(ADD), form(instance)).status_code == 403
    assert not MCPServerConfig.objects.exists()
    manager = staff(make_user, "manager", "manage_mcp_servers")
    assert manager.get(reverse(CHANGELIST)).status_code == 200
    assert manager.get(reverse(ADD)).status_code == 200


def test_an_add_is_checked_stored_connected_once_and_listed(make_user: Any, instance: AgentInstance) -> None:
    manager = staff(make_user, "manager", "manage_mcp_servers")
    refused = manager.post(reverse(ADD), form(instance, headers_text="Authorization: Bearer s3cret"))
    assert refused.status_code == 200
    assert "is not a reference" in refused.content.decode()
    assert manager.post(reverse(ADD), form(instance, name="bad name!")).status_code == 200
    assert not MCPServerConfig.objects.exists()

    response = manager.post(reverse(ADD), form(instance, headers_text="X-Api-Key: Key env:DOCS_KEY",
                                               approval_text="delete, create"), follow=True)
    assert response.status_code == 200
    row = MCPServerConfig.objects.get(instance=instance, name="docs")
    assert row.headers == {"X-Api-Key": {"source": "env", "name": "DOCS_KEY", "prefix": "Key "}}
    assert row.needs_approval == ["create", "delete"]
    assert row.created_by.username == "manager"
    # The one connection from the admin's process failed (nothing listens there), and said so.
    status = MCPServerStatus.objects.get(instance=instance, name="docs")
    assert status.state == MCPServerStatus.State.FAILED
    assert "MCP server docs: failed" in response.content.decode()

    page = manager.get(reverse(CHANGELIST), {"agent": "demo-agent"}).content.decode()
    assert "docs" in page
    assert "failed" in page
    assert "docs" not in manager.get(reverse(CHANGELIST), {"agent": "research-agent"}).content.decode()

    taken = manager.post(reverse(ADD), form(instance))
    assert "already has an MCP server named &#x27;docs&#x27;" in taken.content.decode()


def test_a_delete_goes_through_the_service(make_user: Any, instance: AgentInstance) -> None:
    manager = staff(make_user, "manager", "manage_mcp_servers")
    manager.post(reverse(ADD), form(instance))
    row = MCPServerConfig.objects.get(instance=instance, name="docs")
    assert MCPServerStatus.objects.filter(instance=instance, name="docs").exists()
    url = reverse("admin:agents_app_mcpserverconfig_delete", args=[row.pk])
    assert manager.post(url, {"post": "yes"}).status_code == 302
    assert not MCPServerConfig.objects.exists()
    # Its state went with it (``service.remove_server``), not only the row.
    assert not MCPServerStatus.objects.filter(instance=instance, name="docs").exists()
