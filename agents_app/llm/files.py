"""Files a client attaches to a message (``file`` parts), checked before anything is stored.

``useAgentChat``'s ``sendMessage({text, files})`` sends each file as a part ``{type: "file",
mediaType, filename?, url}``: a ``data:`` URL holding the file itself, or a URL the model's
provider fetches. pydantic-ai hands both on in the provider's own format (an Anthropic image or
document block, an OpenAI ``image_url``/``input_image``/``input_file``). A file sent inline is
stored with its message and re-sent by the client with the whole history on every later turn,
so its size is bounded (``AGENT_MAX_FILE_BYTES``): a larger one is refused with an error frame
that says which file and what to do, and nothing is stored (docs/architecture.md#files).

OpenAI Chat Completions takes no document or audio by URL: pydantic-ai downloads such a file on
each request, and refuses private addresses (SSRF). A stored message with such a file would fail
every later turn of its conversation, so it is refused too, before it is stored (``refused_download``).
"""

import asyncio
from collections.abc import Iterator
from typing import Any

from pydantic_ai.models import Model

from .. import conf


def inline_size(url: str) -> int | None:
    """The size in bytes of the file a ``data:`` URL holds (None for any other URL)."""
    if not url.startswith("data:"):
        return None
    header, _, data = url.partition(",")
    if not header.endswith(";base64"):
        return len(data.encode())
    padding = len(data) - len(data.rstrip("="))
    return len(data) * 3 // 4 - padding


def _file_parts(messages: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each file part with a URL, and the words that name it to the user ("File 'a.pdf' in message 'u1', part 0")."""
    for message in messages:
        for index, part in enumerate(message.get("parts") or []):
            if isinstance(part, dict) and part.get("type") == "file" and isinstance(part.get("url"), str):
                name = part.get("filename") or part.get("mediaType") or "file"
                yield f"File {name!r} in message {message.get('id')!r}, part {index}", part


def oversized(messages: list[dict[str, Any]]) -> str | None:
    """One line naming the first inline file above ``AGENT_MAX_FILE_BYTES``, or None if all fit."""
    limit = conf.get("AGENT_MAX_FILE_BYTES")
    if limit is None:
        return None
    for where, part in _file_parts(messages):
        size = inline_size(part["url"])
        if size is not None and size > limit:
            return (
                f"{where}, is {size:,} bytes; a file sent inline may have at most {limit:,} "
                "(AGENT_MAX_FILE_BYTES): send it by URL instead"
            )
    return None


def downloaded_by_url(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The file parts by URL a Chat Completions model has pydantic-ai download (not images, which
    it passes on, nor video, which it does not take)."""
    return [
        (where, part)
        for where, part in _file_parts(messages)
        if not part["url"].startswith("data:") and not str(part.get("mediaType") or "").startswith(("image/", "video/"))
    ]


def refused_download(messages: list[dict[str, Any]], model: Model) -> str | None:
    """One line naming the first file by URL that ``model``'s request would download and
    pydantic-ai's download guard refuses (a private address, a host that does not resolve), or None.

    Only OpenAI Chat Completions models download (and documents not when their profile says the
    server takes file URLs); the guard is pydantic-ai's own, so the rule is the one the request
    would apply. Call it outside any event loop (admission runs in a worker thread).
    """
    from pydantic_ai._ssrf import validate_and_resolve_url
    from pydantic_ai.models.openai import OpenAIChatModel

    if not isinstance(model, OpenAIChatModel):
        return None
    documents_by_url = model.profile.get("openai_chat_supports_file_urls", False)
    for where, part in downloaded_by_url(messages):
        if documents_by_url and not str(part.get("mediaType") or "").startswith("audio/"):
            continue
        try:
            asyncio.run(validate_and_resolve_url(part["url"], allow_local=False))
        except ValueError as exc:
            reason = str(exc).partition(" Use force_download")[0].rstrip(".")
            return (
                f"{where} cannot be read by URL: {reason}. This model's API takes no such file by URL "
                "and this server downloads no private address: send the file inline instead"
            )
    return None
