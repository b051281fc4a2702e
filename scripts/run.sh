#!/usr/bin/env bash
# `make run`: the whole system on one machine, on the embedded defaults.
#
#   .venv (runtime requirements) -> migrate -> Redis -> seed_demo -> demo MCP server, Daphne, Celery worker, beat
#
# Every server runs in its own session/process group with its output in var/log/<name>.log.
# Ctrl-C (SIGINT) or SIGTERM stops everything this script started, and only that: a Redis that
# was already listening at REDIS_URL is used, never stopped. A server that dies during start-up,
# or later, stops the rest with its log tail and a non-zero exit.
#
# Environment: HOST, PORT (Daphne, default 127.0.0.1:8000), REDIS_URL, VAR_DIR, plus everything
# thinkproject/settings.py reads (README "Configuration").
#
# Functions called from traps and through wait_until look unreachable to shellcheck 0.9:
# shellcheck disable=SC2317
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
export DJANGO_SETTINGS_MODULE=thinkproject.settings
export VAR_DIR=${VAR_DIR:-$ROOT/var}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export PYTHONUNBUFFERED=1
LOG_DIR=$VAR_DIR/log
PY=$ROOT/.venv/bin/python
RUNLIB=$ROOT/scripts/runlib.py
STARTUP_TIMEOUT=${STARTUP_TIMEOUT:-60}

# Servers started by this script, in start order: pid (= process group id) and name.
PIDS=()
NAMES=()

# Bold/red prefixes on a terminal only, so logs and CI output stay plain text.
bold='' red='' plain=''
if [[ -t 1 ]]; then bold=$'\033[1m' red=$'\033[1;31m' plain=$'\033[0m'; fi
say() { printf '%s[make run]%s %s\n' "$bold" "$plain" "$*"; }
die() {
    printf '%s[make run] error:%s %s\n' "$red" "$plain" "$*" >&2
    exit 1
}

