"""The admin's MCP pages: runtime servers listed with their state, added and removed by staff.

"MCP servers" lists the servers added to instances at runtime with the state a process last saw,
the last error and the tool count. Staff with ``agents_app.manage_mcp_servers`` add one (its
headers as references, never secrets) and remove them; both go through
``agents_app.mcp.service``, which stores the change and sends the new state to every open chat,
and an add connects once from this process so the list shows at once whether the server answers.
There is no change form: a server is removed and added again. An instance's own page lists all its
servers, declared in code and added at runtime (``servers_table``).
"""

from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import JSONField, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from .. import registry
from ..admin_base import AgentFilter, badge, pretty_json
from ..models import AgentInstance, MCPServerConfig, MCPServerStatus
from . import connections, service
from .serializers import REFERENCE_HELP, header_reference, reference_text
from .servers import MCPConfigurationError, MCPServer, SecretRef

MANAGE_PERMISSION = "agents_app.manage_mcp_servers"
STATE_COLOURS = {MCPServerStatus.State.READY.value: "#2e7d32", MCPServerStatus.State.FAILED.value: "#c62828"}
# The others (connecting, discovering, not-connected, ...) are on their way.
PENDING_COLOUR = "#b26a00"
# Characters of an error or a URL shown in the list (all of it is in the title).
ERROR_CHARS = 60
URL_CHARS = 40


def state_badge(state: str) -> SafeString:
    return badge(state, STATE_COLOURS.get(state, PENDING_COLOUR))


def clipped(text: str, chars: int, style: str = "") -> SafeString:
    """``text`` cut to ``chars`` characters for a list column, whole in the title (shown on hover)."""
    short = Truncator(text).chars(chars)
    return format_html("<span class='clipped' style='{}' title='{}'>{}</span>", style, text, short)


def clipped_error(error: str | None) -> SafeString:
    """An error in red (the instance page has no stylesheet of ours), cut for a list."""
    return clipped(error, ERROR_CHARS, "color:#c62828") if error else format_html("{}", "-")


def servers_table(instance: AgentInstance) -> SafeString:
    """Every MCP server of ``instance`` (declared, then runtime) with state, last error and tool count,
    and the links to add or remove runtime ones: the instance page's "MCP servers" field."""
    entries = service.list_servers(instance)
    changelist = reverse("admin:agents_app_mcpserverconfig_changelist")
    add = reverse("admin:agents_app_mcpserverconfig_add")
    links = format_html("<a href='{}?instance__id__exact={}'>runtime servers</a> · "
                        "<a href='{}?instance={}' id='add-mcp-server'>add an MCP server</a>",
                        changelist, instance.pk, add, instance.pk)
    if not entries:
        return format_html("<p>None.</p><p>{}</p>", links)
    rows = format_html_join("", "<tr data-server='{}'><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                "<td>{}</td></tr>", (
        (entry["id"], entry["name"], "declared" if entry["declared"] else "runtime", entry["server_url"],
         state_badge(entry["state"]), clipped_error(entry["error"]), len(entry["tools"]))
        for entry in entries))
    return format_html("<table id='mcp-servers'><thead><tr><th>name</th><th>source</th><th>URL</th><th>state</th>"
                       "<th>last error</th><th>tools</th></tr></thead><tbody>{}</tbody></table><p>{}</p>",
                       rows, links)


