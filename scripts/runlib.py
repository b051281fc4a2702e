"""Probes for ``scripts/run.sh`` that are simpler in Python than in bash.

Each subcommand prints one line for the shell to read; a failure exits 1 with a message on stderr.

* ``redis-url URL``: ``HOST PORT local|remote PASSWORD`` (``local`` when ``make run`` may start
  a redis-server for it: plain ``redis://`` on a loopback host).
* ``redis-state URL``: ``down`` (nothing listens), ``up`` (answers PING), or ``foreign <why>``.
* ``port-free HOST PORT``: exit 0 if a server could listen there, else 1 with the reason.
* ``http-status URL``: the HTTP status code of a GET, or ``down``.
"""

import errno
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def redis_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        sys.exit(f"REDIS_URL {url!r}: expected redis://HOST:PORT/DB")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 6379
    local = parts.scheme == "redis" and host in LOOPBACK
    password = urllib.parse.unquote(parts.password or "")
    _say(f"{host} {port} {'local' if local else 'remote'} {password}")


def redis_state(url: str) -> None:
    import redis  # from the venv; imported here so the other probes work without it

    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        try:
            socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1).close()
        except OSError:
            _say("down")
            return
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not a Redis we can use"
        _say(f"foreign {type(exc).__name__}: {exc}")
        return
    _say("up")


def port_free(host: str, port: str) -> None:
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        sys.exit(f"cannot resolve {host!r}: {exc}")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # The same option servers set, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen()
        except OSError as exc:
            reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be used: {exc}"
            sys.exit(f"{host}:{port} {reason}")


def http_status(url: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own http:// URL
            _say(str(response.status))
    except urllib.error.HTTPError as exc:
        _say(str(exc.code))
    except (OSError, ValueError):
        _say("down")


COMMANDS = {"redis-url": redis_url, "redis-state": redis_state, "port-free": port_free, "http-status": http_status}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: runlib.py {{{'|'.join(COMMANDS)}}} ARGS...")
    COMMANDS[sys.argv[1]](*sys.argv[2:])