# True while $1 runs and is not a zombie (a dead child we have not reaped yet). Reads /proc so
# that no procps is needed.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Stop one server: SIGTERM to its main process so it shuts down its own children cleanly, then
# SIGKILL to the whole process group after the grace period (or at once, for stragglers such as
# orphaned pool processes), then reap it.
stop_server() {
    local pid=$1 name=$2 grace=${3:-15}
    local deadline=$((SECONDS + grace))
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "$pid"; then
        say "$name did not stop within ${grace}s; killing it"
    fi
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# Stop every server, newest first: beat and the worker before Daphne, Redis last (so Celery can
# shut down while its broker is still there). Runs once, from the EXIT trap.
cleanup() {
    trap - EXIT INT TERM
    local i
    if ((${#PIDS[@]} > 0)); then
        say "stopping ${NAMES[*]}"
        for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
            stop_server "${PIDS[i]}" "${NAMES[i]}"
        done
        say "stopped"
    fi
}
trap cleanup EXIT
# A signal ends the script through `exit`, which runs the EXIT trap (cleanup) once.
trap 'echo; say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# Start "$@" as server $name in a new session (its own process group, no controlling terminal,
# so a terminal Ctrl-C reaches only this script, which then stops the servers in order).
# The previous run's log is kept as <name>.log.1.
start_server() {
    local name=$1
    shift
    local log=$LOG_DIR/$name.log
    [[ -f $log ]] && mv -f "$log" "$log.1"
    setsid "$@" </dev/null >"$log" 2>&1 &
    PIDS+=("$!")
    NAMES+=("$name")
}

# Fail start-up with the server's log tail if it has exited.
check_alive() {
    local pid=$1 name=$2 status=0
    if ! alive "$pid"; then
        wait "$pid" || status=$?
        echo "---- last lines of $LOG_DIR/$name.log ----" >&2
        tail -n 25 "$LOG_DIR/$name.log" >&2 || true
        echo "----" >&2
        die "$name exited with status $status during start-up (log: $LOG_DIR/$name.log)"
    fi
}

# Wait until `$3...` succeeds, failing if server $2 (pid $1) dies or STARTUP_TIMEOUT passes.
wait_until() {
    local pid=$1 name=$2
    shift 2
    local deadline=$((SECONDS + STARTUP_TIMEOUT))
    until "$@"; do
        check_alive "$pid" "$name"
        ((SECONDS < deadline)) || die "$name did not become ready within ${STARTUP_TIMEOUT}s (log: $LOG_DIR/$name.log)"
        sleep 0.3
    done
    check_alive "$pid" "$name"
}

log_has() { grep -q -- "$2" "$LOG_DIR/$1.log" 2>/dev/null; }
redis_up() { [[ $("$PY" "$RUNLIB" redis-state "$REDIS_URL") == up ]]; }
http_ready() { [[ $("$PY" "$RUNLIB" http-status "$1") != down ]]; }

# --- 1. Python environment -----------------------------------------------------------------------
scripts/venv.sh requirements.txt
mkdir -p "$LOG_DIR"

# --- 2. Fail early when Daphne's port is taken ---------------------------------------------------
if ! port_error=$("$PY" "$RUNLIB" port-free "$HOST" "$PORT" 2>&1); then
    die "Daphne cannot listen: $port_error. Stop what uses it (another 'make run'?) or pick another port: PORT=8001 make run"
fi

# The demo's MCP server (agents_app/demo/mcp_server.py) listens on loopback, next to Daphne's port;
# DEMO_MCP_URL makes DemoAgent declare it (README "MCP servers"). DEMO_MCP_PORT moves it.
DEMO_MCP_PORT=${DEMO_MCP_PORT:-$((PORT + 1))}
if ! port_error=$("$PY" "$RUNLIB" port-free 127.0.0.1 "$DEMO_MCP_PORT" 2>&1); then
    die "the demo MCP server cannot listen: $port_error. Pick another port: DEMO_MCP_PORT=8101 make run"
fi
export DEMO_MCP_URL=http://127.0.0.1:$DEMO_MCP_PORT/mcp

# The production settings refuse to start without SECRET_KEY: one is made once and kept in
# $VAR_DIR/secret_key (mode 600), so logins survive restarts.
if [[ -z ${SECRET_KEY:-} ]]; then
    key_file=$VAR_DIR/secret_key
    if [[ ! -s $key_file ]]; then
        (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(50))' >"$key_file")
    fi
    SECRET_KEY=$(<"$key_file")
    export SECRET_KEY
fi

# --- 3. Database -----------------------------------------------------------------------------------
say "migrating the database"
"$PY" manage.py migrate --noinput

# --- 4. Redis (channel layer + Celery broker) ----------------------------------------------------------
read -r redis_host redis_port redis_locality redis_password < <("$PY" "$RUNLIB" redis-url "$REDIS_URL")
redis_state=$("$PY" "$RUNLIB" redis-state "$REDIS_URL")
if [[ $redis_state == up ]]; then
    say "using the Redis already running at $REDIS_URL"
elif [[ $redis_state == foreign* && $redis_locality == local ]]; then
    die "something listens at $REDIS_URL but is not a usable Redis (${redis_state#foreign }). Free port $redis_port or set REDIS_URL."
elif [[ $redis_state == foreign* ]]; then
    die "Redis at $REDIS_URL is not usable (${redis_state#foreign })"
elif [[ $redis_locality != local ]]; then
    die "Redis at $REDIS_URL is not reachable; start it, or unset REDIS_URL to let 'make run' start one"
else
    if ! command -v redis-server >/dev/null; then
        install_cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server"
        if ((EUID != 0)); then
            die "redis-server is not installed. Install it, then run 'make run' again: sudo sh -c '$install_cmd'"
        fi
        say "redis-server is not installed; installing it: $install_cmd"
        sh -c "$install_cmd"
        # Debian's package may have started its own service on the default port: use it then.
        redis_state=$("$PY" "$RUNLIB" redis-state "$REDIS_URL")
    fi
    if [[ $redis_state == up ]]; then
        say "using the Redis service the package started at $REDIS_URL"
    else
        # A local server for this checkout: loopback only, data (RDB snapshots) in var/redis.
        mkdir -p "$VAR_DIR/redis"
        bind=127.0.0.1
        [[ $redis_host == ::1 ]] && bind=::1
        redis_args=(--bind "$bind" --port "$redis_port" --dir "$VAR_DIR/redis" --daemonize no --save "60 1")
        [[ -n $redis_password ]] && redis_args+=(--requirepass "$redis_password")
        say "starting redis-server on $bind:$redis_port (data: $VAR_DIR/redis)"
        start_server redis redis-server "${redis_args[@]}"
        wait_until "${PIDS[-1]}" redis redis_up
    fi
fi

# --- 5. Demo data: the staff user (password printed once) and an instance per agent class --------
seed_output=$("$PY" manage.py seed_demo)
printf '%s\n' "$seed_output"
# The schedules agents declare in code, as the code now declares them.
"$PY" manage.py sync_schedules >/dev/null

# --- 6. Daphne, Celery worker, Celery beat ---------------------------------------------------------
# Daphne through Django's `runserver`, which the daphne app replaces with Daphne itself: the same
# ASGI application and server as the `daphne` command, plus /static/ served from the apps'
# static/ folders (--insecure: also with DEBUG=0), so the chat page works with no collectstatic
# and no extra web server. --noreload: one process, which stops on SIGTERM.
# The demo MCP server first: DemoAgent's turns on Daphne and the worker connect to it.
say "starting the demo MCP server on 127.0.0.1:$DEMO_MCP_PORT"
start_server mcp-demo "$PY" -m agents_app.demo.mcp_server --host 127.0.0.1 --port "$DEMO_MCP_PORT"
wait_until "${PIDS[-1]}" mcp-demo http_ready "$DEMO_MCP_URL"

addrport="$HOST:$PORT"
[[ $HOST == *:* ]] && addrport="[$HOST]:$PORT"
say "starting Daphne on $addrport"
start_server daphne "$PY" manage.py runserver --noreload --insecure "$addrport"
daphne_pid=${PIDS[-1]}

say "starting the Celery worker"
start_server celery-worker "$ROOT/.venv/bin/celery" -A thinkproject worker --pool threads --concurrency 50 -l info
worker_pid=${PIDS[-1]}

say "starting Celery beat"
start_server celery-beat "$ROOT/.venv/bin/celery" -A thinkproject beat -l info
beat_pid=${PIDS[-1]}

# The URL a browser on this machine uses (a wildcard bind address is not one).
case $HOST in
    0.0.0.0) url_host=127.0.0.1 ;;
    ::) url_host="[::1]" ;;
    *:*) url_host="[$HOST]" ;;
    *) url_host=$HOST ;;