class MCPServerForm(forms.ModelForm):
    """A runtime server to add: checked as the service will check it, headers read as references."""

    url = forms.URLField(label="URL", max_length=2000, assume_scheme="https",
                         help_text="http:// or https://; a path ending in /sse is SSE.")
    headers_text = forms.CharField(
        label="Headers", required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=f"One header a line, 'Name: reference'. {REFERENCE_HELP}",
    )
    approval_text = forms.CharField(
        label="Tools that need approval", required=False,
        help_text="Tool names, comma-separated: their calls wait for the user's Approve (or tick the box below).",
    )

    class Meta:
        model = MCPServerConfig
        fields = ["instance", "name", "url", "transport", "headers_text", "approval_text", "approve_all",
                  "tool_prefix"]
        help_texts = {"name": "Unique in the instance: the id clients see. Letters, digits, '_', '.', '-'.",
                      "approve_all": "Every tool of the server waits for the user's Approve.",
                      "tool_prefix": "Put before each tool's name (e.g. gh_), to keep two servers' tools apart."}

    def clean_headers_text(self) -> dict[str, dict[str, str]]:
        headers = {}
        for number, line in enumerate(self.cleaned_data["headers_text"].splitlines(), 1):
            if not line.strip():
                continue
            header, colon, value = line.partition(":")
            if not colon or not header.strip():
                raise forms.ValidationError(f"Line {number}: write 'Name: reference', e.g. 'Authorization: Bearer "
                                            "env:DOCS_TOKEN'")
            try:
                headers[header.strip()] = header_reference(value)
            except ValueError as exc:
                raise forms.ValidationError(f"Line {number}: {exc}") from exc
        return headers

    def clean_approval_text(self) -> list[str]:
        return sorted({name.strip() for name in self.cleaned_data["approval_text"].split(",") if name.strip()})

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        instance, name = data.get("instance"), data.get("name")
        if instance is None or not name or "url" not in data or "headers_text" not in data:
            return data
        try:
            MCPServer(name=name, url=data["url"], transport=data.get("transport") or None,
                      headers={k: SecretRef.parse(v) for k, v in data["headers_text"].items()},
                      tool_prefix=data.get("tool_prefix") or "", runtime=True).check_runtime()
        except MCPConfigurationError as exc:
            raise forms.ValidationError(str(exc)) from exc
        if any(server["id"] == name for server in service.list_servers(instance)):
            self.add_error("name", f"{instance} already has an MCP server named {name!r}.")
        return data

    def validate_unique(self) -> None:
        """The name's uniqueness is ``clean``'s (declared servers count too), and the service's at the write."""


class InstanceAgentFilter(AgentFilter):
    """The agent filter (choices from the registry) on the server's instance."""

    field = "instance__slug"


