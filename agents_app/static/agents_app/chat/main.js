/*
 * Think for Django: the chat page's client for the cf_agent_* chat protocol
 * (the protocol of Cloudflare's AIChatAgent / useAgentChat).
 *
 * Native ES modules, no build step, no dependencies. The page provides:
 *   <section id="chat" data-agent="<slug>" data-name="<instance>"> with #messages, #composer,
 *   #input, #send, #stop, #clear, #status, #connection (a banner with a button) and optionally
 *   #error and #starters (buttons whose data-prompt fills the message box), and #mcp-servers
 *   (the instance's MCP servers, shown from cf_agent_mcp_servers frames).
 *
 * Flow: GET /agents/<slug>/<name>/get-messages, then open ws(s)://<host>/agents/<slug>/<name>
 * (both with the page's data-query, e.g. owner=<username> when staff read another user's).
 * Every (re)open sends cf_agent_stream_resume_request; replies stream as
 * cf_agent_use_chat_response frames whose body is one UIMessageChunk.
 *
 * Modules: protocol.js (the wire), message-builder.js (chunks -> UIMessage, as the server
 * builds it), socket.js (connection and resume handshake), streams.js (the transcript and the
 * replies streaming into it), tools.js (client tools, approvals, tool cards), render.js (the
 * DOM), mcp.js (the MCP servers panel), attachments.js and dom.js (rendering helpers). This
 * one wires them together.
 */

import { FRAME, connectionId, fetchHistory, frames } from "./protocol.js";
import { McpServersView } from "./mcp.js";
import { ChatView } from "./render.js";
import { ChatSocket } from "./socket.js";
import { Conversation } from "./streams.js";
import { CLIENT_TOOLS, ToolCalls } from "./tools.js";

// Clear deletes the transcript on the server, for every tab: asked first.
const CLEAR_QUESTION = "Clear this conversation? Its messages are deleted for good, in every open tab.";

const root = document.getElementById("chat");
if (root) start(root);

