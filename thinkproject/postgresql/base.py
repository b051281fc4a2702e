"""Django's PostgreSQL backend, without a health check of a connection that has just proved itself.

With ``CONN_HEALTH_CHECKS`` on, Django checks a persistent connection (``SELECT 1``, a round
trip) the first time it is used in each request. Channels' ``database_sync_to_async`` counts each
thread hop as a request, and a turn makes two: two of a turn's round trips were these checks
(bench/README.md, "Eleventh round"). Here a connection whose last commit or check succeeded less
than ``HEALTH_CHECK_DELAY`` seconds ago (a ``DATABASES`` key, default 1) is not checked again, as
pgbouncer's ``server_check_delay`` spares a server connection it released a moment ago. A
connection that failed since (Django's ``errors_occurred``) is still checked when its request
ends, and one that breaks within the delay fails its next statement instead of its check.
"""

import math
import time
from typing import Any

from django.db.backends.postgresql import base

DEFAULT_HEALTH_CHECK_DELAY = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.health_check_delay = float(self.settings_dict.get("HEALTH_CHECK_DELAY", DEFAULT_HEALTH_CHECK_DELAY))
        # When the server last answered a commit or a check on this connection (monotonic).
        self._proved_at = -math.inf

    def close_if_health_check_failed(self) -> None:
        if (self.connection is not None and not self.health_check_done
                and time.monotonic() - self._proved_at < self.health_check_delay):
            self.health_check_done = True
        super().close_if_health_check_failed()

    def is_usable(self) -> bool:
        usable = bool(super().is_usable())
        if usable:
            self._proved_at = time.monotonic()
        return usable

    def _commit(self) -> None:
        super()._commit()
        if self.connection is not None:
            self._proved_at = time.monotonic()

    def _close(self) -> None:
        self._proved_at = -math.inf
        super()._close()
