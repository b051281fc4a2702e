"""The REST API's shapes of conversations (instances), messages sent over HTTP and turns."""

from typing import Any

from django.urls import reverse
from django.utils.http import urlencode
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import registry
from ..models import AgentInstance, Turn
from . import service as conversations

# The longest message text the API takes, in characters.
MESSAGE_MAX_CHARS = 100_000


class InstanceSerializer(serializers.ModelSerializer[AgentInstance]):
    """A conversation, and the addresses that reach it: this API, the chat page, the WebSocket."""

    agent = serializers.CharField(source="slug", read_only=True, help_text="The agent's slug, e.g. `demo-agent`.")
    owner = serializers.CharField(source="owner.username", read_only=True, allow_null=True,
                                  help_text="Whose conversation it is; `null` for a shared agent's.")
    url = serializers.SerializerMethodField(help_text="This conversation in the API.")
    chat_url = serializers.SerializerMethodField(help_text="Its chat page.")
    websocket_path = serializers.SerializerMethodField(help_text="The WebSocket of the chat protocol (`cf_agent_*`).")

    class Meta:
        model = AgentInstance
        fields = ["agent", "name", "owner", "created_at", "updated_at", "url", "chat_url", "websocket_path"]
        read_only_fields = fields

    def get_url(self, obj: AgentInstance) -> str:
        return self._absolute(reverse("api:instance", args=[obj.slug, obj.name]), obj)

    def get_chat_url(self, obj: AgentInstance) -> str:
        return self._absolute(reverse("agents_app:chat", args=[obj.slug, obj.name]), obj)

    def get_websocket_path(self, obj: AgentInstance) -> str:
        return f"/agents/{obj.slug}/{obj.name}" + self._owner_query(obj)

    def _absolute(self, path: str, obj: AgentInstance) -> str:
        return self.context["request"].build_absolute_uri(path + self._owner_query(obj))

    def _owner_query(self, obj: AgentInstance) -> str:
        """``?owner=…`` when the caller reads someone else's conversation (staff); else nothing."""
        owner = registry.owner_parameter(obj)
        if owner is None or obj.owner_id == self.context["request"].user.pk:
            return ""
        return "?" + urlencode({registry.OWNER_PARAMETER: owner})


class InstanceFilterSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(required=False, help_text="Only the conversations with this agent (its slug).")


class CreateInstanceSerializer(serializers.Serializer[Any]):
    """A new conversation: with which agent, and its name (a fresh one when left out)."""

    agent = serializers.ChoiceField(choices=[], help_text="The agent's slug.")
    name = serializers.CharField(
        required=False, max_length=200, trim_whitespace=False,
        help_text="Up to 200 characters, no `/` and no white space. Left out: a fresh name such as `2026-01-31-3fa9`.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = sorted(registry.agent_classes())

    def validate_name(self, name: str) -> str:
        if not registry.valid_name(name):
            raise serializers.ValidationError("A name has no slash and no white space.")
        return name


class SendMessageSerializer(serializers.Serializer[Any]):
    text = serializers.CharField(max_length=MESSAGE_MAX_CHARS, help_text="What the user says.")


class WaitSerializer(serializers.Serializer[Any]):
    wait = serializers.BooleanField(
        required=False, default=False,
        help_text="Answer once the reply is complete (up to `AGENT_API_WAIT_TIMEOUT`, 30 s by default) instead "
                  "of at once.",
    )


class TurnSerializer(serializers.ModelSerializer[Turn]):
    """One turn: the run that answers a message, from queued to completed (or error, aborted, skipped)."""

    url = serializers.SerializerMethodField(help_text="This turn in the API.")
    reply = serializers.SerializerMethodField(
        help_text="The assistant message that answers it (a UIMessage), once the turn has finished; else `null`.")

    class Meta:
        model = Turn
        fields = ["request_id", "status", "kind", "error", "created_at", "started_at", "finished_at", "url", "reply"]
        read_only_fields = fields

    def get_url(self, obj: Turn) -> str:
        path = reverse("api:turn", args=[obj.instance.slug, obj.instance.name, obj.request_id])
        return InstanceSerializer(context=self.context)._absolute(path, obj.instance)

    @extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
    def get_reply(self, obj: Turn) -> dict[str, Any] | None:
        return conversations.reply_of(obj) if obj.is_finished else None