esac
base_url="http://$url_host:$PORT"

wait_until "$daphne_pid" daphne http_ready "$base_url/accounts/login/"
wait_until "$worker_pid" celery-worker log_has celery-worker "ready."
wait_until "$beat_pid" celery-beat log_has celery-beat "beat: Starting"

# Mail goes to the console (Daphne's log) unless EMAIL_BACKEND sends it somewhere.
email_line=""
if [[ ${EMAIL_BACKEND:-console} == *console* ]]; then
    email_line="  Email:   invitations and password resets are printed to $LOG_DIR/daphne.log"$'\n'
fi
login_line=$(grep -m1 "password:" <<<"$seed_output" || true)
if [[ -n $login_line ]]; then
    login_help="user 'admin', password ${login_line##*password: } (printed once: note it)"
else
    login_help="user 'admin' (password printed on the first run; reset: .venv/bin/python manage.py changepassword admin)"
fi

cat <<EOF

================================================================================
  Think for Django is running.

  Chat:    $base_url/
  Admin:   $base_url/admin/
  API:     $base_url/api/  (docs: $base_url/api/docs/, Redoc: $base_url/api/redoc/)
  Log in:  $login_help
${email_line}  Model:   ${AGENT_MODEL:-demo}$([[ ${AGENT_MODEL:-demo} == demo ]] && echo " (offline demo model: try /slow 40, /fail, /tool get_weather {\"city\": \"Oslo\"})")
  MCP:     /tool convert_units {"value": 10, "from_unit": "km", "to_unit": "mi"}  (demo-tools, an MCP server at $DEMO_MCP_URL)
  Actions: /tool refund_order {"order_id": "A1", "amount": 250}  (Approve in the chat; rows in Admin > Refunds)
           /tool deploy_release {"version": "1.4.2"}  (staff approve it in Admin > Pending approvals)
  Logs:    $LOG_DIR/{daphne,celery-worker,celery-beat,mcp-demo$([[ ${NAMES[0]} == redis ]] && echo ",redis")}.log

  Press Ctrl-C to stop everything.
================================================================================

EOF

# --- 7. Supervise: any server exiting ends the run (the EXIT trap stops the others) -------------------
status=0
wait -n -p exited_pid "${PIDS[@]}" || status=$?
for i in "${!PIDS[@]}"; do
    if [[ ${PIDS[i]} == "${exited_pid:-}" ]]; then
        echo "---- last lines of $LOG_DIR/${NAMES[i]}.log ----" >&2
        tail -n 25 "$LOG_DIR/${NAMES[i]}.log" >&2 || true
        die "${NAMES[i]} exited unexpectedly with status $status; stopping the others"
    fi
done
exit 1
