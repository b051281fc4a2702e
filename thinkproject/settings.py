"""Settings for the Think-for-Django project.

Everything that differs between machines comes from the environment, with a documented default
that runs the whole system on one machine with no configuration (see README "Configuration").
"""

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

# Where the embedded SQLite database, logs and pid files live (default: ./var).
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = os.environ.get("DEBUG", "0") == "1"

# The key that signs sessions, CSRF tokens and password-reset links. Outside DEBUG it must come
# from the environment (`make run` keeps one in $VAR_DIR/secret_key): a default would be
# guessable, and a server started without one would sign with it and look fine.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment to a long random string, e.g. the output of "
            "`python3 -c 'import secrets; print(secrets.token_urlsafe(50))'`, and keep it secret and stable "
            "(DEBUG=1 uses a development key instead)."
        )
    SECRET_KEY = "dev-insecure-" + str(BASE_DIR)

# Comma-separated host names. The WebSocket Origin check uses the same list.
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")

INSTALLED_APPS = [
    # Daphne's app makes `runserver` serve through Daphne (`make run`). Importing it loads Twisted,
    # about 16 MB in every process that loads these settings, so only `runserver` has it: uvicorn,
    # the `daphne` command and Celery do not use it (bench/README.md, "Tenth round").
    *(["daphne"] if sys.argv[1:2] == ["runserver"] else []),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "agents_app",
    "agents_app.demo",
    "accounts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "thinkproject.middleware.RejectNulCharacters",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Django's database sessions and model backend, reading a session and its user with a statement
# each instead of a queryset (every socket connect and request reads both; docs/decisions.md).
SESSION_ENGINE = "agents_app.web.sessions"
AUTHENTICATION_BACKENDS = ["agents_app.web.sessions.UserBackend"]

ROOT_URLCONF = "thinkproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "thinkproject.asgi.application"

# Database: DATABASE_URL (e.g. postgres://user:pass@host/db); default an SQLite file in VAR_DIR.
# SQLite runs in WAL mode with a busy timeout and IMMEDIATE transactions so that Daphne and a
# Celery worker can write at the same time without "database is locked" errors.
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        # Seconds a connection is reused (default 10 minutes): turns touch the database several
        # times each, and reconnecting every time costs more than the queries.
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "600")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's SQLite backend whose write transactions take turns across processes at once
    # instead of in SQLite's busy handler's sleeps (thinkproject/sqlite/base.py).
    DATABASES["default"]["ENGINE"] = "thinkproject.sqlite"
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        # Seconds a writer waits for the lock before failing.
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # PostgreSQL, the production database (README "Deployment"). A turn runs the same dozen
    # hand-written statements every time (agents_app/statements.py): psycopg prepares each one on a
    # connection at its DB_PREPARE_THRESHOLD-th execution, and PostgreSQL then skips parsing and
    # planning it (docs/decisions.md#postgresql-on-the-turn-path). "off": never (behind a
    # transaction-mode pgbouncer older than 1.21, which cannot keep prepared statements).
    _prepare = os.environ.get("DB_PREPARE_THRESHOLD", "2")
    # Django's backend, which skips the health check of a connection whose last commit was less
    # than HEALTH_CHECK_DELAY seconds ago (DB_HEALTH_CHECK_DELAY, default 1; 0: check at every
    # thread hop, as Django does): two round trips a turn (thinkproject/postgresql/base.py).
    DATABASES["default"]["ENGINE"] = "thinkproject.postgresql"
    DATABASES["default"]["HEALTH_CHECK_DELAY"] = float(os.environ.get("DB_HEALTH_CHECK_DELAY", "1"))
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "prepare_threshold": None if _prepare == "off" else int(_prepare),
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Serve /static/ from the ASGI app (default on): right for the embedded setup; a production
# deployment runs collectstatic, serves STATIC_ROOT from its proxy and sets SERVE_STATIC=0.
SERVE_STATIC = os.environ.get("SERVE_STATIC", "1") == "1"
# The garbage collector's thresholds in server processes (thinkproject/asgi.py): a pass over the
# young objects every GC_THRESHOLDS[0] allocations (Python's default is 700). What a turn holds
# while it streams (its transcript, history, encoder) lives for the turn: with a pass every 700
# allocations it was walked again and again, promoted, and walked again in the older generations:
# 4 % of a server's CPU in the 50-room benchmark, against 1 % at 20,000, whose passes take about
# 4 ms each (bench/README.md, "Fifth round").
try:
    GC_THRESHOLDS = tuple(int(value) for value in os.environ.get("GC_THRESHOLDS", "20000,20,20").split(","))
    if not 1 <= len(GC_THRESHOLDS) <= 3 or min(GC_THRESHOLDS) < 0:
        raise ValueError
except ValueError:
    raise ImproperlyConfigured(
        f"GC_THRESHOLDS={os.environ.get('GC_THRESHOLDS')!r}: give one to three non-negative integers "
        "separated by commas (default 20000,20,20; see gc.set_threshold)."
    ) from None

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "agents_app:instance-list"
LOGOUT_REDIRECT_URL = "login"

