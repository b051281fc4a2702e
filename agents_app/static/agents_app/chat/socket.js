/*
 * The connection: one WebSocket at a time, reconnect with backoff, terminal closes, and the
 * bookkeeping of the resume handshake (probes and ACKs, per socket).
 *
 * What a handshake answer means for the replies on screen is not decided here: the page learns
 * it through the hooks (see streams.js).
 */

import { frames, nanoid } from "./protocol.js";

const RECONNECT_MIN_MS = 500;
const RECONNECT_FACTOR = 1.5;
const RECONNECT_MAX_MS = 8000;
const CONNECT_TIMEOUT_MS = 4000;
const PROBE_TIMEOUT_MS = 5000;
const PENDING_TIMEOUT_MS = 60000;

export class ChatSocket {
  /**
   * @param {string} url the ws(s):// URL of the agent instance
   * @param {object} hooks
   *   onFrame(frame)              a parsed frame arrived
   *   onClose()                   the socket closed (before any reconnect is scheduled)
   *   onError(text)               something to show in the error banner
   *   onProbeSettled(purpose)     a probe was answered "nothing to resume" (or timed out)
   *   onStatus()                  the status line may have changed
   *   onControls()                the status line and the controls may have changed
   */
  constructor(url, hooks) {
    this.url = url;
    this.hooks = hooks;
    this.ws = null;
    this.connected = false;
    /** A 4xxx / 1008 close: no reconnect. */
    this.terminal = false;
    this.terminalReason = null;
    this.everOpened = false;
    this.attempts = 0;
    this.reconnectTimer = null;
    /** When the scheduled reconnect fires (ms since the epoch), for the connection banner. */
    this.retryAt = 0;
    this.connectTimer = null;
    /** The last cf_agent_error text: the reason shown if the server then refuses us. */
    this.lastServerError = null;
    this.unloading = false;
    /** Set while the server says "pending" for a probe, e.g. "waiting for the reply…". */
    this.note = null;
    /** Request ids ACKed on this socket. */
    this.acked = new Set();
    /** Outstanding probes: probeId -> {purpose: "open"|"reconnect"|"continuation", timer}. */
    this.probes = new Map();
  }

  /** Follow the page's lifecycle: back online, hidden (unloading), shown again from the bfcache. */
  listen() {
    window.addEventListener("online", () => this.retryNow());
    window.addEventListener("pagehide", () => {
      this.unloading = true;
    });
    window.addEventListener("pageshow", (ev) => {
      if (ev.persisted && this.unloading) {
        this.unloading = false;
        if (!this.ws && !this.terminal) this.connect();
      }
    });
  }

  send(frame) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  connect() {
    this.reconnectTimer = null;
    if (this.terminal || this.unloading) return;
    this.hooks.onStatus();
    let sock;
    try {
      sock = new WebSocket(this.url);
    } catch (err) {
      this.hooks.onError(`Cannot open the connection: ${err.message || err}`);
      this.scheduleReconnect();
      return;
    }
    this.ws = sock;
    this.connectTimer = setTimeout(() => {
      if (sock.readyState === WebSocket.CONNECTING) sock.close();
    }, CONNECT_TIMEOUT_MS);
    sock.onopen = () => {
      if (sock !== this.ws) return;
      clearTimeout(this.connectTimer);
      const reconnect = this.everOpened;
      this.everOpened = true;
      this.connected = true;
      this.acked = new Set();
      this.lastServerError = null;
      this.note = null;
      this.probe(reconnect ? "reconnect" : "open");
      this.hooks.onControls();
    };
    sock.onmessage = (ev) => {
      if (sock !== this.ws) return;
      let frame;
      try {
        frame = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (frame && typeof frame === "object") this.hooks.onFrame(frame);
    };
    sock.onclose = (ev) => {
      if (sock !== this.ws) return;
      clearTimeout(this.connectTimer);
      this.connected = false;
      this.ws = null;
      for (const probe of this.probes.values()) clearTimeout(probe.timer);
      this.probes.clear();
      this.hooks.onClose();
      if (ev.code === 1008 || (ev.code >= 4000 && ev.code <= 4999)) {
        this.terminal = true;
        this.terminalReason = this.lastServerError || ev.reason || `connection refused (code ${ev.code})`;
        this.hooks.onError(this.terminalReason);
        this.hooks.onControls();
        return;
      }
      if (!this.unloading) this.scheduleReconnect();
      this.hooks.onControls();
    };
  }

  scheduleReconnect() {
    if (this.terminal || this.reconnectTimer) return;
    this.attempts += 1;
    const delay = Math.min(RECONNECT_MIN_MS * RECONNECT_FACTOR ** (this.attempts - 1), RECONNECT_MAX_MS);
    this.retryAt = Date.now() + delay;
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
    this.hooks.onStatus();
  }

  /** Reconnect now instead of at the end of the backoff (back online, or the banner's "Retry now"). */
  retryNow() {
    if (!this.reconnectTimer) return;
    clearTimeout(this.reconnectTimer);
    this.connect();
  }

  /** The server accepted us (cf_agent_identity): the next drop starts the backoff afresh. */
  accepted() {
    this.attempts = 0;
  }

  // ---------------------------------------------------------------- resume handshake
  /** Ask whether a stream can be resumed on this socket. */
  probe(purpose) {
    const probeId = nanoid(8);
    const probe = { purpose, timer: null };
    this.probes.set(probeId, probe);
    probe.timer = setTimeout(() => this.settle(probeId, false), PROBE_TIMEOUT_MS);
    this.send(frames.resumeRequest(probeId));
  }

  /** The outstanding probe a frame answers: its probeId, or else the oldest one. */
  probeFor(probeId) {
    if (probeId) return this.probes.has(probeId) ? probeId : null;
    const first = this.probes.keys().next();
    return first.done ? null : first.value;
  }

  /** An answer (`resumed` true: a stream is being resumed) for the probe a frame names. */
  answer(frameProbeId, resumed) {
    const probeId = this.probeFor(frameProbeId);
    if (probeId) this.settle(probeId, resumed);
  }

  /** A probe got its answer: the page hears of it unless a stream is being resumed. */
  settle(probeId, resumed) {
    const probe = this.probes.get(probeId);
    if (!probe) return;
    clearTimeout(probe.timer);
    this.probes.delete(probeId);
    this.note = null;
    this.hooks.onStatus();
    if (!resumed) this.hooks.onProbeSettled(probe.purpose);
  }

  /** cf_agent_stream_pending: the reply has not started yet; wait longer for it. */
  pending(frame) {
    const probeId = this.probeFor(frame.probeId);
    if (!probeId) return;
    const probe = this.probes.get(probeId);
    clearTimeout(probe.timer);
    probe.timer = setTimeout(() => this.settle(probeId, false), PENDING_TIMEOUT_MS);
    this.note = "waiting for the reply…";
    this.hooks.onStatus();
  }

  /** cf_agent_stream_resume_none: nothing to resume. False for a stale probe's answer. */
  resumeNone(frame) {
    if (frame.probeId && !this.probes.has(frame.probeId)) return false;
    this.answer(frame.probeId, false);
    return true;
  }

  /**
   * ACK a resuming stream, once per id per socket: until it does, the server sends this socket
   * no live frames.
   */
  ack(id) {
    if (this.acked.has(id)) return;
    this.acked.add(id);
    this.send(frames.resumeAck(id));
  }
}
