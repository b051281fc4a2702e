/*
 * The page: the message list (re-rendered per message when it changes), the status line, the
 * composer's buttons and the error banner. All model text goes in with textContent.
 */

import { renderAttachments } from "./attachments.js";
import { el, json, safeUrl } from "./dom.js";
import { roleLabel } from "./labels.js";
import { hasContent, isToolPart } from "./message-builder.js";

const STATUS_TEXT = {
  connecting: "connecting…",
  connected: "connected",
  reconnecting: "reconnecting…",
  streaming: "streaming",
  disconnected: "disconnected",
};

export class ChatView {
  /**
   * @param {object} dom           root, list, input, sendBtn, stopBtn, clearBtn, statusEl, errorEl,
   *                               connectionEl, starters (optional)
   * @param {Conversation} conversation  what is shown (messages, streams, errors, busy)
   * @param {ChatSocket} socket    the connection's state, for the status line
   * @param {ToolCalls} tools      renders tool cards
   */
  constructor(dom, conversation, socket, tools) {
    this.dom = dom;
    this.conversation = conversation;
    this.socket = socket;
    this.tools = tools;
    /** message object -> its <li> */
    this.cache = new WeakMap();
    /** Messages to render again. */
    this.dirty = new WeakSet();
    this.renderQueued = false;
    /** Open <details> (reasoning) by "messageId:index". */
    this.openDetails = new Set();
    /** What the status line shows: connecting, connected, reconnecting, streaming, disconnected. */
    this.status = "connecting";
    /** The connection banner's countdown timer, while the banner is shown. */
    this.countdown = null;
  }

  // ---------------------------------------------------------------- status & controls
  currentStatus() {
    const socket = this.socket;
    if (socket.terminal) return "disconnected";
    if (!socket.connected) return socket.everOpened ? "reconnecting" : "connecting";
    return this.conversation.isBusy() ? "streaming" : "connected";
  }

  refreshStatus() {
    const { socket, conversation } = this;
    const statusEl = this.dom.statusEl;
    this.status = this.currentStatus();
    let text = STATUS_TEXT[this.status];
    if (this.status === "disconnected") text = socket.terminalReason ? `disconnected: ${socket.terminalReason}` : text;
    else if (conversation.recovering) text = "recovering…";
    else if (socket.note && socket.connected) text = socket.note;
    statusEl.dataset.state = this.status;
    if (statusEl.textContent !== text) statusEl.textContent = text;
    this.refreshConnectionBanner();
  }

  /**
   * The connection banner: shown while the socket is down and will be retried, with when the next
   * attempt comes; a terminal close is the error banner's (no retry follows).
   */
  refreshConnectionBanner() {
    const { socket } = this;
    const banner = this.dom.connectionEl;
    const down = !socket.connected && !socket.terminal && socket.attempts > 0;
    banner.hidden = !down;
    if (!down) {
      clearInterval(this.countdown);
      this.countdown = null;
      return;
    }
    const seconds = Math.max(0, Math.ceil((socket.retryAt - Date.now()) / 1000));
    const lost = socket.everOpened ? "Connection to the server lost." : "Cannot reach the server.";
    const next = socket.reconnectTimer ? `Reconnecting in ${seconds} s (attempt ${socket.attempts + 1})…` : "Reconnecting…";
    banner.querySelector(".connection-text").textContent = `${lost} ${next}`;
    // The countdown moves on by itself while the banner is up.
    this.countdown ??= setInterval(() => this.refreshConnectionBanner(), 500);
  }

  updateControls() {
    const { dom, socket } = this;
    const busy = this.conversation.isBusy();
    dom.sendBtn.disabled = !socket.connected || busy;
    dom.stopBtn.disabled = !busy;
    dom.clearBtn.disabled = !socket.connected;
    dom.input.disabled = socket.terminal;
    dom.root.dataset.busy = busy ? "true" : "false";
    this.refreshStatus();
  }

  showError(text) {
    this.showBanner(text, "error");
  }

  showNotice(text) {
    this.showBanner(text, "notice");
  }

  showBanner(text, kind) {
    const errorEl = this.dom.errorEl;
    errorEl.textContent = text;
    errorEl.dataset.kind = kind;
    errorEl.hidden = false;
  }

  hideError() {
    this.dom.errorEl.hidden = true;
    this.dom.errorEl.textContent = "";
  }

