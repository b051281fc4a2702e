/*
 * Think for Django: the chat page's client for the cf_agent_* chat protocol
 * (the protocol of Cloudflare's AIChatAgent / useAgentChat).
 *
 * No build step, no dependencies. The page provides:
 *   <section id="chat" data-agent="<slug>" data-name="<instance>"> with #messages, #composer,
 *   #input, #send, #stop, #clear, #status and (optionally) #error.
 *
 * Flow: GET /agents/<slug>/<name>/get-messages, then open ws(s)://<host>/agents/<slug>/<name>.
 * Every (re)open sends cf_agent_stream_resume_request; replies stream as
 * cf_agent_use_chat_response frames whose body is one UIMessageChunk.
 * All model text is put into the DOM with textContent, never innerHTML.
 */
(() => {
  "use strict";

  const root = document.getElementById("chat");
  if (!root) return;

  // ---------------------------------------------------------------- constants
  const T = {
    MESSAGES: "cf_agent_chat_messages",
    REQUEST: "cf_agent_use_chat_request",
    RESPONSE: "cf_agent_use_chat_response",
    CLEAR: "cf_agent_chat_clear",
    CANCEL: "cf_agent_chat_request_cancel",
    RESUMING: "cf_agent_stream_resuming",
    RESUME_ACK: "cf_agent_stream_resume_ack",
    RESUME_REQUEST: "cf_agent_stream_resume_request",
    RESUME_NONE: "cf_agent_stream_resume_none",
    PENDING: "cf_agent_stream_pending",
    TOOL_RESULT: "cf_agent_tool_result",
    TOOL_APPROVAL: "cf_agent_tool_approval",
    MESSAGE_UPDATED: "cf_agent_message_updated",
    RECOVERING: "cf_agent_chat_recovering",
    IDENTITY: "cf_agent_identity",
    ERROR: "cf_agent_error",
  };
  const RECONNECT_MIN_MS = 500;
  const RECONNECT_FACTOR = 1.5;
  const RECONNECT_MAX_MS = 8000;
  const CONNECT_TIMEOUT_MS = 4000;
  const PROBE_TIMEOUT_MS = 5000;
  const PENDING_TIMEOUT_MS = 60000;
  const TERMINAL_TOOL_STATES = new Set(["output-available", "output-error", "output-denied"]);

  // Client tools: executed by this page when the model calls them.
  const CLIENT_TOOL_IMPLS = {
    getBrowserInfo: async () => ({
      userAgent: navigator.userAgent,
      language: navigator.language,
      timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    }),
  };
  const CLIENT_TOOLS = [
    {
      name: "getBrowserInfo",
      description: "The user's browser: user agent, preferred language and time zone.",
      parameters: { type: "object", properties: {} },
    },
  ];

  // ---------------------------------------------------------------- DOM
  const $ = (id) => document.getElementById(id);
  const listEl = $("messages");
  const form = $("composer");
  const input = $("input");
  const sendBtn = $("send");
  const stopBtn = $("stop");
  const clearBtn = $("clear");
  const statusEl = $("status");
  let errorEl = $("error");
  if (!errorEl) {
    errorEl = document.createElement("div");
    errorEl.id = "error";
    errorEl.className = "error-banner";
    errorEl.setAttribute("role", "alert");
    errorEl.hidden = true;
    form.before(errorEl);
  }

  const slug = root.dataset.agent || "";
  const name = root.dataset.name || "default";
  const basePath = `/agents/${encodeURIComponent(slug)}/${encodeURIComponent(name)}`;

  // ---------------------------------------------------------------- ids
  const NANO = "useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict";
  const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  function randomId(size, alphabet) {
    const bytes = crypto.getRandomValues(new Uint8Array(size));
    let out = "";
    for (const b of bytes) out += alphabet[b % alphabet.length];
    return out;
  }
  const nanoid = (size = 8) => randomId(size, NANO);
  const messageId = () => randomId(16, ALNUM);
  // PartySocket's connection id: one per page, the same on every reconnect.
  const connectionPk = [8, 4, 4, 4, 12].map((n) => randomId(n, "0123456789abcdef")).join("-");

  // ---------------------------------------------------------------- state
  /** @type {Array<{id:string, role:string, parts:Array<any>, metadata?:any}>} */
  let messages = [];
  /** Active streams by request id. */
  const streams = new Map();
  /**
   * Request ids whose further frames this page ignores: stopped or cleared locally, or ended (a
   * request id streams once; frames after its terminal frame repeat it, e.g. the live frames of a
   * continuation that finished before this page's ACK, arriving after the replay that closed it).
   */
  const ignored = new Set();
  /** Error text shown under a message, by message id (survives transcript replacement). */
  const messageErrors = new Map();
  /** Raw streamed tool input text (tool-input-delta), by part object. */
  const toolInputText = new WeakMap();
  /** Tool calls this page already answered (client tools) or responded to (approvals). */
  const handledToolCalls = new Set();
  /** Open <details> (reasoning) by "messageId:index". */
  const openDetails = new Set();

  let ownRequestId = null; // the request this page sent, until its terminal frame
  let expectContinuation = false; // a tool result/approval was sent with autoContinue
  let ws = null;
  let connected = false;
  let terminal = false; // a 4xxx / 1008 close: no reconnect
  let everOpened = false;
  let attempts = 0;
  let reconnectTimer = null;
  let connectTimer = null;
  let lastServerError = null;
  let recovering = false;
  let unloading = false;
  /** Per-socket resume bookkeeping. */
  let acked = new Set();
  const probes = new Map(); // probeId -> {purpose: "open"|"continuation", timer}
  let historyLoaded = false;

  // ---------------------------------------------------------------- helpers
  function isToolPart(part) {
    return typeof part?.type === "string" && (part.type.startsWith("tool-") || part.type === "dynamic-tool");
  }
  function toolNameOf(part) {
    if (part.type.startsWith("tool-")) return part.type.slice(5);
    return part.toolName || "tool";
  }
  function lastAssistant() {
    for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "assistant") return messages[i];
    return null;
  }
  function findMessage(id) {
    return messages.find((m) => m.id === id) || null;
  }
  function findToolPart(toolCallId, preferred) {
    if (preferred) {
      const part = preferred.parts.find((p) => isToolPart(p) && p.toolCallId === toolCallId);
      if (part) return { message: preferred, part };
    }
    for (let i = messages.length - 1; i >= 0; i--) {
      const part = messages[i].parts.find((p) => isToolPart(p) && p.toolCallId === toolCallId);
      if (part) return { message: messages[i], part };
    }
    return null;
  }
  function hasContent(message) {
    return !!message && message.parts.some((p) => p.type !== "step-start");
  }
  function mergeMetadata(message, metadata) {
    if (metadata && typeof metadata === "object") message.metadata = { ...(message.metadata || {}), ...metadata };
  }
  function isBusy() {
    return ownRequestId !== null || streams.size > 0;
  }
  function streamOf(message) {
    for (const s of streams.values()) if (s.message === message) return s;
    return null;
  }

  // ---------------------------------------------------------------- socket
  function wsUrl() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    return `${scheme}://${location.host}${basePath}?_pk=${connectionPk}`;
  }

  function send(frame) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  function connect() {
    reconnectTimer = null;
    if (terminal || unloading) return;
    refreshStatus();
    let sock;
    try {
      sock = new WebSocket(wsUrl());
    } catch (err) {
      showError(`Cannot open the connection: ${err.message || err}`);
      scheduleReconnect();
      return;
    }
    ws = sock;
    connectTimer = setTimeout(() => {
      if (sock.readyState === WebSocket.CONNECTING) sock.close();
    }, CONNECT_TIMEOUT_MS);
    sock.onopen = () => {
      if (sock !== ws) return;
      clearTimeout(connectTimer);
      const reconnect = everOpened;
      everOpened = true;
      connected = true;
      acked = new Set();
      lastServerError = null;
      statusNote = null;
      sendProbe(reconnect ? "reconnect" : "open");
      updateControls();
    };
    sock.onmessage = (ev) => {
      if (sock !== ws) return;
      let frame;
      try {
        frame = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (frame && typeof frame === "object") handleFrame(frame);
    };
    sock.onclose = (ev) => {
      if (sock !== ws) return;
      clearTimeout(connectTimer);
      connected = false;
      ws = null;
      for (const probe of probes.values()) clearTimeout(probe.timer);
      probes.clear();
      // Streams of the dead socket are kept (partial text stays) until the resume handshake
      // of the next socket says whether they go on; so is a request that had no reply yet.
      if (ownRequestId && !streams.has(ownRequestId)) newStream(ownRequestId, { own: true });
      for (const s of streams.values()) s.interrupted = true;
      if (ev.code === 1008 || (ev.code >= 4000 && ev.code <= 4999)) {
        terminal = true;
        terminalReason = lastServerError || ev.reason || `connection refused (code ${ev.code})`;
        showError(terminalReason);
        updateControls();
        return;
      }
      if (!unloading) scheduleReconnect();
      updateControls();
    };
  }

  function scheduleReconnect() {
    if (terminal || reconnectTimer) return;
    attempts += 1;
    const delay = Math.min(RECONNECT_MIN_MS * RECONNECT_FACTOR ** (attempts - 1), RECONNECT_MAX_MS);
    reconnectTimer = setTimeout(connect, delay);
    refreshStatus();
  }

  window.addEventListener("online", () => {
    if (reconnectTimer) {
      clearTimeout(reconnectTimer);
      connect();
    }
  });
  window.addEventListener("pagehide", () => {
    unloading = true;
  });
  window.addEventListener("pageshow", (ev) => {
    if (ev.persisted && unloading) {
      unloading = false;
      if (!ws && !terminal) connect();
    }
  });

  // ---------------------------------------------------------------- resume handshake
  function sendProbe(purpose) {
    const probeId = nanoid(8);
    const probe = { purpose, timer: null };
    probes.set(probeId, probe);
    probe.timer = setTimeout(() => probeSettled(probeId, false), PROBE_TIMEOUT_MS);
    send({ type: T.RESUME_REQUEST, probeId });
  }

  function probeFor(probeId) {
    if (probeId) return probes.has(probeId) ? probeId : null;
    // A frame without probeId answers the oldest outstanding probe.
    const first = probes.keys().next();
    return first.done ? null : first.value;
  }

  /** A probe got its answer: `resumed` true when a stream is being resumed. */
  function probeSettled(probeId, resumed) {
    const probe = probes.get(probeId);
    if (!probe) return;
    clearTimeout(probe.timer);
    probes.delete(probeId);
    statusNote = null;
    refreshStatus();
    if (resumed) return;
    if (probe.purpose === "continuation") {
      expectContinuation = false;
      return;
    }
    // Nothing to resume: streams cut off by a dropped socket have ended meanwhile.
    const lost = dropInterrupted(null);
    if (probe.purpose === "reconnect" || lost) refreshHistory();
  }

  /** End the streams a dropped socket cut off (except `keepId`); true if there were any. */
  function dropInterrupted(keepId) {
    let lost = false;
    for (const s of [...streams.values()]) {
      if (s.interrupted && s.id !== keepId) {
        lost = true;
        endStream(s, "interrupted");
      }
    }
    return lost;
  }

  function onResuming(frame) {
    const id = frame.id;
    if (typeof id !== "string" || !id) return;
    const probeId = probeFor(frame.probeId);
    if (probeId) probeSettled(probeId, true);
    // One stream is active per instance: any other cut-off stream has finished meanwhile.
    if (dropInterrupted(id)) refreshHistory();
    // Always ACK (once per id per socket): until it does, the server sends this socket no live
    // frames. A stream stopped or cleared here is ACKed too; its replay is then ignored.
    if (!acked.has(id)) {
      acked.add(id);
      send({ type: T.RESUME_ACK, id });
    }
    if (ignored.has(id)) return;
    let s = streams.get(id);
    if (!s) {
      // A stream we learn about by resuming is followed as our own (as useAgentChat does).
      s = newStream(id, { own: true });
      if (expectContinuation) expectContinuation = false;
    }
    s.interrupted = false;
    s.replaying = true;
    updateControls();
  }

  function onPending(frame) {
    const probeId = probeFor(frame.probeId);
    if (!probeId) return;
    const probe = probes.get(probeId);
    clearTimeout(probe.timer);
    probe.timer = setTimeout(() => probeSettled(probeId, false), PENDING_TIMEOUT_MS);
    statusNote = "waiting for the reply…";
    refreshStatus();
  }

  function onResumeNone(frame) {
    if (frame.probeId && !probes.has(frame.probeId)) return; // a stale probe's answer
    const probeId = probeFor(frame.probeId);
    if (probeId) probeSettled(probeId, false);
    updateControls();
  }

  // ---------------------------------------------------------------- frames
  function handleFrame(frame) {
    switch (frame.type) {
      case T.RESPONSE:
        onResponse(frame);
        break;
      case T.MESSAGES:
        if (Array.isArray(frame.messages)) replaceTranscript(frame.messages);
        break;
      case T.CLEAR:
        resetLocal();
        break;
      case T.MESSAGE_UPDATED:
        onMessageUpdated(frame.message);
        break;
      case T.RESUMING:
        onResuming(frame);
        break;
      case T.PENDING:
        onPending(frame);
        break;
      case T.RESUME_NONE:
        onResumeNone(frame);
        break;
      case T.RECOVERING:
        recovering = !!frame.recovering;
        updateControls();
        break;
      case T.IDENTITY:
        attempts = 0; // the server accepted us: the next drop starts the backoff afresh
        break;
      case T.ERROR:
        onServerError(frame);
        break;
      default:
        break; // cf_agent_state, cf_agent_mcp_servers, rpc: nothing to show
    }
  }

  function onServerError(frame) {
    const text = typeof frame.error === "string" && frame.error ? frame.error : "Server error";
    lastServerError = text;
    showError(text);
    // A rejected request never streams: release the composer.
    if (frame.id && frame.id === ownRequestId) {
      const s = streams.get(frame.id);
      if (s) endStream(s, "error");
      else ownRequestId = null;
      updateControls();
    }
  }

  function newStream(id, { own = false, continuation = false } = {}) {
    const s = {
      id,
      own,
      continuation,
      message: null,
      lastSeq: -1,
      replaying: false,
      interrupted: false,
      errored: false,
      textParts: new Map(),
      reasoningParts: new Map(),
      transient: new Map(),
    };
    streams.set(id, s);
    return s;
  }

  function onResponse(frame) {
    const id = frame.id;
    if (typeof id !== "string" || !id || ignored.has(id)) return;
    let s = streams.get(id);
    if (!s) {
      if (frame.done && !frame.body) {
        // A terminal frame of a stream that never produced chunks (e.g. a skipped turn).
        ignored.add(id);
        if (id === ownRequestId) {
          ownRequestId = null;
          updateControls();
        }
        return;
      }
      let own = id === ownRequestId;
      if (!own && frame.continuation && expectContinuation) {
        own = true;
        expectContinuation = false;
      }
      s = newStream(id, { own, continuation: !!frame.continuation });
    }
    if (frame.continuation) s.continuation = true;
    if (!frame.replay) s.replaying = false;

    if (frame.replayComplete) {
      s.replaying = false;
      updateControls();
      return;
    }
    // A continuation may be replayed over what this page already applied: skip by seq.
    if (s.continuation && typeof frame.seq === "number" && frame.body && !frame.error && !frame.done) {
      if (frame.seq <= s.lastSeq) return;
    }
    if (frame.error) {
      s.errored = true;
      setStreamError(s, frame.body || "Stream error");
      if (frame.done) endStream(s, "error");
      else touchStream(s);
      return;
    }
    if (frame.body) {
      let chunk = null;
      try {
        chunk = JSON.parse(frame.body);
      } catch {
        chunk = null;
      }
      if (chunk && typeof chunk === "object" && typeof chunk.type === "string") {
        applyChunk(s, chunk);
      } else if (frame.done) {
        showNotice(frame.body); // e.g. "No response was generated by the agent."
      }
      if (typeof frame.seq === "number") s.lastSeq = Math.max(s.lastSeq, frame.seq);
    }
    if (frame.done) endStream(s, frame.outcome || (s.errored ? "error" : "completed"));
    else updateControls();
  }

  function ensureMessage(s) {
    if (s.message) return s.message;
    if (s.continuation) {
      s.message = lastAssistant();
      if (s.message) return s.message;
    }
    const message = { id: messageId(), role: "assistant", parts: [] };
    messages.push(message);
    s.message = message;
    scheduleRender();
    return message;
  }

  function resetMessage(s, message) {
    message.parts = [];
    delete message.metadata;
    s.textParts.clear();
    s.reasoningParts.clear();
    s.transient.clear();
    messageErrors.delete(message.id);
  }

  // Builds the assistant message from one UIMessageChunk (spec cloudflare-agents.md §3.1).
  function applyChunk(s, chunk) {
    const type = chunk.type;
    if (type === "start") {
      if (s.continuation) {
        ensureMessage(s);
      } else {
        const existing = s.message || (chunk.messageId ? findMessage(chunk.messageId) : null);
        if (existing) {
          // A replayed (or repeated) start rebuilds the message instead of duplicating it.
          resetMessage(s, existing);
          if (chunk.messageId && existing.id !== chunk.messageId) {
            messageErrors.delete(existing.id);
            existing.id = chunk.messageId;
          }
          s.message = existing;
        } else {
          const message = { id: chunk.messageId || messageId(), role: "assistant", parts: [] };
          messages.push(message);
          s.message = message;
        }
      }
      mergeMetadata(s.message, chunk.messageMetadata);
      touchStream(s);
      return;
    }
    const message = ensureMessage(s);
    const parts = message.parts;
    let changed = message;
    switch (type) {
      case "start-step":
      case "step-start":
        parts.push({ type: "step-start" });
        break;
      case "text-start":
      case "reasoning-start": {
        const kind = type === "text-start" ? "text" : "reasoning";
        const part = { type: kind, text: "", state: "streaming" };
        if (chunk.providerMetadata !== undefined) part.providerMetadata = chunk.providerMetadata;
        parts.push(part);
        (kind === "text" ? s.textParts : s.reasoningParts).set(chunk.id, part);
        break;
      }
      case "text-delta":
      case "reasoning-delta": {
        const kind = type === "text-delta" ? "text" : "reasoning";
        const map = kind === "text" ? s.textParts : s.reasoningParts;
        let part = map.get(chunk.id);
        if (!part || !parts.includes(part)) {
          part = lastOfType(parts, kind);
          if (!part || part.state === "done") {
            part = { type: kind, text: "", state: "streaming" };
            parts.push(part);
          }
          map.set(chunk.id, part);
        }
        part.text += String(chunk.delta ?? "");
        break;
      }
      case "text-end":
      case "reasoning-end": {
        const kind = type === "text-end" ? "text" : "reasoning";
        const map = kind === "text" ? s.textParts : s.reasoningParts;
        const part = map.get(chunk.id) || lastOfType(parts, kind);
        if (part) part.state = "done";
        map.delete(chunk.id);
        break;
      }
      case "file":
        parts.push({ type: "file", mediaType: chunk.mediaType, url: chunk.url });
        break;
      case "source-url":
      case "source-document": {
        const part = { ...chunk };
        parts.push(part);
        break;
      }
      case "tool-input-start": {
        if (!message.parts.some((p) => isToolPart(p) && p.toolCallId === chunk.toolCallId)) {
          const part = newToolPart(chunk, "input-streaming");
          if (chunk.providerExecuted !== undefined) part.providerExecuted = chunk.providerExecuted;
          if (chunk.title !== undefined) part.title = chunk.title;
          parts.push(part);
        }
        break;
      }
      case "tool-input-delta": {
        const found = findToolPart(chunk.toolCallId, message);
        if (found && found.part.state === "input-streaming") {
          toolInputText.set(found.part, (toolInputText.get(found.part) || "") + String(chunk.inputTextDelta ?? ""));
        }
        break;
      }
      case "tool-input-available": {
        const found = findToolPart(chunk.toolCallId, message);
        const toolInput = chunk.input && typeof chunk.input === "object" ? chunk.input : {};
        if (!found) {
          const part = newToolPart(chunk, "input-available");
          part.input = toolInput;
          parts.push(part);
        } else if (found.part.state === "input-streaming") {
          found.part.state = "input-available";
          found.part.input = toolInput;
          changed = found.message;
        }
        break;
      }
      case "tool-input-error": {
        let found = findToolPart(chunk.toolCallId, message);
        if (!found) {
          const part = newToolPart(chunk, "input-available");
          parts.push(part);
          found = { message, part };
        }
        if (!TERMINAL_TOOL_STATES.has(found.part.state)) {
          Object.assign(found.part, { state: "output-error", input: chunk.input, errorText: chunk.errorText || "" });
        }
        changed = found.message;
        break;
      }
      case "tool-approval-request": {
        const found = findToolPart(chunk.toolCallId, message);
        if (found && !TERMINAL_TOOL_STATES.has(found.part.state) && found.part.state !== "approval-responded") {
          const approval = { id: chunk.approvalId };
          if (chunk.approvalDescriptor !== undefined) approval.descriptor = chunk.approvalDescriptor;
          found.part.state = "approval-requested";
          found.part.approval = approval;
          changed = found.message;
        }
        break;
      }
      case "tool-output-available": {
        const found = findToolPart(chunk.toolCallId, message);
        if (found) {
          found.part.state = "output-available";
          found.part.output = chunk.output;
          if (chunk.preliminary) found.part.preliminary = true;
          else delete found.part.preliminary;
          if (chunk.approvalDescriptor !== undefined) found.part.approvalDescriptor = chunk.approvalDescriptor;
          changed = found.message;
        }
        break;
      }
      case "tool-output-error": {
        const found = findToolPart(chunk.toolCallId, message);
        if (found) {
          found.part.state = "output-error";
          found.part.errorText = chunk.errorText || "";
          changed = found.message;
        }
        break;
      }
      case "tool-output-denied": {
        const found = findToolPart(chunk.toolCallId, message);
        if (found && !TERMINAL_TOOL_STATES.has(found.part.state) && found.part.state !== "approval-responded") {
          found.part.state = "output-denied";
          changed = found.message;
        }
        break;
      }
      case "finish":
      case "message-metadata":
        mergeMetadata(message, chunk.messageMetadata);
        break;
      case "error":
        s.errored = true;
        setStreamError(s, chunk.errorText || "Stream error");
        break;
      default:
        if (type.startsWith("data-")) applyData(s, message, chunk);
        break; // unknown chunk types (abort, provider-specific) change nothing
    }
    touch(changed);
    if (changed !== message) touch(message);
  }

  // AI SDK shape: static tools are "tool-<name>" parts (no toolName key); dynamic tools are
  // "dynamic-tool" parts that carry toolName.
  function newToolPart(chunk, state) {
    const part = chunk.dynamic
      ? { type: "dynamic-tool", toolName: chunk.toolName, toolCallId: chunk.toolCallId, state }
      : { type: `tool-${chunk.toolName}`, toolCallId: chunk.toolCallId, state };
    return part;
  }

  function applyData(s, message, chunk) {
    if (chunk.transient) {
      s.transient.set(chunk.type, chunk.data);
      return;
    }
    if (chunk.id !== undefined && chunk.id !== null) {
      const same = message.parts.find((p) => p.type === chunk.type && p.id === chunk.id);
      if (same) {
        same.data = chunk.data;
        return;
      }
    }
    const part = { type: chunk.type };
    if (chunk.id !== undefined && chunk.id !== null) part.id = chunk.id;
    part.data = chunk.data;
    message.parts.push(part);
  }

  function lastOfType(parts, kind) {
    for (let i = parts.length - 1; i >= 0; i--) if (parts[i].type === kind) return parts[i];
    return null;
  }

  function endStream(s, outcome) {
    streams.delete(s.id);
    ignored.add(s.id);
    transcriptVersion += 1;
    s.transient.clear();
    const message = s.message;
    if (message && !hasContent(message) && !s.continuation && outcome !== "completed") {
      // Nothing was said (skipped, aborted before the first word): drop the empty bubble.
      messages = messages.filter((m) => m !== message);
    }
    if (message) touch(message);
    if (s.id === ownRequestId) ownRequestId = null;
    if (s.own && message && outcome !== "aborted" && outcome !== "error" && !s.errored) {
      runClientTools(message);
    }
    scheduleRender();
    updateControls();
  }

  function setStreamError(s, text) {
    if (s.message) {
      // Shown under the message it belongs to; the banner is for errors without a message.
      messageErrors.set(s.message.id, text);
      touch(s.message);
    } else {
      showError(text);
    }
  }

  function replaceTranscript(list) {
    // The server's list is authoritative, except for messages this page is still streaming.
    const live = [];
    for (const s of streams.values()) if (s.message) live.push(s.message);
    const next = list
      .filter((m) => m && typeof m === "object" && typeof m.id === "string" && Array.isArray(m.parts))
      .map((m) => live.find((l) => l.id === m.id) || m);
    for (const m of live) if (!next.includes(m)) next.push(m);
    messages = next;
    transcriptVersion += 1;
    scheduleRender();
    updateControls();
  }

  function onMessageUpdated(updated) {
    if (!updated || typeof updated !== "object" || !Array.isArray(updated.parts)) return;
    let target = findMessage(updated.id);
    if (!target) {
      const callIds = new Set(updated.parts.filter(isToolPart).map((p) => p.toolCallId));
      target = messages.find((m) => m.parts.some((p) => isToolPart(p) && callIds.has(p.toolCallId))) || null;
    }
    if (!target) return;
    // Mutate in place (keeping the local id) so a stream holding this message keeps it.
    target.parts = updated.parts;
    if (updated.metadata !== undefined) target.metadata = updated.metadata;
    touch(target);
  }

  // Bumped whenever the transcript changes for a reason other than a chunk: a history fetch
  // that started before such a change is stale when it lands, and is made again.
  let transcriptVersion = 0;
  let refreshing = null;

  function refreshHistory() {
    if (!refreshing) {
      refreshing = (async () => {
        try {
          for (let attempt = 0; attempt < 3; attempt++) {
            const version = transcriptVersion;
            const list = await fetchHistory();
            if (version === transcriptVersion || attempt === 2) {
              replaceTranscript(list);
              return;
            }
          }
        } catch (err) {
          showError(`Could not reload the conversation: ${err.message || err}`);
        } finally {
          refreshing = null;
        }
      })();
    }
    return refreshing;
  }

  async function fetchHistory() {
    const response = await fetch(`${basePath}/get-messages`, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (!response.ok) {
      let detail = `${response.status} ${response.statusText}`;
      try {
        const data = await response.json();
        if (data && data.error) detail = data.error;
      } catch {
        /* not JSON */
      }
      throw new Error(detail);
    }
    const text = await response.text();
    if (!text) return [];
    const data = JSON.parse(text);
    return Array.isArray(data) ? data : [];
  }

  // ---------------------------------------------------------------- tools
  function runClientTools(message) {
    for (const part of message.parts) {
      if (!isToolPart(part) || part.state !== "input-available") continue;
      const toolName = toolNameOf(part);
      if (!CLIENT_TOOL_IMPLS[toolName] || handledToolCalls.has(part.toolCallId)) continue;
      handledToolCalls.add(part.toolCallId);
      executeClientTool(message, part, toolName);
    }
  }

  async function executeClientTool(message, part, toolName) {
    let output;
    let errorText = null;
    try {
      output = await CLIENT_TOOL_IMPLS[toolName](part.input || {});
    } catch (err) {
      errorText = String(err?.message || err);
    }
    const frame = { type: T.TOOL_RESULT, toolCallId: part.toolCallId, toolName };
    if (errorText === null) {
      Object.assign(part, { state: "output-available", output });
      Object.assign(frame, { output, autoContinue: true, clientTools: CLIENT_TOOLS });
    } else {
      Object.assign(part, { state: "output-error", errorText });
      Object.assign(frame, { output: null, state: "output-error", errorText, autoContinue: false });
    }
    touch(message);
    send(frame);
    if (frame.autoContinue) awaitContinuation();
  }

  function respondToApproval(message, part, approved) {
    if (handledToolCalls.has(part.toolCallId)) return;
    if (!connected) {
      showError("Not connected: try again when the connection is back.");
      return;
    }
    handledToolCalls.add(part.toolCallId);
    send({ type: T.TOOL_APPROVAL, toolCallId: part.toolCallId, approved, autoContinue: true });
    part.state = "approval-responded";
    part.approval = { ...(part.approval || {}), approved };
    touch(message);
    awaitContinuation();
  }

  function awaitContinuation() {
    // The continuation runs under a server-made request id: ask to be attached to it.
    expectContinuation = true;
    sendProbe("continuation");
  }

  // ---------------------------------------------------------------- actions
  function submit() {
    const text = input.value.trim();
    if (!text || !connected || isBusy()) return;
    hideError();
    const user = { id: messageId(), role: "user", parts: [{ type: "text", text }] };
    messages.push(user);
    transcriptVersion += 1;
    const id = nanoid(8);
    ownRequestId = id;
    const body = { messages, trigger: "submit-message", clientTools: CLIENT_TOOLS };
    const sent = send({ id, init: { method: "POST", body: JSON.stringify(body) }, type: T.REQUEST });
    if (!sent) {
      ownRequestId = null;
      messages = messages.filter((m) => m !== user);
      showError("Not connected: the message was not sent.");
    } else {
      input.value = "";
    }
    scheduleRender();
    updateControls();
  }

  function stop() {
    let id = ownRequestId;
    if (!id) {
      const first = streams.keys().next();
      id = first.done ? null : first.value;
    }
    if (!id) return;
    send({ type: T.CANCEL, id });
    ignored.add(id);
    const s = streams.get(id);
    if (s) endStream(s, "aborted");
    ownRequestId = null;
    updateControls();
    input.focus();
  }

  function resetLocal() {
    for (const id of streams.keys()) ignored.add(id);
    if (ownRequestId) ignored.add(ownRequestId);
    streams.clear();
    ownRequestId = null;
    expectContinuation = false;
    messages = [];
    transcriptVersion += 1;
    messageErrors.clear();
    hideError();
    scheduleRender();
    updateControls();
  }

  function clearChat() {
    resetLocal();
    send({ type: T.CLEAR });
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      submit();
    }
  });
  input.addEventListener("input", updateControls);
  stopBtn.addEventListener("click", stop);
  clearBtn.addEventListener("click", clearChat);

  // ---------------------------------------------------------------- status & controls
  let status = "connecting";
  let statusNote = null; // e.g. "waiting for the reply…" while the server says "pending"
  let terminalReason = null;
  const STATUS_TEXT = {
    connecting: "connecting…",
    connected: "connected",
    reconnecting: "reconnecting…",
    streaming: "streaming",
    disconnected: "disconnected",
  };
  function currentStatus() {
    if (terminal) return "disconnected";
    if (!connected) return everOpened ? "reconnecting" : "connecting";
    return isBusy() ? "streaming" : "connected";
  }
  function refreshStatus() {
    status = currentStatus();
    let text = STATUS_TEXT[status];
    if (status === "disconnected") text = terminalReason ? `disconnected: ${terminalReason}` : text;
    else if (recovering) text = "recovering…";
    else if (statusNote && connected) text = statusNote;
    statusEl.dataset.state = status;
    if (statusEl.textContent !== text) statusEl.textContent = text;
  }
  function updateControls() {
    const busy = isBusy();
    sendBtn.disabled = !connected || busy;
    stopBtn.disabled = !busy;
    clearBtn.disabled = !connected;
    input.disabled = terminal;
    root.dataset.busy = busy ? "true" : "false";
    refreshStatus();
  }

  function showError(text) {
    errorEl.textContent = text;
    errorEl.dataset.kind = "error";
    errorEl.hidden = false;
  }
  function showNotice(text) {
    errorEl.textContent = text;
    errorEl.dataset.kind = "notice";
    errorEl.hidden = false;
  }
  function hideError() {
    errorEl.hidden = true;
    errorEl.textContent = "";
  }

  // ---------------------------------------------------------------- rendering
  const cache = new WeakMap(); // message object -> <li>
  let dirty = new WeakSet();
  let renderQueued = false;

  function touch(message) {
    if (message) dirty.add(message);
    scheduleRender();
  }
  function touchStream(s) {
    touch(s.message);
  }
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    // A task, not requestAnimationFrame: background tabs must keep up with their streams too.
    setTimeout(render, 0);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function render() {
    renderQueued = false;
    const nearBottom = listEl.scrollHeight - listEl.scrollTop - listEl.clientHeight < 80;
    const nodes = [];
    for (const message of messages) {
      let li = cache.get(message);
      if (!li || dirty.has(message)) {
        const fresh = renderMessage(message);
        if (li && li.parentNode === listEl) listEl.replaceChild(fresh, li);
        li = fresh;
        cache.set(message, li);
      }
      nodes.push(li);
    }
    dirty = new WeakSet();
    if (nodes.length === 0 && historyLoaded) {
      nodes.push(el("li", "empty", "No messages yet. Say hello!"));
    }
    // Reconcile the list with as few moves as possible (keeps text selections).
    nodes.forEach((node, i) => {
      if (listEl.children[i] !== node) listEl.insertBefore(node, listEl.children[i] || null);
    });
    while (listEl.children.length > nodes.length) listEl.lastElementChild.remove();
    if (nearBottom) listEl.scrollTop = listEl.scrollHeight;
  }

  function renderMessage(message) {
    const role = ["user", "assistant", "system"].includes(message.role) ? message.role : "system";
    const s = streamOf(message);
    const li = el("li", `msg ${role}${s ? " streaming" : ""}`);
    li.dataset.id = message.id;
    li.dataset.role = role;
    li.append(el("div", "role", role === "user" ? "You" : role === "assistant" ? "Agent" : "System"));
    const body = el("div", "parts");
    let sawContent = false;
    message.parts.forEach((part, index) => {
      const node = renderPart(message, part, index, sawContent);
      if (node) body.append(node);
      if (part.type !== "step-start") sawContent = true;
    });
    if (role === "assistant") {
      const attachments = renderAttachments(message);
      if (attachments) body.append(attachments);
    }
    if (s) {
      for (const [type, data] of s.transient) body.append(renderData(type, data, true));
      if (!hasContent(message)) body.append(el("span", "typing", "…"));
    }
    li.append(body);
    const error = messageErrors.get(message.id);
    if (error) li.append(el("div", "msg-error", error));
    return li;
  }

  function renderPart(message, part, index, sawContent) {
    const type = part?.type;
    if (typeof type !== "string") return null;
    if (type === "text") {
      const node = el("div", `part text${part.state === "streaming" ? " streaming" : ""}`, part.text || "");
      return node;
    }
    if (type === "reasoning") {
      const key = `${message.id}:${index}`;
      const details = el("details", "part reasoning");
      details.append(el("summary", null, part.state === "streaming" ? "Thinking…" : "Reasoning"));
      details.append(el("div", "reasoning-text", part.text || ""));
      details.open = openDetails.has(key);
      details.addEventListener("toggle", () => {
        if (details.open) openDetails.add(key);
        else openDetails.delete(key);
      });
      return details;
    }
    if (type === "step-start") return sawContent ? el("hr", "step") : null;
    if (isToolPart(part)) return renderTool(message, part);
    if (type.startsWith("data-")) return renderData(type, part.data, false);
    if (type === "file") return renderFile(part);
    if (type === "source-url") {
      const href = safeUrl(part.url);
      const node = el("div", "part source");
      node.append(el("span", "label", "Source "));
      if (href) {
        const a = el("a", null, part.title || part.url);
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        node.append(a);
      } else {
        node.append(el("span", null, part.title || part.url || ""));
      }
      return node;
    }
    if (type === "source-document") {
      const node = el("div", "part source");
      node.append(el("span", "label", "Document "));
      node.append(el("span", null, [part.title, part.filename].filter(Boolean).join(" · ") || part.sourceId || ""));
      return node;
    }
    return null;
  }

  const STATE_LABEL = {
    "input-streaming": "preparing input…",
    "input-available": "running…",
    "approval-requested": "needs approval",
    "approval-responded": "approval sent",
    "output-available": "done",
    "output-error": "error",
    "output-denied": "denied",
  };

  function renderTool(message, part) {
    const toolName = toolNameOf(part);
    const card = el("div", "part tool");
    card.dataset.state = part.state || "";
    card.dataset.tool = toolName;
    card.dataset.toolCallId = part.toolCallId || "";
    const pause = pauseOf(part);
    let label = STATE_LABEL[part.state] || part.state || "";
    if (part.state === "output-available" && part.preliminary) label = "in progress…";
    if (pause) {
      label = pause.decision;
      card.dataset.decision = pause.decision;
      if (pause.decision === "paused") card.dataset.paused = "true";
      if (pause.executionId) card.dataset.executionId = pause.executionId;
    }
    if (part.state === "approval-responded" && part.approval) {
      label = part.approval.approved ? "approved" : "rejected";
    }
    if (part.state === "input-available" && CLIENT_TOOL_IMPLS[toolName]) label = "running in your browser…";

    const head = el("div", "tool-head");
    head.append(el("span", "tool-icon", "⚙"));
    head.append(el("span", "tool-name", part.title || toolName));
    head.append(el("span", "tool-state", label));
    card.append(head);

    // What the approver is asked about stays on the card after the decision too.
    const descriptor = descriptorOf(part);
    if (descriptor) card.append(renderDescriptor(descriptor));

    const rawInput = toolInputText.get(part);
    const toolInput = part.input !== undefined ? part.input : descriptor?.input;
    if (toolInput !== undefined) card.append(ioBlock("input", json(toolInput)));
    else if (rawInput) card.append(ioBlock("input", rawInput));

    if (part.state === "approval-requested") {
      const actions = el("div", "tool-actions");
      const approve = el("button", "approve", "Approve");
      const reject = el("button", "reject", "Reject");
      approve.type = reject.type = "button";
      const done = handledToolCalls.has(part.toolCallId);
      approve.disabled = reject.disabled = done;
      approve.addEventListener("click", () => respondToApproval(message, part, true));
      reject.addEventListener("click", () => respondToApproval(message, part, false));
      actions.append(approve, reject);
      card.append(actions);
    }
    if (pause) {
      // Capitalised on screen by CSS (::first-letter); the text keeps the wording the page always used.
      if (pause.decision === "paused") card.append(el("div", "tool-note paused", "waiting for approval by staff"));
      else card.append(el("div", "tool-decision", pause.text));
      if (pause.executionId) card.append(el("small", "execution-id", pause.executionId));
    } else if (part.state === "output-available") {
      card.append(ioBlock(part.preliminary ? "progress" : "output", json(part.output)));
    }
    if (part.state === "output-error") card.append(el("div", "tool-error", part.errorText || "Tool failed"));
    if (part.state === "output-denied") card.append(el("div", "tool-note", "The call was rejected."));
    return card;
  }

  /**
   * The approval descriptor of a tool part: `approval.descriptor` on an inline (approval-gated)
   * call, the sibling `approvalDescriptor` on a durable-pause one (spec §5.8, §5.10).
   */
  function descriptorOf(part) {
    const descriptor = part.approval?.descriptor || part.approvalDescriptor;
    return descriptor && typeof descriptor === "object" && !Array.isArray(descriptor) ? descriptor : null;
  }

  /**
   * Where a durable pause stands (spec §5.10): null for any other tool part. The part keeps state
   * output-available throughout; only its output changes, from the paused envelope to the
   * decision's outcome (the action's output, a rejection or an error object), sent as
   * cf_agent_message_updated. A paused envelope without a descriptor (e.g. from another producer)
   * still reads as paused.
   */
  function pauseOf(part) {
    if (part.state !== "output-available" || part.preliminary) return null;
    const output = part.output;
    const record = output && typeof output === "object" && !Array.isArray(output) ? output : null;
    const executionId = typeof record?.executionId === "string" ? record.executionId : null;
    if (record?.status === "paused") return { decision: "paused", executionId };
    if (!part.approvalDescriptor) return null;
    if (record?.status === "rejected") {
      return { decision: "rejected", executionId, text: `Rejected: ${record.reason || "no reason given"}` };
    }
    // {status: "error", error: "..."} from the approval service, {error: {name, message}} from a failed execute.
    const error = record?.status === "error" ? record.error : record?.error?.message;
    if (error !== undefined) return { decision: "error", executionId, text: `Error: ${textOf(error)}` };
    return { decision: "approved", executionId, text: `Approved: ${textOf(output)}` };
  }

  function renderDescriptor(descriptor) {
    const box = el("div", "approval");
    const line = el("div", "approval-head");
    if (descriptor.summary) line.append(el("span", "approval-summary", descriptor.summary));
    if (typeof descriptor.risk === "string" && descriptor.risk) {
      const risk = el("span", "risk", `${descriptor.risk} risk`);
      risk.dataset.risk = descriptor.risk;
      line.append(risk);
    }
    if (line.childElementCount) box.append(line);
    const permissions = Array.isArray(descriptor.permissions) ? descriptor.permissions : [];
    if (permissions.length) {
      const list = el("div", "permissions");
      list.append(el("span", "io-label", "permissions"));
      for (const permission of permissions) list.append(el("code", "permission", permission));
      box.append(list);
    }
    return box;
  }

  function ioBlock(label, text) {
    const wrap = el("div", `tool-io ${label}`);
    wrap.append(el("div", "io-label", label));
    wrap.append(el("pre", null, text));
    return wrap;
  }

  function renderData(type, data, transient) {
    const node = el("div", `part data${transient ? " transient" : ""}`);
    node.dataset.type = type;
    node.append(el("span", "label", type.slice(5)));
    let text;
    if (typeof data === "string") text = data;
    else if (data && typeof data === "object" && typeof data.message === "string") text = data.message;
    else text = json(data, 0);
    node.append(el("span", "data-value", text));
    return node;
  }

  function renderFile(part) {
    const href = safeUrl(part.url, true);
    const node = el("div", "part file");
    if (href && typeof part.mediaType === "string" && part.mediaType.startsWith("image/")) {
      const img = el("img");
      img.src = href;
      img.alt = part.filename || "image";
      node.append(img);
    } else if (href) {
      const a = el("a", null, part.filename || part.mediaType || "file");
      a.href = href;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      node.append(a);
    } else {
      node.append(el("span", null, `${part.mediaType || "file"}`));
    }
    return node;
  }

  function safeUrl(url, allowData = false) {
    if (typeof url !== "string") return null;
    try {
      const parsed = new URL(url, location.href);
      if (["http:", "https:", "blob:"].includes(parsed.protocol)) return parsed.href;
      if (allowData && parsed.protocol === "data:" && /^data:(image|audio|video|application\/pdf)/i.test(url)) {
        return url;
      }
    } catch {
      /* invalid */
    }
    return null;
  }

  function json(value, indent = 2) {
    if (value === undefined) return "";
    try {
      return JSON.stringify(value, null, indent);
    } catch {
      return String(value);
    }
  }

  // ---------------------------------------------------------------- reply attachments
  // Extras an action attached to the turn's reply (spec §5.12), in the message's metadata.
  const ATTACHMENT_RENDERERS = {
    email_draft: renderEmailDraft,
    card: renderCardAttachment,
    voice_note: renderVoiceNote,
  };

  function renderAttachments(message) {
    const list = message.metadata?.attachments;
    if (!Array.isArray(list)) return null;
    const items = list.filter((a) => a && typeof a === "object" && typeof a.type === "string");
    if (!items.length) return null;
    const wrap = el("div", "attachments");
    for (const attachment of items) {
      const node = el("div", "attachment");
      node.dataset.type = attachment.type;
      const render = Object.hasOwn(ATTACHMENT_RENDERERS, attachment.type)
        ? ATTACHMENT_RENDERERS[attachment.type]
        : renderOtherAttachment;
      render(node, attachment);
      wrap.append(node);
    }
    return wrap;
  }

  function renderEmailDraft(node, attachment) {
    node.append(el("div", "attachment-title", "Email draft"));
    const to = Array.isArray(attachment.to) ? attachment.to.map(textOf).join(", ") : attachment.to;
    appendFields(node, [["To", to], ["Subject", attachment.subject]]);
    if (hasValue(attachment.body)) node.append(el("div", "attachment-body", textOf(attachment.body)));
  }

  function renderCardAttachment(node, attachment) {
    node.append(el("div", "attachment-title", hasValue(attachment.title) ? textOf(attachment.title) : "Card"));
    const payload = attachment.payload;
    if (payload && typeof payload === "object" && !Array.isArray(payload)) {
      appendFields(node, Object.entries(payload));
    } else if (payload !== undefined) {
      node.append(el("pre", "attachment-json", json(payload)));
    }
  }

  function renderVoiceNote(node, attachment) {
    node.append(el("div", "attachment-title", "Voice note"));
    const src = safeUrl(attachment.url, true);
    if (src) {
      const audio = el("audio");
      audio.controls = true;
      audio.preload = "none";
      audio.src = src;
      node.append(audio);
    } else if (hasValue(attachment.text)) {
      node.append(el("div", "attachment-body", textOf(attachment.text)));
    }
  }

  function renderOtherAttachment(node, attachment) {
    const { type, ...rest } = attachment;
    node.append(el("div", "attachment-title", type));
    node.append(el("pre", "attachment-json", json(rest)));
  }

  /** A <dl> of the [label, value] pairs that have a value, if any has. */
  function appendFields(node, pairs) {
    const dl = el("dl", "attachment-fields");
    for (const [label, value] of pairs) {
      if (hasValue(value)) dl.append(el("dt", null, label), el("dd", null, textOf(value)));
    }
    if (dl.childElementCount) node.append(dl);
  }

  function hasValue(value) {
    return value !== undefined && value !== null && value !== "";
  }

  /** Strings as they are, anything else as compact JSON. */
  function textOf(value) {
    return typeof value === "string" ? value : json(value, 0);
  }

  // ---------------------------------------------------------------- start
  // Debug/test hook: a read-only view of the client's state.
  window.thinkChat = Object.freeze({
    messages: () => JSON.parse(JSON.stringify(messages)),
    status: () => status,
    activeStreams: () => [...streams.keys()],
  });

  updateControls();
  (async () => {
    // As useAgentChat: history first, then the socket.
    try {
      messages = await fetchHistory();
    } catch (err) {
      showError(`Could not load the conversation: ${err.message || err}`);
    }
    historyLoaded = true;
    root.dataset.ready = "true";
    scheduleRender();
    connect();
  })();
})();