# Accounts (the accounts app). Anyone may make an account at /accounts/signup/ when SIGNUP_OPEN=1;
# by default only staff bring people in, by invitation (/accounts/invite/).
SIGNUP_OPEN = os.environ.get("SIGNUP_OPEN", "0") == "1"
# How long an invitation link works (default 7 days).
INVITATION_MAX_AGE = timedelta(days=7)

# Email (invitations, password resets): printed to the console (make run: var/log/daphne.log)
# unless EMAIL_BACKEND says otherwise, e.g. django.core.mail.backends.smtp.EmailBackend with
# EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD and EMAIL_USE_TLS=1.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("EMAIL_USE_TLS", "0") == "1"
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "Think for Django <webmaster@localhost>")

# Redis: channel layer (cross-process fan-out) and Celery broker.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# CHANNEL_LAYER=memory keeps everything in one process (unit tests); the default is Redis.
if os.environ.get("CHANNEL_LAYER", "redis") == "memory":
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis with a blocking connection pool (a burst of publishes waits for a free
            # connection instead of failing with "Too many connections") whose groups are kept in
            # each process and cross processes with one PUBLISH (thinkproject/channel_layer.py).
            "BACKEND": "thinkproject.channel_layer.FanoutRedisChannelLayer",
            # A long reply is thousands of frames; the default capacity (100) would drop them.
            # redis-py 8 reads with a 5 s socket timeout, the same as channels_redis's 5 s blocking
            # pop: an idle consumer's read would then time out and kill it (close 1011). A longer
            # socket timeout lets the pop return first. REDIS_MAX_CONNECTIONS connections per
            # process at most (opened as needed); a publish waits up to 60 s for one: with a
            # thousand sockets on one process, its event loop is what makes them wait.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15,
                           "max_connections": int(os.environ.get("REDIS_MAX_CONNECTIONS", "500")), "timeout": 60}],
                "capacity": 5000, "expiry": 60,
            },
        }
    }

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = os.environ.get("CELERY_TASK_ALWAYS_EAGER", "0") == "1"
# Celery beat's own schedule is this code (below), kept by beat in a file under VAR_DIR: system
# tasks are not rows an operator could edit. Operators' scheduled prompts are agents_app rows,
# which the "agents-run-due-schedules" task runs (README "Scheduled prompts").
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Seconds between two claims of due scheduled prompts (default 5): how late a run may start.
AGENT_SCHEDULE_TICK_SECONDS = float(os.environ.get("AGENT_SCHEDULE_TICK_SECONDS", "5"))
# How long a stopping server lets its running turns end before handing them to recovery.
AGENT_SHUTDOWN_GRACE_SECONDS = float(os.environ.get("AGENT_SHUTDOWN_GRACE_SECONDS", "10"))
# Periodic maintenance (Celery beat): every minute, run turns no process picked up; every
# AGENT_RECOVERY_SWEEP_SECONDS (10), cut and recover turns whose process died (a turn's lease is
# 15 s, so a crash on another host is found within 25 s, one on the same host at the next sweep);
# every five minutes, drop expired stream buffers.
CELERY_BEAT_SCHEDULE = {
    # Claim the scheduled prompts that are due and queue their runs. A tick that waited longer
    # than the next one is dropped (the next claims everything due by then).
    "agents-run-due-schedules": {
        "task": "agents_app.run_due_schedules",
        "schedule": timedelta(seconds=AGENT_SCHEDULE_TICK_SECONDS),
        "options": {"expires": AGENT_SCHEDULE_TICK_SECONDS},
    },
    # Bring the schedules agents declare in code (get_scheduled_tasks) in line with the code.
    "agents-sync-declared-schedules": {
        "task": "agents_app.sync_declared_schedules",
        "schedule": crontab(minute="*/10"),
    },
    "agents-drain-stalled-instances": {
        "task": "agents_app.drain_stalled_instances",
        "schedule": crontab(minute="*"),
    },
    "agents-recover-interrupted-turns": {
        "task": "agents_app.recover_interrupted_turns",
        "schedule": timedelta(seconds=float(os.environ.get("AGENT_RECOVERY_SWEEP_SECONDS", "10"))),
    },
    # Hourly, drop recovery incidents that ended a week ago (the admin shows them until then).
    "agents-sweep-recovery-incidents": {
        "task": "agents_app.sweep_recovery_incidents",
        "schedule": crontab(minute=41),
    },
    "agents-sweep-stream-buffers": {
        "task": "agents_app.sweep_stream_buffers",
        "schedule": crontab(minute="*/5"),
    },
    # Hourly (the spec's ledger sweep throttle), drop action-ledger rows past retention.
    "agents-sweep-action-ledger": {
        "task": "agents_app.sweep_action_ledger",
        "schedule": crontab(minute=17),
    },
    # Hourly, drop parked durable-pause calls nobody decided within AGENT_ACTION_PENDING_APPROVAL_TTL.
    "agents-sweep-pending-approvals": {
        "task": "agents_app.sweep_pending_approvals",
        "schedule": crontab(minute=23),
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The browsable API shows docstrings' literals (``name``) as code, not as doubled backticks.
    "VIEW_DESCRIPTION_FUNCTION": "agents_app.api.descriptions.view_description",
}

# The OpenAPI schema (/api/schema/) and its docs: Swagger UI at /api/docs/ and Redoc at /api/redoc/,
# both served from /static/ (drf-spectacular-sidecar), so they work with no network.
SPECTACULAR_SETTINGS = {
    "TITLE": "Think for Django API",
    "DESCRIPTION": (BASE_DIR / "agents_app" / "api" / "overview.md").read_text(),
    "VERSION": "0.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No schema validator badge: it would send the schema to a public service.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    # Descriptions in Markdown (docstrings are reStructuredText), after the default enum hook.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agents_app.api.descriptions.markdown_descriptions",
    ],
}

