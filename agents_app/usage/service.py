"""Store each turn's usage, price it, and check the quotas before a turn's first model request.

Quotas count input + output tokens of ``TurnUsage`` rows by UTC day and calendar month; the sums
read one index each (``turn_usage_user_day``, ``turn_usage_agent_day``). A quota is checked when
a turn starts: a turn that starts under its limit runs to its end, so usage may pass a limit by
what one turn (or the user's concurrent turns) uses (docs/operations.md#usage-and-quotas).
"""

import dataclasses
import datetime
import time
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.signals import post_save
from django.utils import timezone

from .. import conf, statements
from ..metrics import instruments as metrics
from ..models import Turn, TurnUsage, UsageQuota
from .metered import Metered

MILLION = Decimal(1_000_000)


def record(turn: Turn, agent: str, metered: Metered) -> None:
    """Store what the turn used (in the caller's transaction, the one that ends the turn)."""
    if not metered.worth_storing:
        return
    usage = metered.usage
    metrics.model_usage(agent, usage.requests, usage.input_tokens, usage.output_tokens)
    # One INSERT, written the project's cheap way (``statements.insert_many``, which may wait for
    # the turn's next write: ``statements.together``): a turn ends once (a continuation or a
    # recovery attempt is a turn of its own).
    statements.insert_many([
        TurnUsage(
            turn_id=turn.pk,
            agent=agent,
            user_id=turn.user_id,
            day=today(),
            model=metered.model[:200],
            requests=usage.requests,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=cost(metered.model, usage.input_tokens, usage.output_tokens),
            limit=metered.limit,
        )
    ])


def today() -> datetime.date:
    return timezone.now().astimezone(datetime.UTC).date()


