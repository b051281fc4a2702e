/*
 * The transcript and the replies streaming into it: stream records by request id, response
 * frames, what a resume-handshake answer means for them, and the server's authoritative
 * transcript (cf_agent_chat_messages, cf_agent_message_updated, get-messages).
 *
 * Chunks are applied by the one MessageBuilder (message-builder.js). Around it, and only here,
 * sit the page's extras the server does not store: finding or creating the message a stream
 * writes to, transient data parts, the raw tool input text while it streams, error text under a
 * message, finish metadata (as useAgentChat keeps it) and marking messages for re-render.
 */

import { MessageBuilder, hasContent, isToolPart, truthy } from "./message-builder.js";
import { fetchHistory, frames, messageId, nanoid, parseChunk } from "./protocol.js";

/** Get-messages tries before a stale answer is used anyway (see refreshHistory). */
const HISTORY_TRIES = 3;

export class Conversation {
  /**
   * @param {object} deps
   *   historyUrl   /agents/<slug>/<name>/get-messages[?query]
   *   socket       the ChatSocket (send, probe, answer, ack, connected)
   *   clientTools  the client tool declarations sent with each request
   *   runTools(message)  run the client tools a finished reply of ours asks for
   *   ui           touch(message), render(), controls(), showError(text), showNotice(text), hideError()
   */
  constructor({ historyUrl, socket, clientTools, runTools, ui }) {
    this.historyUrl = historyUrl;
    this.socket = socket;
    this.clientTools = clientTools;
    this.runTools = runTools;
    this.ui = ui;
    /** @type {Array<{id:string, role:string, parts:Array<any>, metadata?:any}>} */
    this.messages = [];
    this.historyLoaded = false;
    /** Active streams by request id. */
    this.streams = new Map();
    /**
     * Request ids whose further frames this page ignores: stopped or cleared locally, or ended (a
     * request id streams once; frames after its terminal frame repeat it, e.g. the live frames of
     * a continuation that finished before this page's ACK, arriving after the replay that closed it).
     */
    this.ignored = new Set();
    /** Error text shown under a message, by message id (survives transcript replacement). */
    this.messageErrors = new Map();
    /** Ids of replies stopped before they finished (here or in another tab): marked "stopped". */
    this.stopped = new Set();
    /** Raw streamed tool input text (tool-input-delta), by part object. */
    this.toolInputText = new WeakMap();
    /** The request this page sent, until its terminal frame. */
    this.ownRequestId = null;
    /** A tool result/approval was sent with autoContinue: its continuation is followed as ours. */
    this.expectContinuation = false;
    /** The server is recovering an orphaned turn (cf_agent_chat_recovering). */
    this.recovering = false;
    /**
     * Bumped whenever the transcript changes for a reason other than a chunk: a history fetch
     * that started before such a change is stale when it lands, and is made again.
     */
    this.transcriptVersion = 0;
    this.refreshing = null;
  }

  isBusy() {
    return this.ownRequestId !== null || this.streams.size > 0;
  }

  streamOf(message) {
    for (const s of this.streams.values()) if (s.message === message) return s;
    return null;
  }

  lastAssistant() {
    for (let i = this.messages.length - 1; i >= 0; i--) {
      if (this.messages[i].role === "assistant") return this.messages[i];
    }
    return null;
  }

  findMessage(id) {
    return this.messages.find((m) => m.id === id) || null;
  }

  // ---------------------------------------------------------------- the user's actions
  /** Send a user message; false when it was not sent (not connected, busy or nothing to send). */
  /** Send a user message: `files` (file parts) first, then the text, as useAgentChat orders them. */
  submit(text, files = []) {
    if ((!text && !files.length) || !this.socket.connected || this.isBusy()) return false;
    this.ui.hideError();
    const parts = [...files, ...(text ? [{ type: "text", text }] : [])];
    const user = { id: messageId(), role: "user", parts };
    this.messages.push(user);
    this.transcriptVersion += 1;
    const id = nanoid(8);
    this.ownRequestId = id;
    const sent = this.socket.send(frames.chatRequest(id, this.messages, this.clientTools));
    if (!sent) {
      this.ownRequestId = null;
      this.messages = this.messages.filter((m) => m !== user);
      this.ui.showError("Not connected: the message was not sent.");
    }
    this.ui.render();
    this.ui.controls();
    return sent;
  }

