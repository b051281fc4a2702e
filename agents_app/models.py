"""Database tables of the agents app.

Every query made per frame or per turn has an index named after it. Statuses are ``TextChoices``
holding the reference's strings, so the database, the wire and the admin say the same thing.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from .querysets import AgentInstanceQuerySet, TurnQuerySet
from .recovery import policy as chat_recovery
from .usage.models import TurnUsage, UsageQuota  # noqa: F401 - the app's models too (docs/operations.md#usage-and-quotas)


class AgentInstance(models.Model):
    """One conversation with an agent class: ``/agents/<slug>/<name>``, in its owner's namespace.

    Instance names are per owner: every user has their own ``demo-agent/default``, and only they
    (and staff) use it. Instances without an owner form the global namespace: every instance of a
    shared class (``ChatAgent.shared = True``, any logged-in user opens the same one), and those
    code makes with ``aget(name)`` (staff reach them). ``registry.resolve`` turns an address into
    a namespace; the two partial unique constraints keep a name unique within each.

    A sub-agent (``await agent.sub_agent(ChildAgent, "child-1")``) is an instance with a
    ``parent``: its names are unique among its parent's children, and it has its parent's owner.
    Its address is the parent's plus ``/sub/<slug>/<name>`` (Cloudflare's facets; docs/protocol.md#sub-agent-addresses).
    """

    slug = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="agent_instances",
    )
    # Bumped by every clear: queued turns accepted before it are skipped, not run.
    generation = models.PositiveIntegerField(default=0)
    # The submit sequence of the newest overlapping submit under latest/merge/debounce
    # concurrency: a queued turn with a lower one is superseded (``agents_app.concurrency``).
    overlap_sequence = models.PositiveIntegerField(default=0)
    # The last turn that failed, delivered to clients through the resume handshake until a
    # later turn completes (docs/protocol.md#resume-request, case 2). Empty when there is none.
    terminal_request_id = models.CharField(max_length=200, blank=True, default="")
    terminal_error = models.TextField(blank=True, default="")
    # The instance this one is a sub-agent of (None for a top-level conversation).
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    created_at = models.DateTimeField(auto_now_add=True)
    # The last change of the conversation: every transcript write touches it
    # (``AgentInstanceQuerySet.touch``), so the instance list shows recent conversations first.
    updated_at = models.DateTimeField(auto_now=True)

    objects = AgentInstanceQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slug", "owner", "name"], condition=Q(owner__isnull=False, parent__isnull=True),
                name="unique_instance_per_owner",
            ),
            models.UniqueConstraint(
                fields=["slug", "name"], condition=Q(owner__isnull=True, parent__isnull=True),
                name="unique_ownerless_instance",
            ),
            models.UniqueConstraint(
                fields=["parent", "slug", "name"], condition=Q(parent__isnull=False), name="unique_sub_agent",
            ),
        ]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="instance_owner_recent")]

    def __str__(self) -> str:
        return self.address

    @property
    def address(self) -> str:
        """``<slug>/<name>``, after the parent's address and ``/sub/`` for a sub-agent (its URL path)."""
        own = f"{self.slug}/{self.name}"
        return f"{self.parent.address}/sub/{own}" if self.parent is not None else own


class ChatMessage(models.Model):
    """One UIMessage of an instance's transcript, stored whole as JSON.

    ``position`` orders the transcript; a message keeps its position when it is updated in place
    (tool results, approvals), and new messages go after the last one.
    """

    # No index of its own: ``unique_message_id`` and ``message_transcript_order`` both start with
    # it, and every message written would update a third (docs/decisions.md#foreign-key-indexes).
    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="messages", db_index=False)
    message_id = models.CharField(max_length=200)
    role = models.CharField(max_length=20)
    position = models.PositiveIntegerField()
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "message_id"], name="unique_message_id"),
        ]
        indexes = [models.Index(fields=["instance", "position"], name="message_transcript_order")]

    def __str__(self) -> str:
        return f"{self.role} {self.message_id}"


class RequestContext(models.Model):
    """The last custom body and client tool schemas of an instance (used by continuations)."""

    instance = models.OneToOneField(
        AgentInstance, on_delete=models.CASCADE, related_name="request_context", primary_key=True
    )
    body = models.JSONField(null=True, blank=True)
    client_tools = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"request context of {self.instance_id}"