def cost(model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    """The price of the tokens by ``AGENT_MODEL_PRICES`` (per million tokens), or None for a model it does not list."""
    price = conf.get("AGENT_MODEL_PRICES").get(model)
    if price is None:
        return None
    return (
        Decimal(str(price.get("input", 0))) * input_tokens + Decimal(str(price.get("output", 0))) * output_tokens
    ) / MILLION


@dataclasses.dataclass(frozen=True)
class Refusal:
    """The quota a turn is over: ``limit`` names it for staff, ``message`` is what the user reads."""

    limit: str
    message: str


def may_refuse(user: Any, agent: str) -> bool:
    """Whether a limit could apply to this turn, known without a query (``refusal`` is then asked
    in a thread): a limit in the settings, or per-user quotas in the admin, seen at most
    ``OVERRIDES_TTL`` seconds late. A site without quotas pays no query and no thread hop per turn."""
    quotas = conf.get("AGENT_USAGE_QUOTAS")
    if any(
        agent in (quotas.get(key) or {}) or "*" in (quotas.get(key) or {})
        for key in ("agent_per_day", "agent_per_month")
    ):
        return True
    if getattr(user, "pk", None) is None:
        return False
    read_at, exist = _overrides
    return (
        quotas.get("user_per_day") is not None
        or quotas.get("user_per_month") is not None
        or exist
        or time.monotonic() - read_at >= OVERRIDES_TTL
    )


# Whether any per-user quota exists, and when that was read (``time.monotonic``): staff add one
# rarely, and the turns of a site without any should not query for one.
OVERRIDES_TTL = 30.0
_overrides: tuple[float, bool] = (-OVERRIDES_TTL, True)


def _forget_overrides(**kwargs: Any) -> None:
    """A per-user quota saved in this process takes effect here at once (elsewhere within the TTL)."""
    global _overrides
    _overrides = (-OVERRIDES_TTL, True)


post_save.connect(_forget_overrides, sender=UsageQuota, dispatch_uid="agents_app.usage.overrides")


def refusal(user: Any, agent: str) -> Refusal | None:
    """The first quota the user's turn with ``agent`` is at or over, or None when it may run."""
    global _overrides
    if time.monotonic() - _overrides[0] >= OVERRIDES_TTL:
        _overrides = (time.monotonic(), UsageQuota.objects.exists())
    day = today()
    month = day.replace(day=1)
    user_pk = getattr(user, "pk", None)
    for scope, limit, since in _limits(user_pk, agent, day, month):
        used = _used(scope, user_pk, agent, since)
        if used >= limit:
            return _refusal(scope, limit, used, since == month)
    return None


def _limits(
    user_pk: int | None, agent: str, day: datetime.date, month: datetime.date
) -> list[tuple[str, int, datetime.date]]:
    """(scope, tokens, since) of every limit that applies: the user's, then the agent's."""
    quotas = conf.get("AGENT_USAGE_QUOTAS")
    limits: list[tuple[str, int | None, datetime.date]] = []
    if user_pk is not None:
        own = UsageQuota.objects.filter(user_id=user_pk).first() if _overrides[1] else None
        per_day, per_month = (
            (own.tokens_per_day, own.tokens_per_month)
            if own is not None
            else (quotas.get("user_per_day"), quotas.get("user_per_month"))
        )
        limits += [("user", per_day, day), ("user", per_month, month)]
    for key, since in (("agent_per_day", day), ("agent_per_month", month)):
        by_agent = quotas.get(key) or {}
        limits.append(("agent", by_agent.get(agent, by_agent.get("*")), since))
    return [(scope, int(limit), since) for scope, limit, since in limits if limit is not None]


def _used(scope: str, user_pk: int | None, agent: str, since: datetime.date) -> int:
    rows = TurnUsage.objects.filter(day__gte=since)
    rows = rows.filter(user_id=user_pk) if scope == "user" else rows.filter(agent=agent)
    return rows.aggregate(total=Sum(F("input_tokens") + F("output_tokens")))["total"] or 0


def _refusal(scope: str, limit: int, used: int, monthly: bool) -> Refusal:
    period = "month" if monthly else "day"
    resets = "on the 1st of next month" if monthly else "at midnight"
    who = "you have used" if scope == "user" else "this agent has used"
    whose = "your" if scope == "user" else "its"
    return Refusal(
        limit=f"{scope} per {period}",
        message=f"Usage quota reached: {who} {used:,} of {whose} {limit:,} tokens this {period}. "
        f"It resets {resets} (UTC).",
    )


# --- reports: the admin's usage page and the REST API ------------------------------------------
GROUPS = {"day": "day", "user": "user__username", "agent": "agent", "model": "model"}
# Named apart from the model's fields (an annotation may not shadow one), renamed back in ``_named``.
SUMS = {
    "sum_turns": Count("id"),
    "sum_requests": Sum("requests"),
    "sum_input_tokens": Sum("input_tokens"),
    "sum_output_tokens": Sum("output_tokens"),
    "sum_cost": Sum("cost"),
    "sum_refused": Count("id", filter=~Q(limit="")),
}


def totals(rows: QuerySet[TurnUsage]) -> dict[str, Any]:
    """Sums over ``rows``: turns, requests, tokens (in, out, total), cost (None if no row has one), refusals."""
    return _named(rows.aggregate(**SUMS))


def grouped(rows: QuerySet[TurnUsage], by: str) -> list[dict[str, Any]]:
    """``totals`` by day, user, agent or model (``GROUPS``), each with its ``key``: days in order,
    the others by most tokens first."""
    field = GROUPS[by]
    sums = rows.values(field).annotate(**SUMS)
    ordered = sums.order_by(field) if by == "day" else sums.order_by("-sum_output_tokens", "-sum_input_tokens", field)
    return [{"key": row[field], **_named(row)} for row in ordered]


def _named(row: dict[str, Any]) -> dict[str, Any]:
    sums = {name.removeprefix("sum_"): row[name] for name in SUMS}
    for name in ("turns", "requests", "input_tokens", "output_tokens", "refused"):
        sums[name] = sums[name] or 0
    sums["total_tokens"] = sums["input_tokens"] + sums["output_tokens"]
    return sums
