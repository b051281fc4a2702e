"""``python -m thinkproject.serve [daphne options] thinkproject.asgi:application``: Daphne on uvloop.

Daphne creates its event loop when ``daphne.server`` is imported, from the event-loop policy of
that moment, so the policy must be set before the import: this module sets it, then hands over to
Daphne's own command line (same options, same behaviour). uvloop runs the loop and its socket I/O
in C; a streamed reply makes many loop turns per chunk (pydantic-ai's stream wrappers yield to the
loop several times per event), and uvloop cut the server's CPU per chunk by about a tenth
(``bench/README.md``). ``manage.py`` does the same for ``runserver`` (``make run``).
``ASYNCIO_LOOP=asyncio`` keeps the standard loop.
"""

import asyncio
import os


def use_uvloop() -> None:
    """Make uvloop the event-loop policy, unless ``ASYNCIO_LOOP=asyncio``."""
    if os.environ.get("ASYNCIO_LOOP", "uvloop") == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main() -> None:
    use_uvloop()
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