class Turn(models.Model):
    """A durable record of one turn, from the moment it is accepted.

    At most one turn per instance is ``running`` at a time, across every process: a partial
    unique constraint enforces it on SQLite and PostgreSQL alike, so claiming a turn is a single
    conditional UPDATE that either wins or raises ``IntegrityError``.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        ERROR = "error"
        ABORTED = "aborted"
        SKIPPED = "skipped"

    # Turns that hold or wait for the instance's lock.
    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    class Kind(models.TextChoices):
        CHAT = "chat", "chat request"
        CONTINUATION = "continuation"
        PROGRAMMATIC = "programmatic", "save_messages"
        # ``continue_last_turn``: the model goes on after the last reply, in a new message.
        CONTINUE = "continue", "continue_last_turn"
        # An attempt of a recovery incident: re-runs or goes on with a turn that was cut.
        RECOVERY = "recovery"

    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="turns")
    request_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.CHAT)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    continuation = models.BooleanField(default=False)
    # The clear "generation" the turn was accepted in; a clear skips older queued turns.
    generation = models.PositiveIntegerField(default=0)
    # How ``message_concurrency`` admitted the turn when it overlapped ("" when it did not):
    # latest/merge/debounce turns carry their submit sequence, debounce ones the time they may
    # start, merge ones the transcript position where the overlapping user messages begin.
    strategy = models.CharField(max_length=10, blank=True, default="")
    submit_sequence = models.PositiveIntegerField(null=True, blank=True)
    run_after = models.DateTimeField(null=True, blank=True)
    merge_from = models.PositiveIntegerField(null=True, blank=True)
    # Channel name of the connection that sent the request (excluded from its own broadcasts).
    origin_channel = models.CharField(max_length=200, blank=True, default="")
    body = models.JSONField(null=True, blank=True)
    client_tools = models.JSONField(null=True, blank=True)
    message_ids = models.JSONField(default=list, blank=True)
    assistant_message_id = models.CharField(max_length=200, blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    # Who asked for it (the connection's or API caller's user); ``authorize_turn`` sees it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Reply attachments recorded by actions during the turn (``ctx.attach_reply``).
    attachments = models.JSONField(default=list, blank=True)
    # Which process runs it (host:pid), for crash detection by the recovery sweep.
    worker = models.CharField(max_length=200, blank=True, default="")
    # That process's memory cgroup and its OOM-kill count when it claimed the turn
    # (``recovery.memory.watch``): a death with a higher count was the OOM killer's.
    memory_watch = models.CharField(max_length=500, blank=True, default="")
    # A turn that only one process can run: it holds what the turn needs in its memory (the
    # function of ``save_messages(fn)``, which computes the messages when the turn starts).
    # Other processes leave it queued while that process lives (``turns.lock``).
    affinity = models.CharField(max_length=200, blank=True, default="")
    # Its messages go into the transcript when it starts (docs/architecture.md#programmatic-turns): they are
    # ``messages_to_store``, or computed by the function the ``affinity`` process holds.
    pending_messages = models.BooleanField(default=False)
    messages_to_store = models.JSONField(null=True, blank=True)
    # Queued turns are claimed by descending priority, then in order: a recovery attempt runs
    # before the turns queued behind the one it recovers.
    priority = models.PositiveSmallIntegerField(default=0)
    # The recovery incident this turn was cut in (its ``turns``: the cut turns and the attempts).
    incident = models.ForeignKey(
        "RecoveryIncident", null=True, blank=True, on_delete=models.SET_NULL, related_name="turns"
    )
    # A recovery attempt: the cut turn whose partial reply it deals with.
    recovers = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # What the turn handed to ``stash()``, for ``on_chat_recovery`` if it is cut.
    recovery_data = models.JSONField(null=True, blank=True)
    # Refreshed while the turn runs; a running turn whose heartbeat is stale was orphaned.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TurnQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance"], condition=Q(status="running"),
                name="one_running_turn_per_instance",
            ),
            # A request id names one turn of its conversation: cancels, resumes and terminal
            # frames address turns by it. (Its index also serves the lookups by request id.)
            models.UniqueConstraint(fields=["instance", "request_id"], name="unique_turn_request"),
        ]
        indexes = [
            models.Index(fields=["instance", "status", "id"], name="turn_queue"),
            models.Index(fields=["status", "created_at"], name="turn_sweep"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status not in self.ACTIVE_STATUSES

    def is_stale(self, generation: int, overlap_sequence: int) -> bool:
        """Accepted before the last clear, or an overlapping submit a newer one superseded.

        Such a turn ends ``skipped`` instead of running (docs/protocol.md#skip-frames).
        """
        return self.generation < generation or (
            self.submit_sequence is not None and self.submit_sequence < overlap_sequence
        )


class RecoveryIncident(models.Model):
    """A request cut by a crash or a stalled stream, and its recovery (``agents_app.recovery.policy``).

    Its identity (``incident_id``) is the root request id and the latest user message id, so the
    retry and continue attempts of one request spend one budget. Attempts are ``Turn`` rows of
    kind ``recovery``; a finished incident stays for the admin until ``sweep_expired``.
    """

    Status = models.TextChoices("Status", [(s.name, s.value) for s in chat_recovery.Status])

    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="recovery_incidents")
    incident_id = models.CharField(max_length=420)
    root_request_id = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DETECTED)
    # The kind of the latest attempt ("retry" or "continue"; "" before the first one).
    kind = models.CharField(max_length=10, blank=True, default="")
    # The budget (``chat_recovery.Budget``): attempts since the last progress, content chunks
    # produced by all attempts, when content was last produced.
    attempt = models.PositiveIntegerField(default=0)
    work = models.PositiveIntegerField(default=0)
    last_progress_at = models.DateTimeField()
    # Every attempt made, progress or not (the admin's count).
    attempts_total = models.PositiveIntegerField(default=0)
    # Cuts that were out-of-memory kills (``ChatRecovery.max_oom_retries``; never reset by progress).
    oom_attempts = models.PositiveIntegerField(default=0)
    # Why it was given up (``chat_recovery.Reason``) or skipped; the error when it failed.
    reason = models.CharField(max_length=40, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "incident_id"], name="unique_recovery_incident"),
        ]
        indexes = [
            models.Index(fields=["instance", "status"], name="incident_open"),
            models.Index(fields=["status", "finished_at"], name="incident_sweep"),
        ]

    def __str__(self) -> str:
        return f"recovery of {self.root_request_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in chat_recovery.OPEN_STATUSES


class StreamRecord(models.Model):
    """The resumable buffer of one turn's reply: metadata, with chunks in ``StreamSegment`` rows.

    A reconnecting client replays it from here, on any process. ``last_chunk_at`` drives the
    retention sweep of abandoned buffers.
    """

    class Status(models.TextChoices):
        STREAMING = "streaming"
        COMPLETED = "completed"
        ERROR = "error"

    # No index of its own: ``stream_active`` and ``stream_by_request`` start with it
    # (docs/decisions.md#foreign-key-indexes).
    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="streams", db_index=False)
    turn = models.OneToOneField(Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="stream")
    request_id = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.STREAMING)
    message_id = models.CharField(max_length=200, blank=True, default="")
    continuation = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_chunk_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["instance", "status", "-id"], name="stream_active"),
            models.Index(fields=["instance", "request_id"], name="stream_by_request"),
            models.Index(fields=["status", "completed_at"], name="stream_sweep_finished"),
            models.Index(fields=["status", "last_chunk_at"], name="stream_sweep_abandoned"),
        ]

    def __str__(self) -> str:
        return f"stream {self.request_id} ({self.status})"


class StreamSegment(models.Model):
    """Consecutive chunks of a stream, packed in one row (chunk ``first_index`` onwards)."""

    # No index of its own: ``unique_stream_segment`` starts with it (docs/decisions.md#foreign-key-indexes).
    stream = models.ForeignKey(StreamRecord, on_delete=models.CASCADE, related_name="segments", db_index=False)
    first_index = models.PositiveIntegerField()
    # JSON array of the chunk bodies (each already a JSON-encoded UIMessageChunk string).
    bodies = models.TextField()

    class Meta:
        ordering = ["first_index"]
        constraints = [
            models.UniqueConstraint(fields=["stream", "first_index"], name="unique_stream_segment"),
        ]

    def __str__(self) -> str:
        return f"segment {self.stream_id}@{self.first_index}"


class LedgerEntry(models.Model):
    """One row of the action idempotency ledger (docs/architecture.md#ledger).

    ``key`` is ``action:<name>:<idempotency key>`` or ``tool:<toolCallId>``, unique within its
    ``scope`` (the agent instance). The unique constraint is what settles a race: every process
    INSERTs a ``pending`` row and exactly one INSERT wins, on SQLite and PostgreSQL alike. A
    ``settled`` row holds the JSON result that later calls replay; a failed execution deletes
    its row so a retry runs cleanly.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        SETTLED = "settled"

    # Whose ledger: the agent instance's pk (each conversation has its own ledger, as each
    # Cloudflare agent instance has its own table: tool call ids repeat across conversations).
    # "" for calls outside any instance.
    scope = models.CharField(max_length=100, blank=True, default="")
    key = models.TextField()
    action_name = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200, blank=True, default="")
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    # sha256 of the canonical JSON of the action input (``ledger.input_hash``).
    input_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # JSON ``{"valuePresent": bool, "value": ...}``; empty while pending.
    result_json = models.TextField(blank=True, default="")
    # Set by the ledger from its clock (``now=``), not auto_now, so tests can age rows. A
    # pending row's ``updated_at`` is also its claim token: settle/release match on it.
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints = [
            # A named constraint rather than unique=True: PostgreSQL then gets no second
            # ``text_pattern_ops`` index, which the ledger never uses.
            models.UniqueConstraint(fields=["scope", "key"], name="unique_ledger_key"),
        ]
        indexes = [
            models.Index(fields=["status", "updated_at"], name="ledger_sweep"),
            # Recovery looks up the calls a crash cut (``ledger.recorded_call``).
            models.Index(fields=["scope", "tool_call_id"], name="ledger_by_call"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class PendingApproval(models.Model):
    """A durable-pause action call waiting for a human (docs/architecture.md#durable-pause).

    A row exists exactly while the call is pending: approving or rejecting *deletes* it first
    ("claim by delete"), so of any number of concurrent deciders, on any process, exactly one
    gets the row and runs or rejects the action. The turn that parked the call has long ended;
    nothing about it lives in memory.
    """

    class Risk(models.TextChoices):
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"

    # ``actpause_<uuid4>``: the id the model sees in the paused envelope.
    execution_id = models.CharField(max_length=64, primary_key=True)
    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="pending_approvals")
    # The instance's agent slug, copied here so the queue filters by agent without a join.
    agent = models.CharField(max_length=100)
    action_name = models.CharField(max_length=200)
    tool_call_id = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200, blank=True, default="")
    input = models.JSONField()
    # ``{requestId, toolCallId, action, summary, input, permissions, risk?, kind}``.
    descriptor = models.JSONField()
    # Copied out of the descriptor so the admin can filter and sort on it.
    risk = models.CharField(max_length=10, choices=Risk.choices, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "execution_id"]
        permissions = [("approve_action", "Can approve or reject paused agent actions")]
        # One per way the queue is read: in order (and the TTL sweep), per instance, per agent,
        # per action, per risk; each ends with the order so a filtered page is an index range.
        indexes = [
            models.Index(fields=["created_at", "execution_id"], name="pending_approval_created"),
            models.Index(fields=["instance", "created_at"], name="pending_approval_instance"),
            models.Index(fields=["agent", "created_at"], name="pending_approval_agent"),
            models.Index(fields=["action_name", "created_at"], name="pending_approval_action"),
            models.Index(fields=["risk", "created_at"], name="pending_approval_risk"),
        ]

    def __str__(self) -> str:
        return f"{self.action_name} ({self.execution_id})"


class ApprovalDecision(models.Model):
    """The audit log of durable-pause decisions: who decided what, when, and what came of it.

    Written in the same transaction as the claim-by-delete of the pending row, so a decision
    is never lost and never recorded twice. Expired rows (the TTL sweep) are recorded too.
    """

    class Decision(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"

    execution_id = models.CharField(max_length=64, unique=True)
    instance = models.ForeignKey(
        AgentInstance, null=True, blank=True, on_delete=models.SET_NULL, related_name="approval_decisions"
    )
    action_name = models.CharField(max_length=200)
    decision = models.CharField(max_length=10, choices=Decision.choices)
    reason = models.TextField(blank=True, default="")
    descriptor = models.JSONField()
    # What the model was told: the action's output, the rejection, or the error.
    result = models.JSONField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    decided_at = models.DateTimeField()
    # When the outcome was put where the model reads it and its continuation queued: set by
    # exactly one concluder (a conditional UPDATE), whichever process or worker runs it.
    concluded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-decided_at"]
        indexes = [models.Index(fields=["-decided_at"], name="approval_decision_recent")]

    def __str__(self) -> str:
        return f"{self.decision} {self.action_name} ({self.execution_id})"


class Schedule(models.Model):
    """A prompt (or, from code, a method) run on one agent instance on a schedule (docs/architecture.md#schedules).

    Three sources write rows: operators (the admin and the REST API), ``get_scheduled_tasks()``
    declarations (kept in line with the code by ``schedules.sync_declared``), and the agent
    scheduling API (``await agent.schedule(...)``). The ticker reads only ``spec`` (the parsed
    schedule) and ``next_run_at``: a due schedule is one indexed range, however many exist.
    """

    class Source(models.TextChoices):
        OPERATOR = "operator"
        CODE = "code", "get_scheduled_tasks()"
        AGENT = "agent", "agent.schedule()"

    class Action(models.TextChoices):
        # Post ``prompt`` as a user message and run a turn.
        PROMPT = "prompt"
        # Call the declared task's ``handler(ctx)`` (``get_scheduled_tasks()``).
        HANDLER = "handler"
        # Call the agent's method ``callback(payload, ctx)`` (``agent.schedule()``).
        METHOD = "method"

    # The task id: unique within the instance, part of every occurrence key.
    name = models.CharField(max_length=100)
    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="schedules")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.OPERATOR)
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.PROMPT)
    prompt = models.TextField(blank=True, default="")
    callback = models.CharField(max_length=200, blank=True, default="")
    payload = models.JSONField(null=True, blank=True)
    # The declared task's ``metadata``, copied into the context and the posted message.
    metadata = models.JSONField(null=True, blank=True)
    # What was written: a DSL schedule or a cron expression ("" for one-off and seconds-interval
    # schedules of the agent API), and the chosen time zone ("" for "in …" or the agent's default).
    schedule = models.CharField(max_length=200, blank=True, default="")
    timezone = models.CharField(max_length=64, blank=True, default="")
    # The parsed schedule (``schedules.language.to_spec``); ``{"kind": "once"}`` for a one-off run.
    spec = models.JSONField()
    enabled = models.BooleanField(default=True)
    # The next occurrence to claim; None once a one-off schedule has run.
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run = models.ForeignKey("ScheduleRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Failed runs since the last successful one (a paused or deleted turn is no failure).
    consecutive_failures = models.PositiveIntegerField(default=0)
    # sha256 of the declaration (code) or of callback + payload + when (idempotent agent schedules).
    definition_hash = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "scheduled prompt"
        ordering = ["instance_id", "name"]
        permissions = [("manage_schedules", "Can manage scheduled prompts")]
        constraints = [models.UniqueConstraint(fields=["instance", "name"], name="unique_schedule_name")]
        # The ticker's question, "what is due", is a range on this partial index.
        indexes = [models.Index(fields=["next_run_at"], condition=Q(enabled=True), name="schedule_due")]

    def __str__(self) -> str:
        return f"{self.name} on {self.instance}"


class ScheduleRun(models.Model):
    """One occurrence of a schedule, claimed by exactly one ticker.

    The claim is an INSERT under ``unique_schedule_occurrence`` (instance, ``<name>:<epoch ms>``):
    of two beat processes, or a retried tick, exactly one INSERT wins, on SQLite and PostgreSQL
    alike, and only the winner hands the run to a worker. A worker starts it with a conditional
    UPDATE (``claimed`` → ``running``), so a redelivered task does nothing. A prompt run is a turn
    whose request id is fixed at the claim, which also makes a second turn for it impossible.
    """

    class Status(models.TextChoices):
        CLAIMED = "claimed"
        RUNNING = "running"
        # The turn's own outcomes (``Turn.Status``), or the handler's.
        COMPLETED = "completed"
        ERROR = "error"
        ABORTED = "aborted"
        SKIPPED = "skipped"
        # It never got to a turn or handler, or the handler raised.
        FAILED = "failed"

    UNFINISHED_STATUSES = (Status.CLAIMED, Status.RUNNING)
    FAILED_STATUSES = (Status.ERROR, Status.FAILED)

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual", "run now"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="+")
    occurrence_key = models.CharField(max_length=200)
    scheduled_for = models.DateTimeField()
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.SCHEDULE)
    # Chosen by the ticker that claims it (it reads its claims back by it); a prompt run's turn
    # has this request id, so the turn cannot be accepted twice.
    request_id = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CLAIMED)
    error = models.TextField(blank=True, default="")
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_at = models.DateTimeField()
    # When a worker was last asked to run it (the claim, a re-dispatch, its start): an unfinished
    # run not attempted for ``AGENT_SCHEDULE_RUN_LEASE`` was lost on the way and is looked at again.
    attempted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "scheduled run"
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            # The occurrence key first: the ticker reads back its own claims by key.
            models.UniqueConstraint(fields=["occurrence_key", "instance"], name="unique_schedule_occurrence"),
        ]
        indexes = [
            models.Index(fields=["schedule", "-scheduled_for"], name="schedule_run_history"),
            # Runs whose task or worker may have been lost: unfinished ones, by last attempt.
            models.Index(fields=["attempted_at"], condition=Q(status__in=["claimed", "running"]),
                         name="schedule_run_unfinished"),
        ]

    def __str__(self) -> str:
        return f"{self.occurrence_key} ({self.status})"


