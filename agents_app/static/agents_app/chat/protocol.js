/*
 * The wire: cf_agent_* frame types, the frames this page sends, ids, and the get-messages
 * endpoint (the protocol of Cloudflare's AIChatAgent / useAgentChat).
 */

export const FRAME = Object.freeze({
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
  MCP_SERVERS: "cf_agent_mcp_servers",
  ERROR: "cf_agent_error",
});

// ---------------------------------------------------------------- ids
const NANO = "useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict";
const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

function randomId(size, alphabet) {
  const bytes = crypto.getRandomValues(new Uint8Array(size));
  let out = "";
  for (const b of bytes) out += alphabet[b % alphabet.length];
  return out;
}

/** Request and probe ids (nanoid's alphabet). */
export const nanoid = (size = 8) => randomId(size, NANO);
/** Message ids, like the AI SDK's generateId(). */
export const messageId = () => randomId(16, ALNUM);
/** PartySocket's connection id (`_pk`): one per page, the same on every reconnect. */
export const connectionId = () => [8, 4, 4, 4, 12].map((n) => randomId(n, "0123456789abcdef")).join("-");

// ---------------------------------------------------------------- frames sent
export const frames = {
  /** A user's message: the whole transcript goes along, as useAgentChat sends it. */
  chatRequest(id, messages, clientTools) {
    const body = { messages, trigger: "submit-message", clientTools };
    return { id, init: { method: "POST", body: JSON.stringify(body) }, type: FRAME.REQUEST };
  },
  cancel: (id) => ({ type: FRAME.CANCEL, id }),
  clear: () => ({ type: FRAME.CLEAR }),
  resumeRequest: (probeId) => ({ type: FRAME.RESUME_REQUEST, probeId }),
  resumeAck: (id) => ({ type: FRAME.RESUME_ACK, id }),
  /** A client tool's output; a successful one asks the server to continue the reply. */
  toolResult(toolCallId, toolName, { output, errorText = null, clientTools }) {
    const frame = { type: FRAME.TOOL_RESULT, toolCallId, toolName };
    if (errorText === null) Object.assign(frame, { output, autoContinue: true, clientTools });
    else Object.assign(frame, { output: null, state: "output-error", errorText, autoContinue: false });
    return frame;
  },
  toolApproval: (toolCallId, approved) => ({ type: FRAME.TOOL_APPROVAL, toolCallId, approved, autoContinue: true }),
};

/** The UIMessageChunk in a response frame's body, or null (a plain-text body, bad JSON). */
export function parseChunk(body) {
  let chunk;
  try {
    chunk = JSON.parse(body);
  } catch {
    return null;
  }
  return chunk && typeof chunk === "object" && typeof chunk.type === "string" ? chunk : null;
}

// ---------------------------------------------------------------- HTTP
/** The stored transcript: GET <historyUrl> (/agents/<slug>/<name>/get-messages[?query]). */
export async function fetchHistory(historyUrl) {
  const response = await fetch(historyUrl, {
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
