/*
 * The one message builder of the chat page: applies UIMessageChunks to an assistant UIMessage.
 *
 * It is the JS twin of `MessageBuilder` in agents_app/messages.py (the same table of chunk types,
 * the same handlers in camelCase), and must stay equal to it: the server persists what its builder
 * makes, and a page that built something else would change what it shows on reload.
 * tests/unit/test_chat_js.py runs the golden frames and tests/js/chunk_sequences.json through both
 * and compares the messages.
 *
 * Pure: no DOM, no page state, importable from Node. What only the page needs (stream records,
 * transient data parts, raw tool input text, error display, re-render marking) sits around it,
 * in streams.js.
 *
 * Python's semantics are followed on purpose where JS would differ by default: `dict.get` (a
 * missing key reads as null, never undefined), `isinstance(x, dict)` (a plain object, not an
 * array) and truthiness (an empty array or object is false).
 */

const TERMINAL_TOOL_STATES = new Set(["output-available", "output-error", "output-denied"]);
/** Tool states a repeated approval request or denial leaves alone. */
const SETTLED_TOOL_STATES = new Set([...TERMINAL_TOOL_STATES, "approval-responded"]);

/** A tool call part: static tools are `tool-<name>`, dynamic ones `dynamic-tool`. */
export function isToolPart(part) {
  return typeof part?.type === "string" && (part.type.startsWith("tool-") || part.type === "dynamic-tool");
}

/** The tool's name: from the part type for `tool-<name>`, from `toolName` for `dynamic-tool`. */
export function toolNameOf(part) {
  if (part.type.startsWith("tool-")) return part.type.slice(5);
  return part.toolName || "tool";
}

/** Anything but step boundaries: a reply with no content yet is still "typing". */
export function hasContent(message) {
  return !!message && message.parts.some((p) => p.type !== "step-start");
}

/** Python's truth value, so the builder decides as messages.py does (`[]` and `{}` are false). */
export function truthy(value) {
  if (Array.isArray(value)) return value.length > 0;
  if (value !== null && typeof value === "object") return Object.keys(value).length > 0;
  return !!value;
}

/** `isinstance(value, dict)` for parsed JSON. */
function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** `record.get(key, fallback)`: a missing key reads as `fallback` (null), never undefined. */
function get(record, key, fallback = null) {
  return Object.hasOwn(record, key) ? record[key] : fallback;
}

/** `x is not None` for a key of parsed JSON (missing or null). */
function present(chunk, key) {
  return chunk[key] !== undefined && chunk[key] !== null;
}

/**
 * Accumulates chunks into one assistant UIMessage, in place. The message's `parts` are read
 * afresh on every call, so a page may replace them (a transcript update) between chunks.
 */
export class MessageBuilder {
  constructor(message) {
    this.message = message;
  }

  static create(messageId) {
    return new MessageBuilder({ id: messageId, role: "assistant", parts: [] });
  }

  get parts() {
    return this.message.parts;
  }

  /** The part of a tool call, in this message only. */
  toolPart(toolCallId) {
    return this.parts.find((p) => isToolPart(p) && get(p, "toolCallId") === toolCallId) || null;
  }

  last(kind) {
    for (let i = this.parts.length - 1; i >= 0; i--) if (this.parts[i].type === kind) return this.parts[i];
    return null;
  }

  /**
   * Apply one chunk with the handler CHUNK_HANDLERS names for its type.
   *
   * A `data-<name>` type adds or updates a data part. Any other type (finish, finish-step, abort,
   * error, a provider's own, or a type that is not a string) leaves the parts unchanged: such
   * chunks are still streamed, they just add nothing to the message.
   */
  apply(chunk) {
    const kind = chunk.type;
    if (typeof kind !== "string") return;
    const handler = CHUNK_HANDLERS.get(kind);
    if (handler !== undefined) handler.call(this, chunk);
    else if (kind.startsWith("data-")) this.applyData(chunk);
  }

  messageMetadata(chunk) {
    this.mergeMetadata(chunk.messageMetadata);
  }

  stepStart() {
    this.parts.push({ type: "step-start" });
  }

  /** `text-start` and `reasoning-start`: the part's type is the chunk type's first word. */
  textStart(chunk) {
    const part = { type: chunk.type.split("-")[0], text: "", state: "streaming" };
    if (present(chunk, "providerMetadata")) part.providerMetadata = chunk.providerMetadata;
    this.parts.push(part);
  }

  /** Extends the last part of its type; a delta with no open part (never started, or ended) starts one. */
  textDelta(chunk) {
    const partType = chunk.type.split("-")[0];
    let target = this.last(partType);
    if (target === null || target.state === "done") {
      target = { type: partType, text: "", state: "streaming" };
      this.parts.push(target);
    }
    // Deltas are strings; a null one adds nothing (Python's str(None) would add "None").
    target.text += String(chunk.delta ?? "");
  }

  /** Closes the last part of its type; metadata sent with the end (a reasoning signature) replaces the part's. */
  textEnd(chunk) {
    const target = this.last(chunk.type.split("-")[0]);
    if (target === null) return;
    target.state = "done";
    if (present(chunk, "providerMetadata")) target.providerMetadata = chunk.providerMetadata;
  }

  file(chunk) {
    this.parts.push({ type: "file", mediaType: get(chunk, "mediaType"), url: get(chunk, "url") });
  }

