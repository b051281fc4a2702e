"""``DemoAgent``: one tool and one action of each kind, so a fresh ``make run`` shows them all.

With the offline demo model, name a tool to call it (``/tool NAME {json}`` or a word of its name):
``get_weather`` runs here; ``send_email`` waits for Approve / Reject; ``getBrowserInfo`` runs in
the browser; ``crunch_numbers`` reports progress. ``refund_order`` needs ``orders:refund``, asks
approval above 100, makes one ``demo.Refund`` per order however often retried (key
``refund:<order>``) and attaches a draft email; ``deploy_release`` parks until staff approve it
in the admin ("Pending approvals"), then (doing nothing) lets the conversation continue by itself.
``research`` hands a task to a sub-agent (``ResearchAgent``) whose report streams into the tool's
card, and the demo agent then sums it up. Under ``make run`` (``DEMO_MCP_URL`` set) it also uses the
demo MCP server's tools, ``convert_units`` and ``count_words`` (``agents_app/demo/mcp_server.py``).
"""

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal

from django.conf import settings
from pydantic import BaseModel, Field
from pydantic_ai import RunContext

from agents_app import ChatAgent, agent_tool, conf, llm
from agents_app.actions import Action, action
from agents_app.actions.context import ActionContext, TurnContext, TurnState
from agents_app.mcp.servers import MCPServer
from agents_app.tools import ClientTool, tool

WEATHER = {"paris": "sunny, 21°C", "oslo": "snow, -3°C", "lisbon": "clear, 18°C"}
# The demo MCP server's name (agents_app/demo/mcp_server.py's NAME): its id in cf_agent_mcp_servers.
DEMO_MCP_SERVER = "demo-tools"
# Refunds above this amount wait for the user's Approve / Reject.
REFUND_APPROVAL_ABOVE = 100


def get_weather(city: str) -> str:
    """Current weather in a city (demo data)."""
    return f"{city}: {WEATHER.get(city.lower(), 'cloudy, 12°C')}"


def send_email(to: str, subject: str) -> str:
    """Send an email (demo: nothing is sent). Needs the user's approval."""
    return f"Email to {to} about {subject!r} sent (demo)."


async def crunch_numbers(ctx: RunContext[TurnState["DemoAgent"]], count: int = 5) -> AsyncIterator[dict[str, int]]:
    """Add the numbers 1..count slowly, reporting progress on the way."""
    total = 0
    for i in range(1, max(1, min(count, 50)) + 1):
        await asyncio.sleep(0.05)
        total += i
        await ctx.deps.write({"type": "data-progress", "id": "crunch", "data": {"done": i, "of": count}})
        yield {"done": i, "total": total}


class RefundInput(BaseModel):
    order_id: str = Field(description="The order to refund")
    amount: float = Field(gt=0, description="Amount to refund, in euros")
    reason: str = Field(default="", description="Why the customer gets a refund")


def refund(input: RefundInput, ctx: ActionContext) -> dict[str, object]:
    """Make the refund (a ``demo.Refund`` row) and attach the confirmation email draft.

    Idempotent on its own too: the row is keyed by ``ctx.idempotency_key`` (unique), so a run
    the ledger repeats after a crash finds the refund the first run made.
    """
    from .models import Refund

    made, _ = Refund.objects.get_or_create(idempotency_key=ctx.idempotency_key, defaults={
        "order_id": input.order_id, "amount": Decimal(str(input.amount)), "reason": input.reason,
        "request_id": ctx.request_id, "tool_call_id": ctx.tool_call_id,
    })
    ctx.attach_reply({
        "type": "email_draft", "to": ["customer@example.com"], "subject": f"Your refund for order {input.order_id}",
        "body": f"We refunded {input.amount:.2f} EUR for order {input.order_id}.",
    })
    return {"refund_id": made.pk, "order_id": input.order_id, "refunded": input.amount}


class DeployInput(BaseModel):
    version: str = Field(description="The release to deploy, e.g. 1.4.2")
    environment: str = Field(default="production", description="Where to deploy it")