class MCPServerConfig(models.Model):
    """An MCP server added to one instance at runtime (``handle.add_mcp_server``; docs/architecture.md#mcp-servers).

    Declared servers (``get_mcp_servers()``) live in code, not here. A row holds a URL, never a
    secret: ``headers`` maps each header to a reference (``{"source": "env"|"setting", "name",
    "prefix"}``) resolved when a process opens the connection. Every process reads these rows at
    a turn's start, so a server added through one process is used by turns on any other.
    """

    class Transport(models.TextChoices):
        STREAMABLE_HTTP = "streamable-http"
        SSE = "sse"

    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=2000)
    transport = models.CharField(max_length=20, choices=Transport.choices, default=Transport.STREAMABLE_HTTP)
    headers = models.JSONField(default=dict, blank=True)
    # The names of the tools that wait for the user's approval; ``approve_all`` puts every tool there.
    needs_approval = models.JSONField(default=list, blank=True)
    approve_all = models.BooleanField(default=False)
    tool_prefix = models.CharField(max_length=50, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MCP server"
        ordering = ["instance_id", "created_at", "pk"]
        permissions = [("manage_mcp_servers", "Can add and remove the MCP servers of agent instances")]
        constraints = [models.UniqueConstraint(fields=["instance", "name"], name="unique_mcp_server_name")]

    def __str__(self) -> str:
        return f"{self.name} on {self.instance}"


class MCPServerStatus(models.Model):
    """The last known state of one MCP server of one instance, declared or runtime: what
    ``cf_agent_mcp_servers`` carries (docs/architecture.md#mcp-servers).

    Connections are per process; whichever process opens, discovers or loses one writes here
    (last writer wins) and broadcasts, so every process reads one state and sends it on connect.
    """

    class State(models.TextChoices):
        # The reference's connection states (MCPConnectionState).
        NOT_CONNECTED = "not-connected"
        AUTHENTICATING = "authenticating"
        CONNECTING = "connecting"
        CONNECTED = "connected"
        DISCOVERING = "discovering"
        READY = "ready"
        FAILED = "failed"

    instance = models.ForeignKey(AgentInstance, on_delete=models.CASCADE, related_name="mcp_statuses")
    name = models.CharField(max_length=100)
    server_url = models.CharField(max_length=2000, blank=True, default="")
    state = models.CharField(max_length=20, choices=State.choices, default=State.NOT_CONNECTED)
    error = models.TextField(blank=True, default="")
    instructions = models.TextField(blank=True, default="")
    capabilities = models.JSONField(null=True, blank=True)
    # What the server offers, as MCP lists them (tools with their input schemas).
    tools = models.JSONField(default=list, blank=True)
    prompts = models.JSONField(default=list, blank=True)
    resources = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server state"
        verbose_name_plural = "MCP server states"
        ordering = ["instance_id", "pk"]
        constraints = [models.UniqueConstraint(fields=["instance", "name"], name="unique_mcp_status_name")]

    def __str__(self) -> str:
        return f"{self.name} on {self.instance}: {self.state}"