  /** Cancel our request (or the stream shown); false when there was nothing to stop. */
  stop() {
    let id = this.ownRequestId;
    if (!id) {
      const first = this.streams.keys().next();
      id = first.done ? null : first.value;
    }
    if (!id) return false;
    this.socket.send(frames.cancel(id));
    this.ignored.add(id);
    const s = this.streams.get(id);
    if (s) this.endStream(s, "aborted");
    this.ownRequestId = null;
    this.ui.controls();
    return true;
  }

  /** Forget everything shown (the user cleared the chat, here or in another tab). */
  reset() {
    for (const id of this.streams.keys()) this.ignored.add(id);
    if (this.ownRequestId) this.ignored.add(this.ownRequestId);
    this.streams.clear();
    this.ownRequestId = null;
    this.expectContinuation = false;
    this.messages = [];
    this.transcriptVersion += 1;
    this.messageErrors.clear();
    this.stopped.clear();
    this.ui.hideError();
    this.ui.render();
    this.ui.controls();
  }

  /** A tool result or approval went out with autoContinue: ask to be attached to the continuation. */
  awaitContinuation() {
    // The continuation runs under a server-made request id.
    this.expectContinuation = true;
    this.socket.probe("continuation");
  }

  // ---------------------------------------------------------------- connection events
  /** The socket dropped: its streams are kept (partial text stays) until the next handshake. */
  onSocketClosed() {
    // So is a request that had no reply yet.
    if (this.ownRequestId && !this.streams.has(this.ownRequestId)) this.newStream(this.ownRequestId, { own: true });
    for (const s of this.streams.values()) s.interrupted = true;
  }

  /** A probe found nothing to resume. */
  onProbeSettled(purpose) {
    if (purpose === "continuation") {
      this.expectContinuation = false;
      return;
    }
    // Streams cut off by a dropped socket have ended meanwhile.
    const lost = this.dropInterrupted(null);
    if (purpose === "reconnect" || lost) this.refreshHistory();
  }

  /** End the streams a dropped socket cut off (except `keepId`); true if there were any. */
  dropInterrupted(keepId) {
    let lost = false;
    for (const s of [...this.streams.values()]) {
      if (s.interrupted && s.id !== keepId) {
        lost = true;
        this.endStream(s, "interrupted");
      }
    }
    return lost;
  }

  /** cf_agent_stream_resuming: a stream is offered to this socket. */
  onResuming(frame) {
    const id = frame.id;
    if (typeof id !== "string" || !id) return;
    this.socket.answer(frame.probeId, true);
    // One stream is active per instance: any other cut-off stream has finished meanwhile.
    if (this.dropInterrupted(id)) this.refreshHistory();
    // Always ACKed, a stream stopped or cleared here too; its replay is then ignored.
    this.socket.ack(id);
    if (this.ignored.has(id)) return;
    let s = this.streams.get(id);
    if (!s) {
      // A stream we learn about by resuming is followed as our own (as useAgentChat does).
      s = this.newStream(id, { own: true });
      if (this.expectContinuation) this.expectContinuation = false;
    }
    s.interrupted = false;
    s.replaying = true;
    this.ui.controls();
  }

  /** cf_agent_error: shown; a rejected request of ours never streams, so the composer is released. */
  onServerError(requestId, text) {
    this.ui.showError(text);
    if (requestId && requestId === this.ownRequestId) {
      const s = this.streams.get(requestId);
      if (s) this.endStream(s, "error");
      else this.ownRequestId = null;
      this.ui.controls();
    }
  }