def deploy(input: DeployInput, ctx: ActionContext) -> str:
    """Deploy a release (demo: nothing is deployed)."""
    return f"Deployed {input.version} to {input.environment}."


ACTIONS: dict[str, Action[BaseModel]] = {
    "refund_order": action(
        description="Refund an order (demo: records a refund row)",
        input_schema=RefundInput, execute=refund, permissions=["orders:refund"],
        approval=lambda input, ctx: input.amount > REFUND_APPROVAL_ABOVE,
        approval_summary="Refund an order", approval_risk="medium",
        idempotency_key=lambda input, ctx: f"refund:{input.order_id}",
    ),
    "deploy_release": action(
        description="Deploy a release to an environment; staff must approve it first",
        input_schema=DeployInput, execute=deploy, kind="durable-pause", permissions=["deploy:run"],
        approval_summary="Deploy a release", approval_risk="high",
    ),
}


class ResearchAgent(ChatAgent):
    """The demo's research sub-agent. With a real model it researches as prompted; with the
    offline demo model it streams a short, deterministic report on the task."""

    system_prompt = "You are a research assistant. Look into the task and report your findings briefly."

    async def on_chat_message(self) -> object:
        if not llm.is_demo(self.get_model()):
            return await super().on_chat_message()
        last = self.messages[-1] if self.messages else {}
        task = " ".join(p.get("text", "") for p in last.get("parts", []) if p.get("type") == "text").strip()
        delay = conf.get("AGENT_DEMO_DELAY_MS") / 1000

        async def report() -> AsyncIterator[str]:
            text = (f"Researching {task or 'nothing'}. Sources checked: 3 (demo). Summary: {task or 'nothing'} "
                    "is a demo topic; no real research was done (offline demo model).")
            for word in text.split(" "):
                if delay:
                    await asyncio.sleep(delay)
                yield word + " "

        return report()


# Built once: its schema is made once (``agent_tool``).
RESEARCH = agent_tool(ResearchAgent, name="research",
                      description="Ask the research sub-agent to look into a topic; it reports back.")


class DemoAgent(ChatAgent):
    """Echoes with the offline demo model, and has a tool and an action of each kind."""

    system_prompt = "You are the demo agent of Think for Django. Be brief."
    # What the empty chat page offers: one demo of each kind (see the demo model's grammar).
    starter_prompts = (
        ("Weather: a tool on the server", "get_weather city Oslo"),
        ("Send an email: you approve it first", 'send_email to you@example.com subject "Hello from the demo"'),
        ("Refund 250 €: an action, you approve refunds above 100", "refund_order order_id A1 amount 250"),
        ("Deploy a release: waits for staff in the admin", "deploy_release version 1.4.2"),
        ("Crunch numbers: a tool that reports progress", "crunch_numbers count 10"),
        ("Browser info: a tool that runs in your browser", "getBrowserInfo"),
        ("Research: a sub-agent does it", 'research task "the history of Oslo"'),
        ("Convert 10 km to miles: a tool of an MCP server", "convert_units value 10 from_unit km to_unit mi"),
        ("A slow reply: try Stop", "/slow 40"),
        ("A reply that fails", "/fail"),
    )

    def get_tools(self) -> list[object]:
        return [
            get_weather,
            tool(send_email, needs_approval=True),
            crunch_numbers,
            ClientTool("getBrowserInfo", "The user's browser, language and time zone"),
            RESEARCH,
        ]

    def get_actions(self) -> dict[str, Action[BaseModel]]:
        return ACTIONS

    def get_mcp_servers(self) -> list[MCPServer]:
        """The demo MCP server that ``make run`` starts, at ``DEMO_MCP_URL`` (none when it is not set)."""
        url = getattr(settings, "DEMO_MCP_URL", "")
        return [MCPServer(name=DEMO_MCP_SERVER, url=url)] if url else []

    async def authorize_turn(self, turn: TurnContext) -> dict[str, object]:
        """Every demo user may refund and deploy; a real agent would ask ``turn.user``'s permissions."""
        return {"allowed": True, "granted_permissions": ["orders:refund", "deploy:run"]}
