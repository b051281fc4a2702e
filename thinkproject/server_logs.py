"""One line per client fault in the ASGI server's own log.

uvicorn's ``websockets-sansio`` protocol logs a client's text frame that is not UTF-8 with
``logger.exception``: a traceback for every bad frame a hostile client sends, though the frame is
the client's fault and the socket is closed with 1007 as it should be. The message says all there
is to say, so its traceback is dropped and the event stays one line (docs/operations.md#uvicorn).
"""

import logging

# The messages of client faults uvicorn logs with a traceback of its own decoding.
CLIENT_FAULTS = frozenset({"Invalid UTF-8 sequence received from client."})


class ClientFaultsOnOneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.msg in CLIENT_FAULTS:
            record.exc_info = None
            record.exc_text = None
        return True


def install() -> None:
    """On uvicorn's error logger (it is configured before the application is imported; under
    Daphne the logger is never used)."""
    logging.getLogger("uvicorn.error").addFilter(ClientFaultsOnOneLine())