  // ---------------------------------------------------------------- the message list
  touch(message) {
    if (message) this.dirty.add(message);
    this.scheduleRender();
  }

  scheduleRender() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    // A task, not requestAnimationFrame: background tabs must keep up with their streams too.
    setTimeout(() => this.render(), 0);
  }

  render() {
    this.renderQueued = false;
    const listEl = this.dom.list;
    const nearBottom = listEl.scrollHeight - listEl.scrollTop - listEl.clientHeight < 80;
    const nodes = [];
    for (const message of this.conversation.messages) {
      let li = this.cache.get(message);
      if (!li || this.dirty.has(message)) {
        const fresh = this.renderMessage(message);
        if (li && li.parentNode === listEl) listEl.replaceChild(fresh, li);
        li = fresh;
        this.cache.set(message, li);
      }
      nodes.push(li);
    }
    this.dirty = new WeakSet();
    const empty = nodes.length === 0 && this.conversation.historyLoaded;
    if (empty) nodes.push(el("li", "empty", "No messages yet. Say hello!"));
    if (this.dom.starters) this.dom.starters.hidden = !empty;
    // Reconcile the list with as few moves as possible (keeps text selections).
    nodes.forEach((node, i) => {
      if (listEl.children[i] !== node) listEl.insertBefore(node, listEl.children[i] || null);
    });
    while (listEl.children.length > nodes.length) listEl.lastElementChild.remove();
    if (nearBottom) listEl.scrollTop = listEl.scrollHeight;
  }

  renderMessage(message) {
    const role = ["user", "assistant", "system"].includes(message.role) ? message.role : "system";
    const s = this.conversation.streamOf(message);
    const li = el("li", `msg ${role}${s ? " streaming" : ""}`);
    li.dataset.id = message.id;
    li.dataset.role = role;
    li.append(el("div", "role", roleLabel(message, role)));
    const body = el("div", "parts");
    let sawContent = false;
    message.parts.forEach((part, index) => {
      const node = this.renderPart(message, part, index, sawContent);
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
    // A note the server wrote for the model (which earlier call a staff decision's reply is about):
    // the reply after it tells the person, so the page does not show the instruction itself.
    if (role === "system" && message.metadata?.continuationOf) li.hidden = true;
    // How the reply ended: as this page saw it, else as stored with the message (a reload, or a
    // tab that was away, knows of a failed or stopped reply only from its metadata).
    const ended = s ? undefined : message.metadata?.outcome;
    if ((this.conversation.stopped.has(message.id) || ended === "aborted") && !s) {
      li.dataset.stopped = "true";
      li.append(el("div", "msg-stopped", "Stopped before the end of the reply"));
    }
    const stored = ended === "error" ? String(message.metadata.errorText || "The reply failed.") : null;
    const error = this.conversation.messageErrors.get(message.id) || stored;
    if (error) li.append(el("div", "msg-error", error));
    return li;
  }

  renderPart(message, part, index, sawContent) {
    const type = part?.type;
    if (typeof type !== "string") return null;
    if (type === "text") {
      return el("div", `part text${part.state === "streaming" ? " streaming" : ""}`, part.text || "");
    }
    if (type === "reasoning") return this.renderReasoning(message, part, index);
    if (type === "step-start") return sawContent ? el("hr", "step") : null;
    if (isToolPart(part)) return this.tools.renderCard(message, part, this.conversation.toolInputText.get(part));
    if (type.startsWith("data-")) return renderData(type, part.data, false);
    if (type === "file") return renderFile(part);
    if (type === "source-url") return renderSourceUrl(part);
    if (type === "source-document") {
      const node = el("div", "part source");
      node.append(el("span", "label", "Document "));
      node.append(el("span", null, [part.title, part.filename].filter(Boolean).join(" · ") || part.sourceId || ""));
      return node;
    }
    return null;
  }

  /** Collapsed unless the user opened it (remembered across re-renders). */
  renderReasoning(message, part, index) {
    const key = `${message.id}:${index}`;
    const details = el("details", "part reasoning");
    details.append(el("summary", null, part.state === "streaming" ? "Thinking…" : "Reasoning"));
    details.append(el("div", "reasoning-text", part.text || ""));
    details.open = this.openDetails.has(key);
    details.addEventListener("toggle", () => {
      if (details.open) this.openDetails.add(key);
      else this.openDetails.delete(key);
    });
    return details;
  }
}

function renderSourceUrl(part) {
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
