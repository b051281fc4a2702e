/*
 * Tool calls on the page: client tools (run here when the model calls them), the user's
 * approvals, and the tool cards that show a call, its approval descriptor, durable pause,
 * output or error.
 */

import { el, json, textOf } from "./dom.js";
import { isToolPart, toolNameOf } from "./message-builder.js";
import { frames } from "./protocol.js";

// Client tools: executed by this page when the model calls them. A Map, so that only these
// names are client tools (not what every object inherits, such as "constructor").
const CLIENT_TOOL_IMPLS = new Map([
  ["getBrowserInfo", async () => ({
    userAgent: navigator.userAgent,
    language: navigator.language,
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
  })],
]);
/** Their declarations, sent with every request. */
export const CLIENT_TOOLS = [
  {
    name: "getBrowserInfo",
    description: "The user's browser: user agent, preferred language and time zone.",
    parameters: { type: "object", properties: {} },
  },
];

const STATE_LABEL = {
  "input-streaming": "preparing input…",
  "input-available": "running…",
  "approval-requested": "needs approval",
  "approval-responded": "approval sent",
  "output-available": "done",
  "output-error": "error",
  "output-denied": "denied",
};

export class ToolCalls {
  /**
   * @param {object} env
   *   send(frame)        send on the socket (false when not connected)
   *   connected()        whether the socket is open
   *   touch(message)     mark a message for re-render
   *   showError(text)    the error banner
   *   awaitContinuation()  after an answer with autoContinue: follow the server's continuation
   *   subAgent(agent, name)  the chat page of a sub-agent of this conversation, added to the
   *                      page's sub-agent links if new
   *   knownSubAgent(name)  the chat page of a sub-agent the page already links to, by name, or null
   */
  constructor(env) {
    this.env = env;
    /** Tool calls this page already answered (client tools) or responded to (approvals). */
    this.handled = new Set();
    /** toolCallId -> chat page of the sub-agent that runs the call (agent tools). */
    this.subAgents = new Map();
  }

  /**
   * The chat page of the sub-agent an agent tool's call runs, or null: its progress names it
   * ({agent, instance}, agents_app.agent_tools); after a reload (the final output is plain text)
   * the page's links find it by the tool's default name, <tool>-<toolCallId>.
   */
  subAgentOf(part, toolName) {
    const output = part.output;
    if (part.state === "output-available" && output && typeof output === "object"
        && typeof output.agent === "string" && typeof output.instance === "string" && output.agent && output.instance) {
      if (!this.subAgents.has(part.toolCallId)) {
        this.subAgents.set(part.toolCallId, this.env.subAgent(output.agent, output.instance));
      }
    }
    return this.subAgents.get(part.toolCallId) || this.env.knownSubAgent(`${toolName}-${part.toolCallId}`);
  }

  // ---------------------------------------------------------------- client tools
  /** Run the client tools a finished reply asks for, each call once. */
  run(message) {
    for (const part of message.parts) {
      if (!isToolPart(part) || part.state !== "input-available") continue;
      const toolName = toolNameOf(part);
      if (!CLIENT_TOOL_IMPLS.has(toolName) || this.handled.has(part.toolCallId)) continue;
      this.handled.add(part.toolCallId);
      this.execute(message, part, toolName);
    }
  }

  async execute(message, part, toolName) {
    let output;
    let errorText = null;
    try {
      output = await CLIENT_TOOL_IMPLS.get(toolName)(part.input || {});
    } catch (err) {
      errorText = String(err?.message || err);
    }
    const frame = frames.toolResult(part.toolCallId, toolName, { output, errorText, clientTools: CLIENT_TOOLS });
    if (errorText === null) Object.assign(part, { state: "output-available", output });
    else Object.assign(part, { state: "output-error", errorText });
    this.env.touch(message);
    this.env.send(frame);
    if (frame.autoContinue) this.env.awaitContinuation();
  }

  // ---------------------------------------------------------------- approvals
  respond(message, part, approved) {
    if (this.handled.has(part.toolCallId)) return;
    if (!this.env.connected()) {
      this.env.showError("Not connected: try again when the connection is back.");
      return;
    }
    this.handled.add(part.toolCallId);
    this.env.send(frames.toolApproval(part.toolCallId, approved));
    part.state = "approval-responded";
    part.approval = { ...(part.approval || {}), approved };
    this.env.touch(message);
    this.env.awaitContinuation();
  }

  // ---------------------------------------------------------------- cards
  /** The card of a tool part; `rawInput` is its streamed input text, if any. */
  renderCard(message, part, rawInput) {
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
    if (part.state === "input-available" && CLIENT_TOOL_IMPLS.has(toolName)) label = "running in your browser…";

    const head = el("div", "tool-head");
    head.append(el("span", "tool-icon", "⚙"));
    head.append(el("span", "tool-name", part.title || toolName));
    head.append(el("span", "tool-state", label));
    card.append(head);

    // What the approver is asked about stays on the card after the decision too.
    const descriptor = descriptorOf(part);
    if (descriptor) card.append(renderDescriptor(descriptor));

    const toolInput = part.input !== undefined ? part.input : descriptor?.input;
    if (toolInput !== undefined) card.append(ioBlock("input", json(toolInput)));
    else if (rawInput) card.append(ioBlock("input", rawInput));

    if (part.state === "approval-requested") {
      const actions = el("div", "tool-actions");
      const approve = el("button", "approve", "Approve");
      const reject = el("button", "reject", "Reject");
      approve.type = reject.type = "button";
      const done = this.handled.has(part.toolCallId);
      approve.disabled = reject.disabled = done;
      approve.addEventListener("click", () => this.respond(message, part, true));
      reject.addEventListener("click", () => this.respond(message, part, false));
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
    const subAgent = this.subAgentOf(part, toolName);
    if (subAgent) {
      const link = el("a", "sub-agent-link", `Open the sub-agent's conversation (${subAgent.label})`);
      link.href = subAgent.url;
      card.append(link);
    }
    if (part.state === "output-error") card.append(el("div", "tool-error", part.errorText || "Tool failed"));
    if (part.state === "output-denied") card.append(el("div", "tool-note", "The call was rejected."));
    return card;
  }
}

/**
 * The approval descriptor of a tool part: `approval.descriptor` on an inline (approval-gated)
 * call, the sibling `approvalDescriptor` on a durable-pause one.
 */
function descriptorOf(part) {
  const descriptor = part.approval?.descriptor || part.approvalDescriptor;
  return descriptor && typeof descriptor === "object" && !Array.isArray(descriptor) ? descriptor : null;
}

/**
 * Where a durable pause stands (docs/architecture.md#durable-pause): null for any other tool part. The part keeps state
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