# --- agents_app settings (documented defaults in agents_app/conf.py) -----------------------------
# Import strings of the agent classes this site serves; each gets a URL slug from its class name.
AGENT_CLASSES = [
    "agents_app.demo.agents.DemoAgent",
    # The demo agent's research sub-agent (its "research" tool).
    "agents_app.demo.agents.ResearchAgent",
]
# The model every agent uses unless it overrides get_model(): "demo" (offline), or a provider
# string such as "openai-chat:gpt-4o", "anthropic:claude-sonnet-4-5", "ollama:llama3.2", or
# "openai-compatible:<model>" with AGENT_MODEL_BASE_URL (any OpenAI-compatible server).
AGENT_MODEL = os.environ.get("AGENT_MODEL", "demo")
AGENT_MODEL_BASE_URL = os.environ.get("AGENT_MODEL_BASE_URL") or None
AGENT_MODEL_API_KEY = os.environ.get("AGENT_MODEL_API_KEY") or None
# Milliseconds between words of the offline demo model (0 in tests and benchmarks).
AGENT_DEMO_DELAY_MS = int(os.environ.get("AGENT_DEMO_DELAY_MS", "15"))
# The demo MCP server's URL (`make run` starts it and sets this); DemoAgent declares it when set.
DEMO_MCP_URL = os.environ.get("DEMO_MCP_URL", "")
# The secrets MCP servers added at runtime may reference, comma-separated "env:NAME" / "setting:NAME"
# (default none; README "MCP servers").
AGENT_MCP_SECRET_NAMES = [n.strip() for n in os.environ.get("AGENT_MCP_SECRET_NAMES", "").split(",") if n.strip()]
# Store reply chunks for mid-stream resume (default on; off only to measure its cost).
AGENT_STREAM_BUFFER = os.environ.get("AGENT_STREAM_BUFFER", "1") == "1"
# First model request of a turn through pydantic-ai's direct API (default on; agents_app/conf.py).
AGENT_DIRECT_FIRST_STEP = os.environ.get("AGENT_DIRECT_FIRST_STEP", "1") == "1"
# On PostgreSQL, waits for turns woken by LISTEN/NOTIFY (default on; 0 behind a pooler in
# transaction mode, which cannot LISTEN: agents_app/waits.py).
AGENT_LISTEN_NOTIFY = os.environ.get("AGENT_LISTEN_NOTIFY", "1") == "1"
# Who may scrape /metrics: a bearer token, and client addresses or networks, comma-separated
# (docs/operations.md#metrics). Traces of turns and model calls with OpenTelemetry (default off).
AGENT_METRICS_TOKEN = os.environ.get("AGENT_METRICS_TOKEN") or None
AGENT_METRICS_ALLOWED_IPS = [a for a in os.environ.get("AGENT_METRICS_ALLOWED_IPS", "127.0.0.1,::1").split(",") if a]
AGENT_OTEL_TRACING = os.environ.get("AGENT_OTEL_TRACING", "0") == "1"
# Tokens each user may use per UTC day and per month (empty: no limit; per-user overrides in the
# admin, per-agent limits in AGENT_USAGE_QUOTAS: docs/operations.md#usage-and-quotas).
AGENT_USAGE_QUOTAS = {
    "user_per_day": int(os.environ.get("AGENT_QUOTA_USER_DAY_TOKENS") or 0) or None,
    "user_per_month": int(os.environ.get("AGENT_QUOTA_USER_MONTH_TOKENS") or 0) or None,
}

# Daphne (make run: runserver) refuses WebSocket messages above 1 MiB by closing the socket; accept up to 16 MiB so an
# oversized chat frame reaches the app and gets a clear error frame (AGENT_MAX_FRAME_BYTES is the
# real limit). Plain `daphne` needs --websocket-max-message-size/--websocket-max-frame-size, uvicorn
# --ws-max-size (README "Deployment").
DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
DAPHNE_WEBSOCKET_MAX_FRAME_SIZE = 16 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "agents_app": {"handlers": ["console"], "level": os.environ.get("AGENT_LOG_LEVEL", "INFO")},
        # A failed probe check is in /readyz's answer; logged, it would be a traceback a second.
        "health_check": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
