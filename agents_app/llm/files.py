"""Files a client attaches to a message (``file`` parts), checked before anything is stored.

``useAgentChat``'s ``sendMessage({text, files})`` sends each file as a part ``{type: "file",
mediaType, filename?, url}``: a ``data:`` URL holding the file itself, or a URL the model's
provider fetches. pydantic-ai hands both on in the provider's own format (an Anthropic image or
document block, an OpenAI ``image_url``/``input_image``/``input_file``). A file sent inline is
stored with its message and re-sent by the client with the whole history on every later turn,
so its size is bounded (``AGENT_MAX_FILE_BYTES``): a larger one is refused with an error frame
that says which file and what to do, and nothing is stored (docs/architecture.md#files).
"""

from typing import Any

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


def oversized(messages: list[dict[str, Any]]) -> str | None:
    """One line naming the first inline file above ``AGENT_MAX_FILE_BYTES``, or None if all fit."""
    limit = conf.get("AGENT_MAX_FILE_BYTES")
    if limit is None:
        return None
    for message in messages:
        for index, part in enumerate(message.get("parts") or []):
            if not isinstance(part, dict) or part.get("type") != "file" or not isinstance(part.get("url"), str):
                continue
            size = inline_size(part["url"])
            if size is not None and size > limit:
                name = part.get("filename") or part.get("mediaType") or "file"
                return (f"File {name!r} in message {message.get('id')!r}, part {index}, is {size:,} bytes; a file "
                        f"sent inline may have at most {limit:,} (AGENT_MAX_FILE_BYTES): send it by URL instead")
    return None