  // ---------------------------------------------------------------- streams
  newStream(id, { own = false, continuation = false } = {}) {
    const s = {
      id,
      own,
      continuation,
      message: null,
      lastSeq: -1,
      replaying: false,
      interrupted: false,
      errored: false,
      /** Transient data parts (shown while the stream lasts, never stored), by type. */
      transient: new Map(),
    };
    this.streams.set(id, s);
    return s;
  }

  /** cf_agent_use_chat_response: one chunk, an error, or the end of a stream. */
  onResponse(frame) {
    const id = frame.id;
    if (typeof id !== "string" || !id || this.ignored.has(id)) return;
    let s = this.streams.get(id);
    if (!s) {
      if (frame.done && !frame.body) {
        // A terminal frame of a stream that never produced chunks (e.g. a skipped turn).
        this.ignored.add(id);
        if (id === this.ownRequestId) {
          this.ownRequestId = null;
          this.ui.controls();
        }
        return;
      }
      let own = id === this.ownRequestId;
      if (!own && frame.continuation && this.expectContinuation) {
        own = true;
        this.expectContinuation = false;
      }
      s = this.newStream(id, { own, continuation: !!frame.continuation });
    }
    if (frame.continuation) s.continuation = true;
    if (!frame.replay) s.replaying = false;

    if (frame.replayComplete) {
      s.replaying = false;
      this.ui.controls();
      return;
    }
    // A continuation may be replayed over what this page already applied: skip by seq.
    if (s.continuation && typeof frame.seq === "number" && frame.body && !frame.error && !frame.done) {
      if (frame.seq <= s.lastSeq) return;
    }
    if (frame.error) {
      s.errored = true;
      this.setStreamError(s, frame.body || "Stream error");
      if (frame.done) this.endStream(s, "error");
      else this.ui.touch(s.message);
      return;
    }
    if (frame.body) {
      const chunk = parseChunk(frame.body);
      if (chunk) {
        this.applyChunk(s, chunk);
      } else if (frame.done) {
        this.ui.showNotice(frame.body); // e.g. "No response was generated by the agent."
      }
      if (typeof frame.seq === "number") s.lastSeq = Math.max(s.lastSeq, frame.seq);
    }
    if (frame.done) this.endStream(s, frame.outcome || (s.errored ? "error" : "completed"));
    else this.ui.controls();
  }

  /**
   * The message a stream writes to: a continuation extends the last assistant message. (The
   * server's builder_for_reply extends the transcript's last message only if it is the
   * assistant's; the page takes the last assistant message even if a user message follows it.)
   */
  ensureMessage(s) {
    if (s.message) return s.message;
    if (s.continuation) {
      s.message = this.lastAssistant();
      if (s.message) return s.message;
    }
    const { message } = MessageBuilder.create(messageId());
    this.messages.push(message);
    s.message = message;
    this.ui.render();
    return message;
  }

  resetMessage(s, message) {
    message.parts = [];
    delete message.metadata;
    s.transient.clear();
    this.messageErrors.delete(message.id);
  }

  /** One UIMessageChunk: the builder's part, then the page's extras around it. */
  applyChunk(s, chunk) {
    if (chunk.type === "start") {
      this.startMessage(s, chunk);
      new MessageBuilder(s.message).apply(chunk); // its messageMetadata
      this.ui.touch(s.message);
      return;
    }
    const message = this.ensureMessage(s);
    const builder = new MessageBuilder(message);
    builder.apply(chunk);
    switch (chunk.type) {
      case "tool-input-delta": {
        // The raw input text is shown on the card until tool-input-available brings the input.
        const part = builder.toolPart(chunk.toolCallId);
        if (part && part.state === "input-streaming") {
          this.toolInputText.set(part, (this.toolInputText.get(part) || "") + String(chunk.inputTextDelta ?? ""));
        }
        break;
      }
      case "finish":
        // Kept as useAgentChat keeps it (metadata.finishReason); the server's builder does not store it.
        builder.mergeMetadata(chunk.messageMetadata);
        break;
      case "error":
        s.errored = true;
        this.setStreamError(s, chunk.errorText || "Stream error");
        break;
      default:
        if (chunk.type.startsWith("data-") && truthy(chunk.transient)) s.transient.set(chunk.type, chunk.data);
        break;
    }
    this.ui.touch(message);
  }