function start(root) {
  const dom = findElements(root);
  // The instance's address: <slug>/<name>, and /sub/<slug>/<name> per level for a sub-agent
  // (useAgent's `sub` option builds the same path).
  const address = (root.dataset.address || "").split("/");
  // Extra query parameters of the address (staff: owner=<username>), as useAgent's `query` option.
  const query = root.dataset.query || "";
  const basePath = `/agents/${address.map(encodeURIComponent).join("/")}`;
  const historyUrl = `${basePath}/get-messages${query ? `?${query}` : ""}`;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}${basePath}?_pk=${connectionId()}${query ? `&${query}` : ""}`;

  // The pieces call each other through these hooks; every one is in place before the first
  // event can fire (the socket opens after the history has loaded).
  const socket = new ChatSocket(url, {
    onFrame: (frame) => handleFrame(frame),
    onClose: () => conversation.onSocketClosed(),
    onError: (text) => view.showError(text),
    onProbeSettled: (purpose) => conversation.onProbeSettled(purpose),
    onStatus: () => view.refreshStatus(),
    onControls: () => view.updateControls(),
  });
  const tools = new ToolCalls({
    send: (frame) => socket.send(frame),
    connected: () => socket.connected,
    touch: (message) => view.touch(message),
    showError: (text) => view.showError(text),
    awaitContinuation: () => conversation.awaitContinuation(),
    subAgent: (agent, name) => subAgentLink(root, address, query, agent, name),
    knownSubAgent: (name) => knownSubAgent(name),
  });
  const conversation = new Conversation({
    historyUrl,
    socket,
    clientTools: CLIENT_TOOLS,
    runTools: (message) => tools.run(message),
    ui: {
      touch: (message) => view.touch(message),
      render: () => view.scheduleRender(),
      controls: () => view.updateControls(),
      showError: (text) => view.showError(text),
      showNotice: (text) => view.showNotice(text),
      hideError: () => view.hideError(),
    },
  });
  const view = new ChatView(dom, conversation, socket, tools);
  const mcpServers = new McpServersView(dom.mcpEl);

  function handleFrame(frame) {
    switch (frame.type) {
      case FRAME.RESPONSE:
        conversation.onResponse(frame);
        break;
      case FRAME.MESSAGES:
        if (Array.isArray(frame.messages)) conversation.replaceTranscript(frame.messages);
        break;
      case FRAME.CLEAR:
        conversation.reset();
        break;
      case FRAME.MESSAGE_UPDATED:
        conversation.onMessageUpdated(frame.message);
        break;
      case FRAME.RESUMING:
        conversation.onResuming(frame);
        break;
      case FRAME.PENDING:
        socket.pending(frame);
        break;
      case FRAME.RESUME_NONE:
        if (socket.resumeNone(frame)) view.updateControls();
        break;
      case FRAME.RECOVERING:
        conversation.recovering = !!frame.recovering;
        view.updateControls();
        break;
      case FRAME.MCP_SERVERS:
        mcpServers.update(frame.mcp);
        break;
      case FRAME.IDENTITY:
        socket.accepted();
        break;
      case FRAME.ERROR: {
        const text = typeof frame.error === "string" && frame.error ? frame.error : "Server error";
        socket.lastServerError = text;
        conversation.onServerError(frame.id, text);
        break;
      }
      default:
        break; // cf_agent_state, rpc: nothing to show
    }
  }

  socket.listen();

  async function submit() {
    const files = await fileParts(dom.attach?.files);
    if (!conversation.submit(dom.input.value.trim(), files)) return;
    dom.input.value = "";
    if (dom.attach) dom.attach.value = "";
  }
  dom.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  dom.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      submit();
    }
  });
  dom.input.addEventListener("input", () => view.updateControls());
  dom.stopBtn.addEventListener("click", () => {
    if (conversation.stop()) dom.input.focus();
  });
  dom.clearBtn.addEventListener("click", () => {
    if (!window.confirm(CLEAR_QUESTION)) return;
    conversation.reset();
    socket.send(frames.clear());
  });
  dom.connectionEl.querySelector("button").addEventListener("click", () => socket.retryNow());
  dom.starters?.addEventListener("click", (ev) => {
    const starter = ev.target.closest("button[data-prompt]");
    if (!starter) return;
    dom.input.value = starter.dataset.prompt;
    dom.input.focus();
    view.updateControls();
  });

  // Debug/test hook: a read-only view of the client's state.
  window.thinkChat = Object.freeze({
    messages: () => JSON.parse(JSON.stringify(conversation.messages)),
    status: () => view.status,
    activeStreams: () => [...conversation.streams.keys()],
    mcpServers: () => JSON.parse(JSON.stringify(mcpServers.state)),
  });

  view.updateControls();
  (async () => {
    // As useAgentChat: history first, then the socket.
    try {
      conversation.messages = await fetchHistory(historyUrl);
    } catch (err) {
      view.showError(`Could not load the conversation: ${err.message || err}`);
    }
    conversation.historyLoaded = true;
    root.dataset.ready = "true";
    view.scheduleRender();
    socket.connect();
  })();
}

/**
 * The chat page of sub-agent <agent>/<name> of this conversation ({url, label}), linked from the
 * page's "Sub-agents" list as soon as the page learns of it (a tool's progress names it while
 * the parent's turn runs; the server lists the ones it had when the page was made).
 */
function subAgentLink(root, address, query, agent, name) {
  const path = [...address, "sub", agent, name].map(encodeURIComponent).join("/");
  const found = { url: `/chat/${path}/${query ? `?${query}` : ""}`, label: `${agent}/${name}` };
  let nav = document.getElementById("sub-agents");
  if (!nav) {
    nav = document.createElement("nav");
    nav.className = "sub-agents";
    nav.id = "sub-agents";
    nav.append("Sub-agents:");
    root.append(nav);
  }
  nav.hidden = false;
  const links = [...nav.querySelectorAll("a")];
  if (!links.some((link) => link.dataset.agent === agent && link.dataset.name === name)) {
    if (links.length) nav.append(" · ");
    const link = document.createElement("a");
    link.href = found.url;
    link.dataset.agent = agent;
    link.dataset.name = name;
    link.textContent = found.label;
    nav.append(link);
  }
  return found;
}

/** A sub-agent the page links to, by name ({url, label}), or null. */
function knownSubAgent(name) {
  const link = [...document.querySelectorAll("#sub-agents a")].find((a) => a.dataset.name === name);
  return link ? { url: link.getAttribute("href"), label: `${link.dataset.agent}/${name}` } : null;
}

function findElements(root) {
  const $ = (id) => document.getElementById(id);
  const form = $("composer");
  let errorEl = $("error");
  if (!errorEl) {
    errorEl = document.createElement("div");
    errorEl.id = "error";
    errorEl.className = "error-banner";
    errorEl.setAttribute("role", "alert");
    errorEl.hidden = true;
    form.before(errorEl);
  }
  return {
    root,
    list: $("messages"),
    form,
    input: $("input"),
    attach: $("attach"),
    sendBtn: $("send"),
    stopBtn: $("stop"),
    clearBtn: $("clear"),
    statusEl: $("status"),
    errorEl,
    connectionEl: $("connection"),
    starters: $("starters"),
    mcpEl: $("mcp-servers"),
  };
}

/**
 * The chosen files as the message's `file` parts, each its data: URL, as useAgentChat's
 * sendMessage({ text, files }) sends them. The server refuses one above its size limit with an
 * error frame, shown in the banner.
 */
function fileParts(fileList) {
  const read = (file) =>
    new Promise((resolve, reject) => {
      const reader = new FileReader();
      const mediaType = file.type || "application/octet-stream";
      reader.onload = () => resolve({ type: "file", mediaType, filename: file.name, url: reader.result });
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  return Promise.all([...(fileList || [])].map(read));
}