@admin.register(MCPServerConfig)
class MCPServerConfigAdmin(admin.ModelAdmin):
    """Runtime MCP servers of every instance, for staff with ``manage_mcp_servers``."""

    form = MCPServerForm
    list_display = ["name", "agent_instance", "server_url", "state", "last_error", "tool_count", "created_at"]
    list_filter = [InstanceAgentFilter]
    search_fields = ["name", "url", "instance__name", "instance__slug"]
    list_select_related = ["instance__owner", "created_by"]
    raw_id_fields = ["instance"]
    ordering = ["-created_at", "-pk"]
    view_fields = ["agent_instance", "name", "url", "transport", "headers_shown", "approval", "tool_prefix",
                   "created_by", "created_at", "state", "last_error", "tools_shown"]

    class Media:
        css = {"all": ["agents_app/admin.css", "agents_app/mcp-admin.css"]}

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(MANAGE_PERMISSION)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(MANAGE_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(MANAGE_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(MANAGE_PERMISSION)

    def get_fields(self, request: HttpRequest, obj: MCPServerConfig | None = None) -> list[str]:
        return list(MCPServerForm.Meta.fields) if obj is None else self.view_fields

    def get_readonly_fields(self, request: HttpRequest, obj: MCPServerConfig | None = None) -> list[str]:
        return [] if obj is None else self.view_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[MCPServerConfig]:
        """Each server with its status row's state, error and tools (one query for the page)."""
        status = MCPServerStatus.objects.filter(instance_id=OuterRef("instance_id"), name=OuterRef("name"))
        return super().get_queryset(request).annotate(
            status_state=Subquery(status.values("state")[:1]),
            status_error=Subquery(status.values("error")[:1]),
            status_tools=Subquery(status.values("tools")[:1], output_field=JSONField()),
        )

    def save_model(self, request: HttpRequest, obj: MCPServerConfig, form: forms.ModelForm, change: bool) -> None:
        """Add through the service; once the admin's transaction has committed, connect once from
        here and send the new state to every chat (``_connect``)."""
        data = form.cleaned_data
        try:
            server = service.add_server(
                obj.instance, obj.name, obj.url, headers=data["headers_text"], transport=obj.transport,
                needs_approval=True if obj.approve_all else data["approval_text"], tool_prefix=obj.tool_prefix,
                created_by=request.user,
            )
        except service.MCPServerExists as exc:
            # Added by someone else since the form was checked: the page shows theirs.
            messages.error(request, str(exc))
        else:
            transaction.on_commit(lambda: self._connect(request, obj.instance, server))
        obj.pk = MCPServerConfig.objects.get(instance=obj.instance, name=obj.name).pk

    def _connect(self, request: HttpRequest, instance: AgentInstance, server: MCPServer) -> None:
        """Broadcast the added server, then connect to it once (which stores and broadcasts what it
        offers or why it failed) and say which. Outside the admin's transaction: the service's async
        side runs its database work through ``database_sync_to_async``, which would close the
        connection of an open transaction."""
        async_to_sync(service.broadcast)(instance)
        state = async_to_sync(connections.probe)(instance.pk, server, declared=service.declared(instance))
        error = next((s["error"] for s in service.list_servers(instance) if s["id"] == server.name), None)
        level = messages.ERROR if state == MCPServerStatus.State.FAILED else messages.INFO
        messages.add_message(request, level, f"MCP server {server.name}: {state}" + (f" ({error})" if error else ""))

    def delete_model(self, request: HttpRequest, obj: MCPServerConfig) -> None:
        """Remove through the service, and tell every chat once the admin's transaction has committed."""
        if service.remove_server(obj.instance, obj.name):
            transaction.on_commit(lambda: async_to_sync(service.broadcast)(obj.instance))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MCPServerConfig]) -> None:
        for row in queryset.select_related("instance"):
            self.delete_model(request, row)

    @admin.display(description="agent / instance", ordering="instance__slug")
    def agent_instance(self, obj: MCPServerConfig) -> SafeString:
        page = reverse("admin:agents_app_agentinstance_change", args=[obj.instance_id])
        return format_html("<a href='{}'>{}</a> (<a href='{}'>chat</a>)", page, obj.instance.address,
                           registry.staff_chat_url(obj.instance))

    @admin.display(description="URL", ordering="url")
    def server_url(self, obj: MCPServerConfig) -> SafeString:
        return clipped(obj.url, URL_CHARS)

    @admin.display(description="state")
    def state(self, obj: MCPServerConfig) -> SafeString:
        return state_badge(getattr(obj, "status_state", None) or MCPServerStatus.State.NOT_CONNECTED)

    @admin.display(description="last error")
    def last_error(self, obj: MCPServerConfig) -> SafeString:
        return clipped_error(getattr(obj, "status_error", None))

    @admin.display(description="tools")
    def tool_count(self, obj: MCPServerConfig) -> int:
        return len(getattr(obj, "status_tools", None) or [])

    @admin.display(description="tools it offers")
    def tools_shown(self, obj: MCPServerConfig) -> str:
        return ", ".join(tool.get("name", "?") for tool in getattr(obj, "status_tools", None) or []) or "-"

    @admin.display(description="headers")
    def headers_shown(self, obj: MCPServerConfig) -> SafeString:
        return pretty_json({name: reference_text(ref) for name, ref in obj.headers.items()})

    @admin.display(description="needs approval")
    def approval(self, obj: MCPServerConfig) -> str:
        return "every tool" if obj.approve_all else ", ".join(obj.needs_approval) or "no tool"