  source(chunk) {
    this.parts.push({ ...chunk });
  }

  toolInputStart(chunk) {
    if (this.toolPart(get(chunk, "toolCallId")) !== null) return;
    const part = {
      type: truthy(chunk.dynamic) ? "dynamic-tool" : `tool-${get(chunk, "toolName")}`,
      toolCallId: get(chunk, "toolCallId"),
      toolName: get(chunk, "toolName"),
      state: "input-streaming",
    };
    for (const key of ["providerExecuted", "title"]) if (Object.hasOwn(chunk, key)) part[key] = chunk[key];
    this.parts.push(part);
  }

  /** Nothing: the input is only final at `tool-input-available`. */
  toolInputDelta() {}

  toolInputAvailable(chunk) {
    const part = this.toolPart(get(chunk, "toolCallId"));
    const input = isPlainObject(chunk.input) ? chunk.input : {};
    if (part === null) {
      this.parts.push({
        type: `tool-${get(chunk, "toolName")}`,
        toolCallId: get(chunk, "toolCallId"),
        toolName: get(chunk, "toolName"),
        state: "input-available",
        input,
      });
    } else if (part.state === "input-streaming") {
      Object.assign(part, { state: "input-available", input });
    }
  }

  toolInputError(chunk) {
    let part = this.toolPart(get(chunk, "toolCallId"));
    if (part === null) {
      const tool = get(chunk, "toolName");
      part = { type: `tool-${tool}`, toolCallId: get(chunk, "toolCallId"), toolName: tool };
      this.parts.push(part);
    }
    if (!TERMINAL_TOOL_STATES.has(part.state)) {
      const errorText = get(chunk, "errorText", "");
      Object.assign(part, { state: "output-error", input: get(chunk, "input"), errorText });
    }
  }

  toolApprovalRequest(chunk) {
    const part = this.toolPart(get(chunk, "toolCallId"));
    if (part === null || SETTLED_TOOL_STATES.has(part.state)) return;
    const approval = { id: get(chunk, "approvalId") };
    if (present(chunk, "approvalDescriptor")) approval.descriptor = chunk.approvalDescriptor;
    Object.assign(part, { state: "approval-requested", approval });
  }

  /** Each output replaces the last; a `preliminary` one (progress) marks the part, the final one not. */
  toolOutputAvailable(chunk) {
    const part = this.toolPart(get(chunk, "toolCallId"));
    if (part === null) return;
    Object.assign(part, { state: "output-available", output: get(chunk, "output") });
    if (truthy(chunk.preliminary)) part.preliminary = true;
    else delete part.preliminary;
    if (present(chunk, "approvalDescriptor")) part.approvalDescriptor = chunk.approvalDescriptor;
  }

  toolOutputError(chunk) {
    const part = this.toolPart(get(chunk, "toolCallId"));
    if (part !== null) Object.assign(part, { state: "output-error", errorText: get(chunk, "errorText", "") });
  }

  toolOutputDenied(chunk) {
    const part = this.toolPart(get(chunk, "toolCallId"));
    if (part !== null && !SETTLED_TOOL_STATES.has(part.state)) part.state = "output-denied";
  }

  /** A data part: a transient one is not kept; one with an id replaces the data of its namesake. */
  applyData(chunk) {
    if (truthy(chunk.transient)) return;
    const dataId = get(chunk, "id");
    if (dataId !== null) {
      const same = this.parts.find((p) => p.type === chunk.type && p.id === dataId);
      if (same) {
        same.data = get(chunk, "data");
        return;
      }
    }
    const part = { type: chunk.type };
    if (dataId !== null) part.id = dataId;
    part.data = get(chunk, "data");
    this.parts.push(part);
  }

  /** Shallow-merge a metadata object into the message's (anything else is ignored). */
  mergeMetadata(metadata) {
    if (isPlainObject(metadata)) this.message.metadata = { ...(this.message.metadata || {}), ...metadata };
  }
}

const proto = MessageBuilder.prototype;
/**
 * Chunk type -> the method that applies it; `apply` says what happens to the other types. A Map,
 * so that a type such as "constructor" finds nothing. messages.py has the same table
 * (`MessageBuilder._CHUNK_HANDLERS`), in the same order.
 */
const CHUNK_HANDLERS = new Map([
  ["start", proto.messageMetadata],
  ["message-metadata", proto.messageMetadata],
  ["start-step", proto.stepStart],
  ["step-start", proto.stepStart],
  ["text-start", proto.textStart],
  ["text-delta", proto.textDelta],
  ["text-end", proto.textEnd],
  ["reasoning-start", proto.textStart],
  ["reasoning-delta", proto.textDelta],
  ["reasoning-end", proto.textEnd],
  ["file", proto.file],
  ["source-url", proto.source],
  ["source-document", proto.source],
  ["tool-input-start", proto.toolInputStart],
  ["tool-input-delta", proto.toolInputDelta],
  ["tool-input-available", proto.toolInputAvailable],
  ["tool-input-error", proto.toolInputError],
  ["tool-approval-request", proto.toolApprovalRequest],
  ["tool-output-available", proto.toolOutputAvailable],
  ["tool-output-error", proto.toolOutputError],
  ["tool-output-denied", proto.toolOutputDenied],
]);
