"""The API's descriptions as their readers see them: Markdown in the schema, HTML in the browsable API.

drf-spectacular and DRF's browsable API take descriptions from docstrings and ``help_text``, which
this project writes in reStructuredText (``name``). Swagger UI and Redoc render Markdown, and the
browsable API (without the optional markdown package) shows text as it is: either way the doubled
backticks would show. These turn them into Markdown code spans (`name`), and into ``<code>`` on
the browsable API's pages.
"""

import re
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from rest_framework.views import APIView, get_view_description

RST_LITERAL = re.compile(r"``(.+?)``")


def markdown_descriptions(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """A ``POSTPROCESSING_HOOKS`` entry: every ``description`` and ``summary`` of the schema, in Markdown."""
    return _rewrite(result)


def _rewrite(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: RST_LITERAL.sub(r"`\1`", value) if key in ("description", "summary") and isinstance(value, str)
                else _rewrite(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_rewrite(item) for item in node]
    return node


def view_description(view: APIView, html: bool = False) -> str | SafeString:
    """DRF's ``VIEW_DESCRIPTION_FUNCTION``: the view's docstring with its literals as code."""
    text = get_view_description(view, html=False)
    if not html:
        return RST_LITERAL.sub(r"`\1`", text)
    paragraphs = RST_LITERAL.sub(r"<code>\1</code>", escape(text)).split("\n\n")
    return mark_safe("".join(f"<p>{paragraph}</p>" for paragraph in paragraphs))  # noqa: S308 - escaped above
