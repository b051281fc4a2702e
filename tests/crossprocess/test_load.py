"""500 sockets on one server process, each a user of its own doing one turn: every turn completes (issue 17).

Before, some got 1011 from the Redis pool ("Too many connections") in the fan-out publish, and
handshakes were dropped under load. Speed is bench/load.py's business; this only checks that
nobody is refused or lost.
"""

import asyncio
import collections
from pathlib import Path

import pytest

from tests.support.live import LiveStack, RedisServer
from tests.support.load import SETTINGS, crowd, make_sessions

pytestmark = pytest.mark.crossprocess

SOCKETS = 500


def test_five_hundred_sockets_on_one_daphne_each_complete_a_turn(tmp_path: Path, redis: RedisServer) -> None:
    stack = LiveStack(tmp_path, redis.url, extra_env={"DJANGO_SETTINGS_MODULE": SETTINGS, "AGENT_LOG_LEVEL": "WARNING"})
    try:
        daphne = stack.start_server()
        cookies = make_sessions(stack, SOCKETS)
        outcomes = asyncio.run(crowd([daphne.ws], cookies, timeout=240))
    finally:
        stack.stop()
    failures = collections.Counter(o.error for o in outcomes if not o.ok)
    assert failures == {}, failures.most_common(5)
    assert len(outcomes) == SOCKETS
    log = "\n".join(path.read_text(errors="replace") for path in tmp_path.glob("server-*.log"))
    assert "Traceback" not in log
    assert "WSREJECT" not in log