  /** `start`: a continuation's message is the last reply; any other start (re)builds its message. */
  startMessage(s, chunk) {
    if (s.continuation) {
      this.ensureMessage(s);
      return;
    }
    const existing = s.message || (chunk.messageId ? this.findMessage(chunk.messageId) : null);
    if (existing) {
      // A replayed (or repeated) start rebuilds the message instead of duplicating it.
      this.resetMessage(s, existing);
      if (chunk.messageId && existing.id !== chunk.messageId) {
        this.messageErrors.delete(existing.id);
        existing.id = chunk.messageId;
      }
      s.message = existing;
    } else {
      const { message } = MessageBuilder.create(chunk.messageId || messageId());
      this.messages.push(message);
      s.message = message;
    }
  }

  endStream(s, outcome) {
    this.streams.delete(s.id);
    this.ignored.add(s.id);
    this.transcriptVersion += 1;
    s.transient.clear();
    const message = s.message;
    if (message && !hasContent(message) && !s.continuation && outcome !== "completed") {
      // Nothing was said (skipped, aborted before the first word): drop the empty bubble.
      this.messages = this.messages.filter((m) => m !== message);
    } else if (message && outcome === "aborted") {
      // What was said stays, marked, so a stopped reply does not read as a finished one.
      this.stopped.add(message.id);
    }
    if (message) this.ui.touch(message);
    if (s.id === this.ownRequestId) this.ownRequestId = null;
    if (s.own && message && outcome !== "aborted" && outcome !== "error" && !s.errored) {
      this.runTools(message);
    }
    this.ui.render();
    this.ui.controls();
  }

  setStreamError(s, text) {
    if (s.message) {
      // Shown under the message it belongs to; the banner is for errors without a message.
      this.messageErrors.set(s.message.id, text);
      this.ui.touch(s.message);
    } else {
      this.ui.showError(text);
    }
  }

  // ---------------------------------------------------------------- the server's transcript
  /** The server's list is authoritative, except for messages this page is still streaming. */
  replaceTranscript(list) {
    const live = [];
    for (const s of this.streams.values()) if (s.message) live.push(s.message);
    const next = list
      .filter((m) => m && typeof m === "object" && typeof m.id === "string" && Array.isArray(m.parts))
      .map((m) => live.find((l) => l.id === m.id) || m);
    for (const m of live) if (!next.includes(m)) next.push(m);
    this.messages = next;
    this.transcriptVersion += 1;
    this.ui.render();
    this.ui.controls();
  }

  /** cf_agent_message_updated: a tool part changed (a client tool's result, a decision). */
  onMessageUpdated(updated) {
    if (!updated || typeof updated !== "object" || !Array.isArray(updated.parts)) return;
    let target = this.findMessage(updated.id);
    if (!target) {
      const callIds = new Set(updated.parts.filter(isToolPart).map((p) => p.toolCallId));
      target = this.messages.find((m) => m.parts.some((p) => isToolPart(p) && callIds.has(p.toolCallId))) || null;
    }
    if (!target) return;
    // Mutate in place (keeping the local id) so a stream holding this message keeps it.
    target.parts = updated.parts;
    if (updated.metadata !== undefined) target.metadata = updated.metadata;
    this.ui.touch(target);
  }

  /** Load the stored transcript again (once at a time; again if it changed meanwhile). */
  refreshHistory() {
    if (!this.refreshing) {
      this.refreshing = (async () => {
        try {
          for (let attempt = 0; attempt < HISTORY_TRIES; attempt++) {
            const version = this.transcriptVersion;
            const list = await fetchHistory(this.historyUrl);
            if (version === this.transcriptVersion || attempt === HISTORY_TRIES - 1) {
              this.replaceTranscript(list);
              return;
            }
          }
        } catch (err) {
          this.ui.showError(`Could not reload the conversation: ${err.message || err}`);
        } finally {
          this.refreshing = null;
        }
      })();
    }
    return this.refreshing;
  }
}
