"""A bar chart of tokens by day as inline SVG: drawn on the server, no script, no CDN.

Each bar stacks input (lower) and output (upper) tokens and carries a ``<title>`` tooltip; the
axis names the first and last day and the tallest bar's total.
"""

import datetime
from collections.abc import Sequence
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT, MARGIN = 720, 180, 24
INPUT_COLOUR, OUTPUT_COLOUR = "#79aec8", "#417690"  # the admin's own blues


def tokens_by_day(days: Sequence[dict[str, Any]]) -> SafeString:
    """``days``: ``service.grouped(rows, "day")``; days without usage between them are drawn empty.
    An empty string when there is nothing to draw."""
    if not days:
        return SafeString("")
    days = _every_day(days)
    tallest = max(day["total_tokens"] for day in days) or 1
    plot = HEIGHT - 2 * MARGIN
    step = (WIDTH - 2 * MARGIN) / len(days)
    width = max(1.0, step * 0.8)
    bars = []
    for index, day in enumerate(days):
        x = MARGIN + index * step
        low = plot * day["input_tokens"] / tallest
        high = plot * day["output_tokens"] / tallest
        base = HEIGHT - MARGIN
        title = f"{day['key']}: {day['input_tokens']:,} in + {day['output_tokens']:,} out, {day['turns']:,} turns"
        bars.append((title, x, base - low, width, low, INPUT_COLOUR))
        bars.append((title, x, base - low - high, width, high, OUTPUT_COLOUR))
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        ((f"{x:.1f}", f"{y:.1f}", f"{w:.1f}", f"{h:.1f}", colour, title) for title, x, y, w, h, colour in bars),
    )
    return format_html(
        '<svg class="usage-chart" role="img" aria-label="Tokens by day" viewBox="0 0 {w} {h}" width="100%" '
        'style="max-width:{w}px">{rects}'
        '<line x1="{m}" y1="{base}" x2="{right}" y2="{base}" stroke="#999"/>'
        '<text x="{m}" y="{label_y}" font-size="11">{first}</text>'
        '<text x="{right}" y="{label_y}" font-size="11" text-anchor="end">{last}</text>'
        '<text x="{m}" y="{top}" font-size="11">{tallest} tokens</text>'
        '<text x="{right}" y="{top}" font-size="11" text-anchor="end">'
        '<tspan fill="{input}">■ input</tspan> <tspan fill="{output}">■ output</tspan></text></svg>',
        w=WIDTH,
        h=HEIGHT,
        rects=rects,
        m=MARGIN,
        base=HEIGHT - MARGIN,
        right=WIDTH - MARGIN,
        label_y=HEIGHT - 6,
        top=MARGIN - 8,
        first=str(days[0]["key"]),
        last=str(days[-1]["key"]),
        tallest=f"{tallest:,}",
        input=INPUT_COLOUR,
        output=OUTPUT_COLOUR,
    )


def _every_day(days: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by_day = {day["key"]: day for day in days}
    first, last = days[0]["key"], days[-1]["key"]
    empty = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "turns": 0}
    span = (last - first).days + 1
    return [by_day.get(d, {"key": d, **empty}) for d in (first + datetime.timedelta(days=n) for n in range(span))]
