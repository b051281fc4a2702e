// Conformance harness: runs the REAL `useAgent` + `useAgentChat` hooks (agents 0.32 /
// @cloudflare/ai-chat 0.12 / ai 7) against a live Think for Django server.
//
//   node harness.mjs <scenario> <host:port> <cookie>
//
// The hooks are mounted with react-dom/client under jsdom in plain Node (see
// docs/architecture.md#tests-against-the-reference). Every WebSocket is a `TappedWS`: it sends the session
// cookie and a browser-like Origin on the upgrade, records every frame in both directions, and
// re-dispatches each inbound event on its own macrotask (setImmediate) so the client sees frames
// one task at a time, as in a browser. Each scenario asserts on the final hook state, on the
// recorded frames, and on GET .../get-messages; each uses a fresh instance name.
//
// Output: the last stdout line is `RESULT {json}`; the exit code is 0 on pass, 1 on failure, and
// the frame log is printed before RESULT on failure.
// Environment: HARNESS_DUMP=1 prints the frame log on success too; SYNC_WS=1 delivers frames
// synchronously as `ws` does (no per-message re-dispatch).

import { setTimeout as sleep } from "node:timers/promises";
import { JSDOM } from "jsdom";
import WS from "ws";

const USAGE = "usage: node harness.mjs <scenario> <host:port> <cookie>";
const [scenarioName, HOST, COOKIE = ""] = process.argv.slice(2);
const ORIGIN = `http://${HOST}`;
const SYNC_WS = process.env.SYNC_WS === "1";
const DUMP = process.env.HARNESS_DUMP === "1";

const AGENT_CLASS = "DemoAgent";
const AGENT_SLUG = "demo-agent";
const RESP = "cf_agent_use_chat_response";
// What the server's offline demo model answers (agents_app/llm/demo.py).
const ECHO_PREFIX = "(demo model, offline) You said: ";
const FAIL_PARTIAL = "This reply will fail ";
const FAIL_TEXT = "The demo model failed on purpose (/fail).";
const words = (n) => Array.from({ length: n }, (_, i) => `w${i} `).join("");

const STEP_TIMEOUT_MS = 15_000;
// After a turn looks finished, give late frames and re-renders time to land before asserting
// "exactly one assistant message": a duplicate would show up within a few event-loop turns.
const SETTLE_MS = 150;

// ---------------------------------------------------------------------------------------------
// A jsdom window must exist before react-dom is imported (it reads navigator.userAgent at load).
// Node's own fetch, EventTarget and MessageEvent are kept.
const dom = new JSDOM("<!doctype html><html><body></body></html>", { url: `${ORIGIN}/` });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
Object.defineProperty(globalThis, "navigator", { value: dom.window.navigator, configurable: true });

const React = await import("react");
const { createRoot } = await import("react-dom/client");
const { useAgent } = await import("agents/react");
const { useAgentChat } = await import("@cloudflare/ai-chat/react");
const h = React.createElement;

const T0 = performance.now();
const now = () => Math.round(performance.now() - T0);

class ConformanceError extends Error {}

function fail(message) {
  throw new ConformanceError(message);
}

function expect(condition, message) {
  if (!condition) fail(message);
}

function expectEqual(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) fail(`${what}: expected ${e}, got ${a}`);
}

// Like expectEqual, but object key order does not matter.
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().filter((k) => value[k] !== undefined).map((k) => [k, canonical(value[k])]));
  }
  return value;
}

function expectSame(actual, expected, what) {
  expectEqual(canonical(actual), canonical(expected), what);
}

async function waitFor(what, predicate, timeoutMs = STEP_TIMEOUT_MS) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = predicate();
    if (value) return value;
    if (performance.now() > deadline) fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP: every fetch (the hook's get-messages included) is logged; the harness's own reads of the
// transcript go through the untapped fetch.

const rawFetch = globalThis.fetch;
const fetchLog = [];
globalThis.fetch = async (input, init) => {
  const entry = { t: now(), url: String(input), cookie: new Headers(init?.headers).get("cookie") !== null };
  fetchLog.push(entry);
  const response = await rawFetch(input, init);
  entry.status = response.status;
  return response;
};

function getMessagesUrl(name, slug = AGENT_SLUG) {
  return `${ORIGIN}/agents/${slug}/${encodeURIComponent(name)}/get-messages`;
}

async function serverTranscript(name, slug = AGENT_SLUG) {
  const response = await rawFetch(getMessagesUrl(name, slug), { headers: { Cookie: COOKIE } });
  expect(response.ok, `GET get-messages answered ${response.status}`);
  const body = await response.json();
  expect(Array.isArray(body), `get-messages must return a JSON array, got ${JSON.stringify(body)}`);
  return body;
}

// The transcript once `done(messages)` holds, or the last one read after `timeoutMs`.
async function pollTranscript(name, done, timeoutMs = 3000) {
  const deadline = performance.now() + timeoutMs;
  let messages = await serverTranscript(name);
  while (!done(messages) && performance.now() < deadline) {
    await sleep(30);
    messages = await serverTranscript(name);
  }
  return messages;
}

// ---------------------------------------------------------------------------------------------
// Message helpers.

const textOf = (message) =>
  (message?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");

// How a reply's turn ended, as the server stores it in the message's metadata (failed or stopped).
const outcomeMark = (message) =>
  Object.fromEntries(["outcome", "errorText"].filter((k) => message?.metadata?.[k] !== undefined).map((k) => [k, message.metadata[k]]));

const summary = (messages) => messages.map((m) => ({ id: m.id, role: m.role, text: textOf(m) }));

const userMessage = (id, text) => ({ id, role: "user", parts: [{ type: "text", text }] });

const isToolPart = (part) => part.type.startsWith("tool-") || part.type === "dynamic-tool";
const toolParts = (message) => (message?.parts ?? []).filter(isToolPart);
const toolStates = (messages) => messages.flatMap((m) => toolParts(m).map((p) => `${p.toolCallId}:${p.state}`));

// What a message says about its tools, for comparing the hook's state with the stored transcript.
const toolSummary = (messages) =>
  messages.map((m) => ({
    id: m.id,
    role: m.role,
    text: textOf(m),
    tools: toolParts(m).map((p) => ({
      type: p.type,
      toolCallId: p.toolCallId,
      state: p.state,
      input: p.input,
      output: p.output,
      errorText: p.errorText,
      approved: p.approval?.approved,
    })),
    data: (m.parts ?? []).filter((p) => p.type.startsWith("data-")).map((p) => ({ type: p.type, id: p.id, data: p.data })),
  }));

function expectOneAssistantPerTurn(messages, turns, who) {
  expectEqual(
    messages.map((m) => m.role),
    Array.from({ length: turns }, () => ["user", "assistant"]).flat(),
    `${who}: roles (exactly one assistant message per turn)`,
  );
}

// The user messages at the end of a request's transcript: what the terminal frame's messageIds holds.
function trailingUserIds(messages) {
  const ids = [];
  for (let i = messages.length - 1; i >= 0 && messages[i].role === "user"; i--) ids.unshift(messages[i].id);
  return ids;
}

// ---------------------------------------------------------------------------------------------
// A tab: one mounted useAgent + useAgentChat pair, with its own tapped sockets and frame log.

class Tab {
  constructor(label, name, cookie, { onToolCall, agentClass = AGENT_CLASS } = {}) {
    this.label = label;
    this.name = name;
    this.cookie = cookie;
    this.onToolCall = onToolCall;
    this.agentClass = agentClass;
    this.dataParts = []; // {t, part} per onData call
    this.mcpUpdates = []; // {t, mcp} per onMcpUpdate call (cf_agent_mcp_servers)
    this.log = []; // {t, sock, dir: ">" (client to server) | "<", frame}
    this.sockets = [];
    this.socketEvents = []; // errors and closes, for diagnosis
    this.snapshots = []; // committed hook state over time
    this.agent = null;
    this.chat = null;
    this.root = null;
    this.WebSocketClass = tappedSocketClass(this);
  }

  record(dir, sock, raw) {
    const text = typeof raw === "string" ? raw : Buffer.from(raw).toString("utf8");
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      frame = { unparsable: text };
    }
    this.log.push({ t: now(), sock, dir, frame });
  }

  commit() {
    const { status, messages, error } = this.chat;
    const last = this.snapshots.at(-1);
    const snapshot = { t: now(), status, error: error?.message, recovering: this.chat.isRecovering,
                       messages: summary(messages), tools: toolStates(messages) };
    if (!last || JSON.stringify({ ...last, t: 0 }) !== JSON.stringify({ ...snapshot, t: 0 })) {
      this.snapshots.push(snapshot);
    }
  }

  inbound(predicate = () => true) {
    return this.log.filter((e) => e.dir === "<" && predicate(e.frame)).map((e) => e.frame);
  }

  outbound(predicate = () => true) {
    return this.log.filter((e) => e.dir === ">" && predicate(e.frame)).map((e) => e.frame);
  }

  indexOf(dir, predicate) {
    return this.log.findIndex((e) => e.dir === dir && predicate(e.frame));
  }

  responses(requestId) {
    return this.inbound((f) => f.type === RESP && f.id === requestId);
  }

  // Frames one socket carried, in order: {dir, frame}.
  onSocket(index) {
    return this.log.filter((e) => e.sock === index);
  }

  terminal(requestId) {
    return this.responses(requestId).find((f) => f.done === true);
  }
}

function tappedSocketClass(tab) {
  return class TappedWS extends WS {
    constructor(url, protocols) {
      super(url, protocols, { headers: { Cookie: tab.cookie, Origin: ORIGIN } });
      tab.sockets.push(this);
      this.index = tab.sockets.length;
      this.connectUrl = url;
    }

    send(data, ...rest) {
      tab.record(">", this.index, data);
      return super.send(data, ...rest);
    }

    emit(type, ...args) {
      if (type === "message") tab.record("<", this.index, args[0]);
      if (type === "error") tab.socketEvents.push({ t: now(), sock: this.index, error: String(args[0]?.message ?? args[0]) });
      if (type === "close") tab.socketEvents.push({ t: now(), sock: this.index, close: args[0], reason: String(args[1] ?? "") });
      // ws fires every frame of one TCP read synchronously; a browser gives each its own task.
      // Messages and the close are queued in arrival order so they stay ordered.
      if (!SYNC_WS && (type === "message" || type === "close")) {
        setImmediate(() => super.emit(type, ...args));
        return true;
      }
      return super.emit(type, ...args);
    }
  };
}

function TabView({ tab }) {
  const agent = useAgent({
    agent: tab.agentClass,
    name: tab.name,
    host: HOST,
    WebSocket: tab.WebSocketClass,
    minReconnectionDelay: 100,
    maxReconnectionDelay: 200,
    // Every MCP structure the client hands over (cf_agent_mcp_servers), in arrival order.
    onMcpUpdate: (mcp) => tab.mcpUpdates.push({ t: now(), mcp: structuredClone(mcp) }),
  });
  const chat = useAgentChat({
    agent,
    headers: { Cookie: tab.cookie },
    // Every data part the hook reports (tool progress), in arrival order.
    onData: (part) => tab.dataParts.push({ t: now(), part: structuredClone(part) }),
    // Only tabs that answer client tools register onToolCall; the hook behaves differently when
    // it is set (it holds isServerStreaming while a call is pending).
    ...(tab.onToolCall ? { onToolCall: (options) => tab.onToolCall(options) } : {}),
  });
  // Publish only committed state to the driver.
  React.useLayoutEffect(() => {
    tab.agent = agent;
    tab.chat = chat;
    tab.commit();
  });
  return null;
}

const openTabs = [];

function probeAnswered(tab) {
  const probes = new Set(tab.outbound((f) => f.type === "cf_agent_stream_resume_request").map((f) => f.probeId));
  return tab.inbound((f) => f.probeId !== undefined && probes.has(f.probeId)).length > 0;
}

function mountTab(label, name, cookie = COOKIE, options = {}) {
  const tab = new Tab(label, name, cookie, options);
  openTabs.push(tab);
  const container = document.createElement("div");
  document.body.appendChild(container);
  tab.root = createRoot(container);
  tab.root.render(h(React.Suspense, { fallback: null }, h(TabView, { tab })));
  return tab;
}

// Mounts a tab and waits until it is identified and its resume probe has been answered.
async function openTab(label, name, options = {}) {
  const tab = mountTab(label, name, COOKIE, options);
  await waitFor(`tab ${label} to be identified and its resume probe answered`, () => tab.agent?.identified && probeAnswered(tab));
  return tab;
}

async function closeTab(tab) {
  tab.root.unmount();
  await waitFor(`tab ${tab.label}'s sockets to close`, () => tab.sockets.every((s) => s.readyState === WS.CLOSED), 5000);
}

// ---------------------------------------------------------------------------------------------
// Protocol checks on recorded frames.

// The frames a fresh tab must see on connect (docs/protocol.md#connect-sequence): identity first, the MCP structure, and
// an idle answer to the resume probe that echoes its probeId.
function checkConnectFrames(tab) {
  const first = tab.log.find((e) => e.dir === "<")?.frame;
  expectEqual(first, { type: "cf_agent_identity", name: tab.name, agent: AGENT_SLUG }, `${tab.label}: first server frame`);
  const mcp = tab.inbound((f) => f.type === "cf_agent_mcp_servers");
  expectEqual(mcp.length, 1, `${tab.label}: cf_agent_mcp_servers frames on connect`);
  const [probe] = tab.outbound((f) => f.type === "cf_agent_stream_resume_request");
  expect(probe?.probeId, `${tab.label}: the client sent no cf_agent_stream_resume_request`);
  const answers = tab.inbound((f) => f.probeId === probe.probeId);
  expectEqual(answers, [{ type: "cf_agent_stream_resume_none", reason: "idle", probeId: probe.probeId }], `${tab.label}: answer to the resume probe`);
}

// Checks one reply stream as a tab received it and returns what it carried.
//   outcome: expected `outcome` of the terminal frame (undefined for a plain completion)
//   error:   expected in-band error text, if the turn fails
//   messageIds: expected `messageIds` of the terminal frame
function checkStream(tab, requestId, { outcome, error, messageIds } = {}) {
  const who = `${tab.label}: stream ${requestId}`;
  const frames = tab.responses(requestId);
  expect(frames.length > 0, `${who}: no cf_agent_use_chat_response frames received`);
  expect(frames.every((f) => !f.replay), `${who}: unexpected replay frames without a reconnect`);
  const terminals = frames.filter((f) => f.done === true);
  expectEqual(terminals.length, 1, `${who}: number of terminal (done:true) frames`);
  const terminal = terminals[0];
  expect(frames.at(-1) === terminal, `${who}: frames arrived after the terminal frame`);

  const chunkFrames = frames.filter((f) => f.done === false && !f.error);
  expectEqual(chunkFrames.map((f) => f.seq), chunkFrames.map((_, i) => i), `${who}: seq of chunk frames (0-based, no gaps)`);
  const chunks = chunkFrames.map((f) => {
    let chunk;
    try {
      chunk = JSON.parse(f.body);
    } catch {
      fail(`${who}: chunk body is not JSON: ${f.body}`);
    }
    expect(typeof chunk?.type === "string", `${who}: chunk without a type: ${f.body}`);
    return chunk;
  });
  expectEqual(chunks[0]?.type, "start", `${who}: first chunk type`);
  expect(typeof chunks[0].messageId === "string" && chunks[0].messageId, `${who}: the start chunk must carry messageId (docs/protocol.md#normal-turn)`);

  const errorFrames = frames.filter((f) => f.error === true);
  if (error === undefined) {
    expectEqual(errorFrames.length, 0, `${who}: error frames`);
    expectEqual(terminal.body, "", `${who}: terminal frame body`);
    expectEqual(terminal.outcome, outcome, `${who}: terminal frame outcome`);
  } else {
    expectEqual(errorFrames.length, 1, `${who}: error frames`);
    expectEqual(errorFrames[0].body, error, `${who}: error frame body (the error text)`);
    // Either the in-band form (error frame, then done with outcome "error") or a single
    // terminal error frame (docs/protocol.md#turn-errors).
    if (errorFrames[0] !== terminal) expectEqual(terminal.outcome, "error", `${who}: terminal outcome after an in-band error`);
  }
  if (messageIds !== undefined) expectEqual(terminal.messageIds, messageIds, `${who}: terminal messageIds`);

  const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  return { chunks, terminal, messageId: chunks[0].messageId, text };
}

// Checks a reply stream that a tab picked up again on socket `sock` after a drop or a reload
// (docs/protocol.md#replay): one probe-driven ACK, then a replay of every stored chunk from seq 0, then either
// `replayComplete` and live chunks continuing the seq, or a replayed terminal frame. `earlier`
// is what the tab received for this request before (bodies must match seq by seq).
function checkResumedStream(tab, sock, requestId, earlier = []) {
  const who = `${tab.label}#${sock}: resumed stream ${requestId}`;
  const entries = tab.onSocket(sock);
  const acks = entries.filter((e) => e.dir === ">" && e.frame.type === "cf_agent_stream_resume_ack");
  expectEqual(acks.map((e) => e.frame), [{ type: "cf_agent_stream_resume_ack", id: requestId }], `${who}: ACK frames sent`);
  const resuming = entries.filter((e) => e.dir === "<" && e.frame.type === "cf_agent_stream_resuming" && e.frame.id === requestId);
  expect(resuming.length > 0, `${who}: no cf_agent_stream_resuming received`);
  const ackAt = entries.indexOf(acks[0]);

  const frames = entries.filter((e) => e.dir === "<" && e.frame.type === RESP && e.frame.id === requestId);
  // Between cf_agent_stream_resuming and the ACK, the connection gets no live frames.
  expect(frames.every((e) => entries.indexOf(e) > ackAt), `${who}: response frames arrived before the ACK`);
  const replayed = frames.filter((e) => e.frame.replay).map((e) => e.frame);
  const live = frames.filter((e) => !e.frame.replay).map((e) => e.frame);
  expect(frames.slice(0, replayed.length).every((e) => e.frame.replay), `${who}: live frames interleaved with the replay`);

  const replayChunks = replayed.filter((f) => !f.done && !f.replayComplete);
  expectEqual(replayChunks.map((f) => f.seq), replayChunks.map((_, i) => i), `${who}: seq of replayed chunks (all stored chunks from 0)`);
  const replayEnd = replayed.at(-1);
  expect(replayEnd && (replayEnd.replayComplete === true || replayEnd.done === true), `${who}: the replay must end with replayComplete or a replayed terminal frame`);
  expectEqual(replayed.filter((f) => f.replayComplete || f.done).length, 1, `${who}: replay end frames`);

  const liveChunks = live.filter((f) => !f.done);
  const terminals = [...replayed, ...live].filter((f) => f.done === true);
  expectEqual(terminals.length, 1, `${who}: terminal frames`);
  expect(frames.at(-1).frame === terminals[0], `${who}: frames after the terminal frame`);
  if (replayEnd.done) expectEqual(liveChunks.length, 0, `${who}: live chunks after a replayed terminal frame`);
  expectEqual(
    liveChunks.map((f) => f.seq),
    liveChunks.map((_, i) => replayChunks.length + i),
    `${who}: seq of live chunks (continuing the replay, no gap, no duplicate)`,
  );
  expectEqual(terminals[0].body, "", `${who}: terminal body`);
  expectEqual(terminals[0].outcome, undefined, `${who}: terminal outcome`);

  const all = [...replayChunks, ...liveChunks];
  for (const before of earlier.filter((f) => !f.done && !f.error)) {
    expectEqual(all[before.seq]?.body, before.body, `${who}: body of seq ${before.seq} (replay vs first delivery)`);
  }
  const chunks = all.map((f) => JSON.parse(f.body));
  expectEqual(chunks[0]?.type, "start", `${who}: first replayed chunk type`);
  expect(chunks[0].messageId, `${who}: the replayed start chunk must carry messageId`);
  const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  return { chunks, terminal: terminals[0], messageId: chunks[0].messageId, text, replayed: replayChunks.length, live: liveChunks.length };
}

// The frames of continuation `contId` on one socket (`entries`, in order), picked up with an ACK at
// index `ackAt`: every frame continuation:true; a replay of the stored chunks from seq 0 that ends
// with replayComplete (still live) or a replayed terminal frame; live chunks continuing the seq;
// exactly one terminal frame; a start chunk without messageId.
function checkContinuationFrames(entries, contId, ackAt, who) {
  const at = (entry) => entries.indexOf(entry);
  const all = entries.filter((e) => e.dir === "<" && e.frame.type === RESP && e.frame.id === contId);
  expect(all.length > 0, `${who}: no response frames for continuation ${contId}`);
  // The continuation may end while the client's ACK is on its way (a fast reply): the connection
  // is then released as on Cloudflare, which empties its pending-resume set when a stream ends.
  // It gets the final transcript and the live terminal frame but no chunk, and its ACK, arriving
  // late, gets one empty replayed terminal frame (docs/protocol.md#late-ack), which the client
  // ignores: its stream for the id was closed by the live one.
  const last = all.at(-1).frame;
  const lateAck = all.length >= 2 && last.done === true && last.replay === true && last.body === "" &&
    all.at(-2).frame.done === true && !all.at(-2).frame.replay;
  const frames = lateAck ? all.slice(0, -1) : all;
  // Ended before the ACK: only its terminal frame, live (released) or replayed (when the ACK
  // overtook the live end, whose final transcript then came with the replayed frame).
  const endedBeforeAck = frames.length === 1 && frames[0].frame.done === true && frames[0].frame.body === "";
  const notContinuation = frames.filter((e) => e.frame.continuation !== true).map((e) => e.frame);
  expectEqual(notContinuation, [], `${who}: frames without continuation:true (it must be set on every frame of the turn)`);
  // The live terminal frame of a connection released before its late ACK came before that ACK.
  const releasedEnd = (e) => lateAck && e.frame.done === true && !e.frame.replay;
  expect(frames.every((e) => at(e) > ackAt || releasedEnd(e)), `${who}: response frames arrived before the ACK`);
  const replayed = frames.filter((e) => e.frame.replay).map((e) => e.frame);
  const live = frames.filter((e) => !e.frame.replay).map((e) => e.frame);
  expect(frames.slice(0, replayed.length).every((e) => e.frame.replay), `${who}: live frames interleaved with the replay`);
  expect(frames.every((e) => !e.frame.error), `${who}: error frames ${JSON.stringify(frames.filter((e) => e.frame.error).map((e) => e.frame))}`);

  const replayChunks = replayed.filter((f) => !f.done && !f.replayComplete);
  expectEqual(replayChunks.map((f) => f.seq), replayChunks.map((_, i) => i), `${who}: seq of replayed chunks (all stored chunks from 0)`);
  const replayEnd = replayed.at(-1);
  if (replayed.length) {
    const next = frames[replayed.length]?.frame;
    expect(
      replayEnd.replayComplete === true || replayEnd.done === true,
      `${who}: the replay must end with replayComplete (stream still live) or a replayed terminal frame; the last replayed frame was seq ${replayEnd.seq}, followed by ${JSON.stringify(next ?? null)}`,
    );
    expectEqual(replayed.filter((f) => f.replayComplete || f.done).length, 1, `${who}: replay end frames`);
  }
  const liveChunks = live.filter((f) => !f.done);
  if (replayEnd?.done) expectEqual(liveChunks.map((f) => f.seq), [], `${who}: seq of live chunks after a replayed terminal frame (the stream must not be delivered twice)`);
  expectEqual(liveChunks.map((f) => f.seq), liveChunks.map((_, i) => replayChunks.length + i), `${who}: seq of live chunks (continuing the replay)`);
  const terminals = frames.filter((e) => e.frame.done === true);
  expectEqual(terminals.length, 1, `${who}: terminal frames`);
  const terminal = terminals[0];
  expect(frames.at(-1) === terminal, `${who}: frames after the terminal frame`);
  expectEqual(terminal.frame.body, "", `${who}: terminal body`);
  expect(terminal.frame.outcome === undefined || terminal.frame.outcome === "completed", `${who}: terminal outcome ${terminal.frame.outcome}`);

  const chunks = [...replayChunks, ...liveChunks].map((f) => JSON.parse(f.body));
  if (!endedBeforeAck) {
    expectEqual(chunks[0]?.type, "start", `${who}: first chunk type`);
    expectEqual(chunks[0].messageId, undefined, `${who}: start.messageId of a continuation (must be stripped so the client appends to the last assistant message)`);
  }
  return {
    endedBeforeAck,
    terminal,
    chunks,
    text: chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""),
    replayEnd: replayEnd ? (replayEnd.replayComplete ? "replayComplete" : replayEnd.done ? "done" : "none") : "no replay",
    replayed: replayChunks.length,
    live: liveChunks.length,
  };
}

// Checks the tool continuation a tab picked up after answering a tool call
// (docs/protocol.md#continuations): after the answer frame the client probes; the server answers the probe
// with cf_agent_stream_pending (continuation accepted, not started) or cf_agent_stream_resuming,
// announces the continuation's server-generated id with cf_agent_stream_resuming, gets ONE ACK,
// then sends the continuation (every frame continuation:true, start without messageId), the final
// transcript (cf_agent_chat_messages, to the originator too) and the terminal frame.
// `answerAt` is the log index from which the answer (approval or tool result) was sent.
function checkContinuation(tab, answerAt, firstRequestId) {
  const who = `${tab.label}: tool continuation`;
  const entries = tab.log.slice(answerAt);
  const at = (entry) => entries.indexOf(entry);
  const answer = entries.find((e) => e.dir === ">" && (e.frame.type === "cf_agent_tool_approval" || e.frame.type === "cf_agent_tool_result"));
  expect(answer, `${who}: no cf_agent_tool_approval / cf_agent_tool_result sent`);
  const probe = entries.find((e) => e.dir === ">" && e.frame.type === "cf_agent_stream_resume_request" && at(e) > at(answer));
  expect(probe, `${who}: the client sent no cf_agent_stream_resume_request after answering the tool call`);
  const probeAnswers = entries.filter((e) => e.dir === "<" && e.frame.probeId === probe.frame.probeId).map((e) => e.frame);
  expect(probeAnswers.length > 0, `${who}: the continuation probe ${probe.frame.probeId} was never answered`);
  const probeAnswer = probeAnswers[0];
  expect(
    probeAnswer.type === "cf_agent_stream_pending" || probeAnswer.type === "cf_agent_stream_resuming",
    `${who}: the continuation probe was answered with ${JSON.stringify(probeAnswer)}; expected cf_agent_stream_pending or cf_agent_stream_resuming (a resume_none makes the client give up on the continuation)`,
  );

  const resuming = entries.filter((e) => e.dir === "<" && e.frame.type === "cf_agent_stream_resuming" && at(e) > at(answer));
  expect(resuming.length > 0, `${who}: no cf_agent_stream_resuming announced the continuation`);
  const contId = resuming[0].frame.id;
  expect(typeof contId === "string" && contId && contId !== firstRequestId, `${who}: continuation id ${JSON.stringify(contId)} must be a new, server-generated request id`);
  expectEqual([...new Set(resuming.map((e) => e.frame.id))], [contId], `${who}: ids announced by cf_agent_stream_resuming`);
  if (probeAnswer.type === "cf_agent_stream_pending" && probeAnswer.id !== undefined) {
    expectEqual(probeAnswer.id, contId, `${who}: cf_agent_stream_pending id (the accepted continuation)`);
  }
  const acks = entries.filter((e) => e.dir === ">" && e.frame.type === "cf_agent_stream_resume_ack");
  expectEqual(acks.map((e) => e.frame), [{ type: "cf_agent_stream_resume_ack", id: contId }], `${who}: ACK frames sent`);
  const ackAt = at(acks[0]);

  const stream = checkContinuationFrames(entries, contId, ackAt, who);
  const { terminal, chunks, replayEnd } = stream;

  // The final transcript reaches the originator before the terminal frame (docs/protocol.md#continuations).
  const finalSync = entries.filter((e) => e.dir === "<" && e.frame.type === "cf_agent_chat_messages" && at(e) > at(answer) && at(e) < at(terminal)).at(-1)?.frame;
  expect(finalSync, `${who}: no cf_agent_chat_messages (final transcript, originator included) before the continuation's terminal frame`);

  return {
    contId,
    endedBeforeAck: stream.endedBeforeAck,
    chunks,
    text: stream.text,
    finalSync,
    answer: answer.frame,
    probeAnswer: probeAnswer.type,
    replayEnd,
    replayed: stream.replayed,
    live: stream.live,
    updates: entries.filter((e) => e.dir === "<" && e.frame.type === "cf_agent_message_updated" && at(e) > at(answer)).map((e) => e.frame),
  };
}

// Waits until a tab that answered a tool call has run the continuation to its end.
async function waitForContinuationEnd(tab, answerAt) {
  const resuming = await waitFor(`${tab.label} to receive cf_agent_stream_resuming for the continuation`, () =>
    tab.log.slice(answerAt).find((e) => e.dir === "<" && e.frame.type === "cf_agent_stream_resuming")?.frame);
  await waitForTurnEnd(tab, resuming.id);
  return resuming.id;
}

// The tool call of a stream: the tool-input-start chunk's id and name.
function toolCallOf(stream, toolName) {
  const starts = stream.chunks.filter((c) => c.type === "tool-input-start");
  expectEqual(starts.map((c) => c.toolName), [toolName], "tool-input-start chunks (tool names)");
  const { toolCallId } = starts[0];
  expect(/^demo_\d+_0$/.test(toolCallId), `tool call id ${JSON.stringify(toolCallId)} is not the demo model's demo_<n>_0`);
  return toolCallId;
}

// Chunk types with runs of deltas collapsed.
const chunkTypes = (chunks) =>
  chunks.map((c) => c.type).filter((t, i, all) => !t.endsWith("-delta") || all[i - 1] !== t);

function expectNoErrorState(tab) {
  const errors = tab.snapshots.filter((s) => s.status === "error" || s.error);
  expectEqual(errors, [], `${tab.label}: committed states with status "error" or an error`);
}

// The chat request frames a tab sent, with their body parsed.
function chatRequests(tab) {
  return tab.outbound((f) => f.type === "cf_agent_use_chat_request").map((f) => {
    expectEqual(f.init?.method, "POST", `${tab.label}: request ${f.id} init.method`);
    return { id: f.id, body: JSON.parse(f.init.body) };
  });
}

// Sends a message from a tab and returns its request once the client saw the terminal frame and
// settled. `expectStatus` is the hook status that ends the turn.
async function sendAndFinish(tab, text, { expectStatus = "ready" } = {}) {
  const before = chatRequests(tab).length;
  tab.chat.sendMessage({ text }).catch((e) => tab.socketEvents.push({ t: now(), sendError: String(e) }));
  const request = await waitFor(`${tab.label} to send a chat request for ${JSON.stringify(text)}`, () => chatRequests(tab)[before]);
  await waitForTurnEnd(tab, request.id, expectStatus);
  return request;
}

async function waitForTurnEnd(tab, requestId, expectStatus = "ready") {
  await waitFor(`${tab.label} to receive the terminal frame of ${requestId}`, () => tab.terminal(requestId));
  await waitFor(`${tab.label} status "${expectStatus}" (now "${tab.chat.status}")`, () => tab.chat.status === expectStatus);
  await sleep(SETTLE_MS);
}

// ---------------------------------------------------------------------------------------------
// Tool scenarios (docs/protocol.md#tool-results-and-approvals).

const EMAIL = { to: "ada@example.com", subject: "Quarterly report" };
const EMAIL_OUTPUT = `Email to ${EMAIL.to} about '${EMAIL.subject}' sent (demo).`;
const DENIED_TEXT = "The call to send_email was denied: The tool call was denied.";
const BROWSER_INFO = { userAgent: "conformance-harness (jsdom)", language: "en-GB", timeZone: "Europe/Lisbon" };

// The end state of a tool turn: exactly one assistant message (the first stream's id) holding the
// tool part and the model's text after it, equal in the hook and in get-messages; no error state.
async function checkMergedToolTurn(tab, name, { userId, assistantId, tool, text, data = [] }) {
  const who = tab.label;
  expectNoErrorState(tab);
  expect(!tab.chat.error, `${who}: error ${tab.chat.error?.message}`);
  expectEqual(tab.chat.status, "ready", `${who}: status`);
  expectOneAssistantPerTurn(tab.chat.messages, 1, who);
  const [user, assistant] = tab.chat.messages;
  expectEqual(user.id, userId, `${who}: user message id`);
  expectEqual(assistant.id, assistantId, `${who}: assistant id (the first stream's start.messageId)`);
  expectSame(toolSummary([assistant])[0], { id: assistantId, role: "assistant", text, tools: [tool], data }, `${who}: the merged assistant message`);
  const kinds = assistant.parts.map((p) => (isToolPart(p) ? "tool" : p.type));
  expect(kinds.indexOf("tool") < kinds.indexOf("text"), `${who}: the text must follow the tool part, parts: ${JSON.stringify(kinds)}`);
  expectEqual(assistant.parts.filter((p) => p.type === "text").map((p) => p.state), ["done"], `${who}: text part states`);

  const stored = await serverTranscript(name);
  expectSame(toolSummary(stored), toolSummary(tab.chat.messages), "get-messages after the tool turn");
  return assistant;
}

// The calls that wait for the user's Approve / Reject. `output(seen)` is the expected tool output
// (given the one the continuation streamed, for values the server picks), `text(output)` the
// model's text after it (`deniedText` when rejected). `descriptor` (actions only, docs/architecture.md#approval-gated-actions) is the expected
// approvalDescriptor for a {requestId, toolCallId}; `attachments` the reply attachments the
// approved execution records (message-metadata of the continuation, docs/architecture.md#reply-attachments).
const SEND_EMAIL_CALL = {
  tool: "send_email",
  input: EMAIL,
  output: () => EMAIL_OUTPUT,
  text: () => `send_email returned ${EMAIL_OUTPUT}`,
  deniedText: DENIED_TEXT,
};

// The first turn of an approval scenario: the model makes the call, the server asks for approval.
async function startApproval(a, name, call = SEND_EMAIL_CALL) {
  const req = await sendAndFinish(a, `/tool ${call.tool} ${JSON.stringify(call.input)}`);
  const userId = req.body.messages[0].id;
  const first = checkStream(a, req.id, { messageIds: [userId] });
  const toolCallId = toolCallOf(first, call.tool);
  expectEqual(chunkTypes(first.chunks), [
    "start", "start-step", "tool-input-start", "tool-input-delta", "tool-input-available", "tool-approval-request", "finish-step", "finish",
  ], "A: chunk types of the approval turn (deltas collapsed)");
  const request = first.chunks.find((c) => c.type === "tool-approval-request");
  expectEqual(request.toolCallId, toolCallId, "A: tool-approval-request toolCallId");
  expect(typeof request.approvalId === "string" && request.approvalId, "A: tool-approval-request without approvalId");
  expectEqual(first.chunks.find((c) => c.type === "tool-input-available").input, call.input, "A: tool input");
  const descriptor = call.descriptor?.({ requestId: req.id, toolCallId });
  expectSame(request.approvalDescriptor, descriptor, "A: tool-approval-request approvalDescriptor");

  const pending = toolParts(a.chat.messages[1]);
  expectEqual(pending.map((p) => [p.type, p.toolCallId, p.state, p.approval?.id]), [[`tool-${call.tool}`, toolCallId, "approval-requested", request.approvalId]], "A: tool part waiting for approval");
  // ai 7 keeps the chunk's approvalDescriptor on the part as approval.descriptor.
  expectSame(pending[0].approval.descriptor, descriptor, "A: approval.descriptor of the client's pending part");
  // Persisted as it stands, so a reload shows Approve / Reject (docs/protocol.md#approval-sequence).
  const storedPending = await serverTranscript(name);
  expectEqual(
    storedPending.map((m) => [m.role, toolParts(m).map((p) => [p.toolCallId, p.state, p.approval?.id])]),
    [["user", []], ["assistant", [[toolCallId, "approval-requested", request.approvalId]]]],
    "get-messages while the approval is pending",
  );
  expectSame(toolParts(storedPending[1])[0].approval.descriptor, descriptor, "get-messages while pending: approval.descriptor");
  return { req, userId, first, toolCallId, request, storedPending, descriptor };
}

// The whole approval round trip. `reload`: the first tab goes away while the approval is pending
// and a fresh tab (hydrated from get-messages) answers it.
async function approvalScenario(name, { approved, reload = false, call = SEND_EMAIL_CALL }) {
  const a = await openTab("A", name);
  const { req, userId, first, toolCallId, request, storedPending, descriptor } = await startApproval(a, name, call);
  let tab = a;
  if (reload) {
    await closeTab(a);
    tab = await openTab("B", name);
    expectSame(toolSummary(tab.chat.messages), toolSummary(storedPending), "B: hydrated messages (the pending approval)");
  }
  const answerAt = tab.log.length;
  tab.chat.addToolApprovalResponse({ id: request.approvalId, approved });
  const contId = await waitForContinuationEnd(tab, answerAt);
  expectEqual(
    tab.outbound((f) => f.type === "cf_agent_tool_approval"),
    [{ type: "cf_agent_tool_approval", toolCallId, approved, autoContinue: true }],
    `${tab.label}: cf_agent_tool_approval frames sent`,
  );
  const cont = checkContinuation(tab, answerAt, req.id);
  expectEqual(cont.contId, contId, `${tab.label}: continuation id`);
  const updated = cont.updates.filter((f) => toolParts(f.message).some((p) => p.toolCallId === toolCallId));
  expect(updated.length > 0, `${tab.label}: no cf_agent_message_updated for the approval`);
  expectEqual(updated[0].message.id, first.messageId, `${tab.label}: cf_agent_message_updated message id`);
  const updatedPart = toolParts(updated[0].message).find((p) => p.toolCallId === toolCallId);
  expectEqual(
    [updatedPart.state, updatedPart.approval?.id, updatedPart.approval?.approved],
    [approved ? "approval-responded" : "output-denied", request.approvalId, approved],
    `${tab.label}: tool part in the first cf_agent_message_updated (state, approval.id, approval.approved)`,
  );
  expectSame(updatedPart.approval?.descriptor, descriptor, `${tab.label}: approval.descriptor in the first cf_agent_message_updated`);

  // The continuation settles the tool part of the previous assistant message on the client: the
  // AI SDK's streamText emits tool-output-available for an approved call it executes, and
  // tool-output-denied for a denied one (ai 7 dist/index.js, "localDeniedToolApprovals").
  // (When the continuation ended before the client's ACK, it saw no chunk: the output is the
  // final transcript's, and the merged message below is what the client shows.)
  const outputs = cont.chunks.filter((c) => c.type.startsWith("tool-output-"));
  const synced = toolParts(cont.finalSync.messages.at(-1)).find((p) => p.toolCallId === toolCallId);
  const output = approved ? call.output(cont.endedBeforeAck ? synced?.output : outputs[0]?.output) : undefined;
  const text = approved ? call.text(output) : call.deniedText;
  if (!cont.endedBeforeAck) {
    expectSame(
      outputs,
      [approved ? { type: "tool-output-available", toolCallId, output } : { type: "tool-output-denied", toolCallId }],
      `${tab.label}: tool-output-* chunks of the continuation`,
    );
    const firstText = cont.chunks.findIndex((c) => c.type === "text-start");
    expect(cont.chunks.indexOf(outputs[0]) < firstText, `${tab.label}: the tool outcome must come before the continuation's text`);
    expectEqual(cont.text, text, `${tab.label}: continuation text`);
  }
  const message = await checkMergedToolTurn(tab, name, {
    userId,
    assistantId: first.messageId,
    tool: { type: `tool-${call.tool}`, toolCallId, state: approved ? "output-available" : "output-denied", input: call.input, output, approved },
    text,
  });
  expectEqual(toolParts(message)[0].approval?.id, request.approvalId, `${tab.label}: approval.id kept`);
  const stored = await serverTranscript(name);
  // The descriptor stays on the settled part, in the hook and in the stored transcript.
  expectSame(toolParts(message)[0].approval?.descriptor, descriptor, `${tab.label}: approval.descriptor of the settled part`);
  expectSame(toolParts(stored[1])[0].approval?.descriptor, descriptor, "get-messages after the turn: approval.descriptor");

  if (call.attachments !== undefined && !cont.endedBeforeAck) {
    // The approved execution's attachments ride on a message-metadata chunk before finish.
    const metadataChunks = cont.chunks.filter((c) => c.type === "message-metadata");
    expectSame(metadataChunks, [{ type: "message-metadata", messageMetadata: { attachments: call.attachments } }], `${tab.label}: message-metadata chunks of the continuation`);
    const types = cont.chunks.map((c) => c.type);
    expect(types.indexOf("message-metadata") < types.indexOf("finish"), `${tab.label}: message-metadata must precede finish, chunk types: ${JSON.stringify(types)}`);
  }
  if (call.attachments !== undefined) {
    expectSame(message.metadata?.attachments, call.attachments, `${tab.label}: metadata.attachments of the assistant message`);
    expectSame(stored[1].metadata?.attachments, call.attachments, "get-messages after the turn: metadata.attachments");
  }
  const details = { contId, probeAnswer: cont.probeAnswer, replayEnd: cont.replayEnd, replayed: cont.replayed, live: cont.live };
  return call.attachments === undefined ? details : { ...details, output, metadata: message.metadata };
}

// refund_order: an approval-gated action (docs/architecture.md#approval-gated-actions). Refunds above 100 wait
// for approval; the approved execution returns the refund row and attaches a confirmation email.
const REFUND_INPUT = { order_id: "C1", amount: 250 };
const REFUND_CALL = {
  tool: "refund_order",
  input: REFUND_INPUT,
  output: (seen) => {
    expect(Number.isInteger(seen?.refund_id) && seen.refund_id > 0, `refund_order output without a positive integer refund_id: ${JSON.stringify(seen)}`);
    return { refund_id: seen.refund_id, order_id: "C1", refunded: 250 };
  },
  // The demo model quotes the tool return as the server serialises it (Python: 250.0).
  text: (output) => `refund_order returned {"refund_id":${output.refund_id},"order_id":"C1","refunded":250.0}.`,
  descriptor: ({ requestId, toolCallId }) => ({
    requestId,
    toolCallId,
    action: "refund_order",
    summary: "Refund an order",
    input: { ...REFUND_INPUT, reason: "" },
    permissions: ["orders:refund"],
    risk: "medium",
    kind: "approval-gated",
  }),
  attachments: [{ type: "email_draft", to: ["customer@example.com"], subject: "Your refund for order C1", body: "We refunded 250.00 EUR for order C1." }],
};

// deploy_release: a durable-pause action (docs/architecture.md#durable-pause).
const DEPLOY_INPUT = { version: "1.4.2" };
const PAUSE_MESSAGE = "This action is awaiting human approval. Stop and wait for the approval result before proceeding.";

// The demo MCP server (agents_app/demo/mcp_server.py), which the demo agent declares when
// DEMO_MCP_URL is set, and one call of its convert_units tool.
const MCP_SERVER = "demo-tools";
const MCP_INPUT = { value: 10, from_unit: "km", to_unit: "mi" };
const MCP_OUTPUT = "10 km = 6.214 mi";

// The reference's MCPServersState: four keys; every server with the MCPServer fields; every
// tool, prompt and resource naming the server it comes from.
function checkMcpShape(mcp, what) {
  expectSame(Object.keys(mcp ?? {}).sort(), ["prompts", "resources", "servers", "tools"], `${what}: keys`);
  for (const [id, server] of Object.entries(mcp.servers)) {
    expectSame(Object.keys(server).sort(), ["auth_url", "capabilities", "error", "instructions", "name", "server_url", "state"],
      `${what}: the fields of server ${id}`);
    expect(["authenticating", "connecting", "connected", "discovering", "ready", "failed", "not-connected"].includes(server.state),
      `${what}: server ${id}'s state ${JSON.stringify(server.state)}`);
  }
  for (const key of ["tools", "prompts", "resources"]) {
    expect(Array.isArray(mcp[key]), `${what}: ${key} is not a list`);
    expect(mcp[key].every((item) => item.serverId in mcp.servers && typeof item.name === "string"),
      `${what}: every one of ${key} names a server and has a name: ${JSON.stringify(mcp[key])}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios. Each gets a fresh instance name and returns a small summary for RESULT.

const scenarios = {
  // Durable recovery as useAgentChat sees it: a turn whose model stream stalls (StallAgent, 0.3 s
  // watchdog) is cut into recovery. The request ends with outcome "recovering", isRecovering turns
  // on, a continuation of the same assistant message streams, and isRecovering turns off.
  async recovering(name) {
    const a = await openTab("A", name, { agentClass: "StallAgent" });
    a.chat.sendMessage({ text: "go" });
    await waitFor("A: the cut request's end and the recovery's end", () =>
      a.inbound((f) => f.type === "cf_agent_chat_recovering" && f.recovering === false).length === 1);
    await waitFor("A: ready with the continued reply", () => a.chat.status === "ready" &&
      textOf(a.chat.messages.at(-1) ?? {}) === "one two three four.");
    await sleep(SETTLE_MS);
    const [req] = a.outbound((f) => f.type === "cf_agent_use_chat_request");
    const cut = a.terminal(req.id);
    expectEqual(cut?.outcome, "recovering", "A: outcome of the cut request's terminal frame");
    const recovering = a.inbound((f) => f.type === "cf_agent_chat_recovering");
    expectEqual(recovering.map((f) => f.recovering), [true, false], "A: cf_agent_chat_recovering frames");
    expect(recovering.every((f) => f.id === req.id), "A: the recovering frames name the cut request");
    const continuation = a.inbound((f) => f.type === RESP && f.id !== req.id && f.continuation === true);
    expect(continuation.length > 0, "A: no continuation frames");
    expect(a.snapshots.some((s) => s.recovering), "A: isRecovering was never true");
    expectEqual(a.snapshots.at(-1).recovering, false, "A: isRecovering at the end");
    expect(!a.chat.error, `A: unexpected error ${a.chat.error?.message}`);
    expectOneAssistantPerTurn(a.chat.messages, 1, "A");
    const stored = await serverTranscript(name, "stall-agent");
    expectEqual(summary(stored), summary(a.chat.messages), "get-messages after the recovery");
    return { text: textOf(a.chat.messages.at(-1)), continuationFrames: continuation.length };
  },

  // Send and stream: exact text, finishReason metadata, stream framing, persisted transcript.
  async basic(name) {
    const a = await openTab("A", name);
    checkConnectFrames(a);
    const prompt = "hello from the conformance suite";
    const req = await sendAndFinish(a, prompt);
    const expected = ECHO_PREFIX + prompt;

    expectEqual(req.body.trigger, "submit-message", "A: request trigger");
    expectEqual(summary(req.body.messages).map((m) => [m.role, m.text]), [["user", prompt]], "A: request messages");
    const userId = req.body.messages[0].id;
    const stream = checkStream(a, req.id, { messageIds: [userId] });
    expectEqual(stream.text, expected, "A: concatenated text-delta chunks");
    expectEqual(
      stream.chunks.map((c) => c.type).filter((t, i, all) => t !== "text-delta" || all[i - 1] !== "text-delta"),
      ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"],
      "A: chunk type sequence (runs of text-delta collapsed)",
    );
    expectEqual(stream.chunks.at(-1).messageMetadata?.finishReason, "stop", "A: finish chunk messageMetadata.finishReason");
    // The originator is excluded from the transcript broadcasts of its own turn (docs/protocol.md#normal-turn).
    expectEqual(a.inbound((f) => f.type === "cf_agent_chat_messages").length, 0, "A: cf_agent_chat_messages frames received by the sender");

    const { messages, error } = a.chat;
    expect(!error, `A: unexpected error ${error?.message}`);
    expectOneAssistantPerTurn(messages, 1, "A");
    const [user, assistant] = messages;
    expectEqual(user.id, userId, "A: user message id");
    expectEqual(textOf(user), prompt, "A: user text");
    expectEqual(textOf(assistant), expected, "A: assistant text");
    expectEqual(assistant.id, stream.messageId, "A: assistant id equals start.messageId");
    expectEqual(assistant.metadata?.finishReason, "stop", "A: assistant metadata.finishReason");
    expectEqual(assistant.parts.filter((p) => p.type === "text").map((p) => p.state), ["done"], "A: text part state");

    const stored = await serverTranscript(name);
    expectEqual(summary(stored), summary(messages), "get-messages after the turn (right after done)");
    return { text: textOf(assistant), chunks: stream.chunks.length };
  },

  // History from get-messages on mount: a fresh tab shows it with no WS traffic but the probe.
  async hydrate(name) {
    const seeder = await openTab("seed", name);
    await sendAndFinish(seeder, "first question");
    await closeTab(seeder);
    const stored = await serverTranscript(name);
    expectOneAssistantPerTurn(stored, 1, "get-messages after seeding");

    const fetchesBefore = fetchLog.length;
    const b = await openTab("B", name);
    const fetches = fetchLog.slice(fetchesBefore);
    expectEqual(
      fetches.map((f) => [f.url, f.status, f.cookie]),
      [[getMessagesUrl(name), 200, true]],
      "B: HTTP requests on mount (the get-messages fetch, with the session cookie)",
    );
    expectEqual(summary(b.chat.messages), summary(stored), "B: messages right after mount");
    expect(
      b.snapshots.filter((s) => s.messages.length > 0).every((s) => JSON.stringify(s.messages) === JSON.stringify(summary(stored))),
      "B: every committed state showed exactly the stored history",
    );
    expectEqual(b.outbound().map((f) => f.type), ["cf_agent_stream_resume_request"], "B: frames sent on mount");
    checkConnectFrames(b);
    expectEqual(b.inbound().length, 3, "B: frames received on mount (identity, mcp_servers, resume_none)");

    // The hydrated history is the context of the next turn.
    const req = await sendAndFinish(b, "second question");
    expectEqual(req.body.messages.slice(0, 2).map((m) => m.id), stored.map((m) => m.id), "B: request carries the hydrated history");
    checkStream(b, req.id, { messageIds: trailingUserIds(req.body.messages) });
    expectOneAssistantPerTurn(b.chat.messages, 2, "B");
    expectEqual(textOf(b.chat.messages[3]), `${ECHO_PREFIX}second question`, "B: second reply");
    expectEqual(summary(await serverTranscript(name)), summary(b.chat.messages), "get-messages after the second turn");
    return { hydrated: stored.length };
  },

  // A second tab sees the sender's user message, the live stream and the final transcript.
  async observer(name) {
    const a = await openTab("A", name);
    const b = await openTab("B", name);
    const count = 10;
    const prompt = `/slow ${count} 50`;
    const req = await sendAndFinish(a, prompt);
    await waitForTurnEnd(b, req.id);
    const expected = words(count);
    const userId = req.body.messages[0].id;

    const sa = checkStream(a, req.id, { messageIds: [userId] });
    const sb = checkStream(b, req.id, { messageIds: [userId] });
    expectEqual(sb.chunks, sa.chunks, "B: chunks equal A's (same seq, same bodies)");
    expectEqual(sa.text, expected, "A: streamed text");

    // B learns the user message from a transcript broadcast before the reply streams.
    const firstChunkAt = b.indexOf("<", (f) => f.type === RESP && f.id === req.id);
    const userSyncAt = b.indexOf("<", (f) => f.type === "cf_agent_chat_messages" && f.messages.some((m) => m.id === userId));
    expect(userSyncAt >= 0 && userSyncAt < firstChunkAt, "B: a cf_agent_chat_messages with the user message must precede the reply stream");
    // And the final transcript (assistant included) before the terminal frame (docs/protocol.md#normal-turn).
    const doneAt = b.indexOf("<", (f) => f.type === RESP && f.id === req.id && f.done === true);
    const finalSync = b.log.slice(0, doneAt).filter((e) => e.dir === "<" && e.frame.type === "cf_agent_chat_messages").at(-1)?.frame;
    expect(finalSync, "B: no cf_agent_chat_messages before the terminal frame");
    expectEqual(summary(finalSync.messages), [
      { id: userId, role: "user", text: prompt },
      { id: sa.messageId, role: "assistant", text: expected },
    ], "B: final transcript broadcast");
    expectEqual(a.inbound((f) => f.type === "cf_agent_chat_messages").length, 0, "A: cf_agent_chat_messages frames received by the sender");

    // B rendered the reply while it streamed, not only at the end.
    const doneT = b.log[doneAt].t;
    const live = b.snapshots.filter((s) => {
      const last = s.messages.at(-1);
      return s.t < doneT && last?.role === "assistant" && last.text.length > 0 && last.text.length < expected.length;
    });
    expect(live.length > 0, "B: never showed a partial assistant reply while the turn streamed");
    expect(b.snapshots.some((s) => s.messages.some((m) => m.id === userId)), "B: never showed the user message");

    for (const tab of [a, b]) {
      expectOneAssistantPerTurn(tab.chat.messages, 1, tab.label);
      expectEqual(summary(tab.chat.messages), summary(finalSync.messages), `${tab.label}: final messages`);
    }
    expectEqual(summary(await serverTranscript(name)), summary(finalSync.messages), "get-messages after the turn");
    return { liveSnapshotsOnB: live.length };
  },

  // stop() mid-stream: cancel frame, terminal outcome "aborted", partial reply kept and persisted.
  async cancel(name) {
    const a = await openTab("A", name);
    const count = 60;
    const full = words(count);
    a.chat.sendMessage({ text: `/slow ${count} 20` });
    const req = await waitFor("A to send the chat request", () => chatRequests(a)[0]);
    await waitFor("A to show a few streamed words", () => textOf(a.chat.messages.at(-1)).includes("w3 "));
    await a.chat.stop();
    const shown = textOf(a.chat.messages.at(-1));

    const cancels = a.outbound((f) => f.type === "cf_agent_chat_request_cancel");
    expectEqual(cancels, [{ id: req.id, type: "cf_agent_chat_request_cancel" }], "A: cancel frames sent");
    await waitForTurnEnd(a, req.id);
    const stream = checkStream(a, req.id, { outcome: "aborted", messageIds: [req.body.messages[0].id] });
    expect(stream.text.length < full.length, "the server streamed the whole reply despite the cancel");

    expectOneAssistantPerTurn(a.chat.messages, 1, "A");
    const partial = textOf(a.chat.messages[1]);
    expect(partial.length > 0 && full.startsWith(partial), `A: partial text kept after stop(), got ${JSON.stringify(partial)}`);
    expect(partial.startsWith(shown), "A: text changed after stop()");

    const stored = await serverTranscript(name);
    expectOneAssistantPerTurn(stored, 1, "get-messages after cancel");
    const persisted = textOf(stored[1]);
    expect(persisted.length > 0 && full.startsWith(persisted) && persisted.length < full.length,
      `the partial reply must be persisted, got ${JSON.stringify(persisted)}`);
    expect(persisted.startsWith(partial), `persisted partial ${JSON.stringify(persisted)} must extend what the client kept ${JSON.stringify(partial)}`);
    expectEqual(stored[1].id, stream.messageId, "persisted assistant id equals start.messageId");
    expectEqual(outcomeMark(stored[1]), { outcome: "aborted" }, "get-messages: the stopped reply's metadata");

    // The instance is idle again: the next turn runs normally.
    const next = await sendAndFinish(a, "after cancel");
    checkStream(a, next.id, { messageIds: trailingUserIds(next.body.messages) });
    expectOneAssistantPerTurn(a.chat.messages, 2, "A");
    expectEqual(textOf(a.chat.messages[3]), `${ECHO_PREFIX}after cancel`, "A: reply after the cancel");
    const after = await serverTranscript(name);
    expectOneAssistantPerTurn(after, 2, "get-messages after the next turn");
    // A's copy of the stopped reply (sent with its next request) has no mark; the stored one keeps it.
    expectEqual(outcomeMark(after[1]), { outcome: "aborted" }, "get-messages after the next turn: the stopped reply's metadata");
    await closeTab(a); // a reload: the page mounts again and loads the transcript
    const b = await openTab("B", name);
    expectEqual(summary(b.chat.messages), summary(after), "B: messages right after mount");
    expectEqual(outcomeMark(b.chat.messages[1]), { outcome: "aborted" }, "B (mounted after a reload): the stopped reply's metadata");
    return { partialWords: partial.trim().split(/\s+/).length, persistedWords: persisted.trim().split(/\s+/).length };
  },

  // clearHistory(): local reset, the other tab is told, the server transcript is empty.
  async clear(name) {
    const a = await openTab("A", name);
    const b = await openTab("B", name);
    const req = await sendAndFinish(a, "to be cleared");
    await waitForTurnEnd(b, req.id);
    expectOneAssistantPerTurn(b.chat.messages, 1, "B before clear");

    a.chat.clearHistory();
    await waitFor("A to send cf_agent_chat_clear", () => a.outbound((f) => f.type === "cf_agent_chat_clear").length);
    await waitFor("B to receive cf_agent_chat_clear", () => b.inbound((f) => f.type === "cf_agent_chat_clear").length);
    await waitFor("B to show an empty chat", () => b.chat.messages.length === 0);
    // A clear has no acknowledgement, so the server transcript is polled.
    const stored = await pollTranscript(name, (messages) => messages.length === 0);
    expectEqual(stored, [], "get-messages after clear");
    await sleep(SETTLE_MS);
    expectEqual(a.chat.messages, [], "A: messages after clearHistory()");
    expectEqual(b.chat.messages, [], "B: messages after the clear broadcast");
    expectEqual(b.inbound((f) => f.type === "cf_agent_chat_clear"), [{ type: "cf_agent_chat_clear" }], "B: clear frames");
    expectEqual(a.inbound((f) => f.type === "cf_agent_chat_clear").length, 0, "A: clear frames echoed to the sender (docs/protocol.md#clear: others only)");

    // A fresh conversation starts from nothing on both tabs.
    const next = await sendAndFinish(a, "after clear");
    await waitForTurnEnd(b, next.id);
    expectEqual(summary(next.body.messages).map((m) => m.text), ["after clear"], "A: request after clear carries only the new message");
    checkStream(a, next.id, { messageIds: trailingUserIds(next.body.messages) });
    for (const tab of [a, b]) {
      expectOneAssistantPerTurn(tab.chat.messages, 1, `${tab.label} after the next turn`);
      expectEqual(textOf(tab.chat.messages[1]), `${ECHO_PREFIX}after clear`, `${tab.label}: reply after clear`);
    }
    expectEqual(summary(await serverTranscript(name)), summary(a.chat.messages), "get-messages after the next turn");
    return {};
  },

  // regenerate(): trigger regenerate-message without the stale reply; one assistant at the end.
  async regenerate(name) {
    const a = await openTab("A", name);
    const prompt = "please regenerate this";
    const first = await sendAndFinish(a, prompt);
    const firstStream = checkStream(a, first.id, { messageIds: [first.body.messages[0].id] });
    const staleId = firstStream.messageId;
    expectEqual(a.chat.messages.map((m) => m.id), [first.body.messages[0].id, staleId], "A: ids before regenerate");

    a.chat.regenerate().catch((e) => a.socketEvents.push({ t: now(), sendError: String(e) }));
    const req = await waitFor("A to send the regenerate request", () => chatRequests(a)[1]);
    await waitForTurnEnd(a, req.id);
    expectEqual(req.body.trigger, "regenerate-message", "A: regenerate trigger");
    expectEqual(req.body.messages.map((m) => [m.id, m.role]), [[first.body.messages[0].id, "user"]], "A: regenerate request messages (trailing assistant removed)");
    const stream = checkStream(a, req.id, { messageIds: [first.body.messages[0].id] });
    expect(stream.messageId !== staleId, "the regenerated reply must have a new messageId");

    expectOneAssistantPerTurn(a.chat.messages, 1, "A");
    expectEqual(a.chat.messages[1].id, stream.messageId, "A: assistant id equals the new start.messageId");
    expectEqual(textOf(a.chat.messages[1]), ECHO_PREFIX + prompt, "A: regenerated text");
    const stored = await serverTranscript(name);
    expectEqual(summary(stored), summary(a.chat.messages), "get-messages after regenerate");
    expect(!stored.some((m) => m.id === staleId), "the stale assistant message must be deleted server-side");
    return { staleId, newId: stream.messageId };
  },

  // setMessages(): the edited transcript is persisted, reaches the other tab, and is the context
  // of the next turn.
  async setmessages(name) {
    const a = await openTab("A", name);
    const b = await openTab("B", name);
    const first = await sendAndFinish(a, "original question");
    await waitForTurnEnd(b, first.id);

    const added = [
      userMessage("conf-user-2", "a question added with setMessages"),
      { id: "conf-assistant-2", role: "assistant", parts: [{ type: "text", text: "an answer added with setMessages" }] },
    ];
    a.chat.setMessages((current) => [...current, ...added]);
    const sent = await waitFor("A to send cf_agent_chat_messages", () => a.outbound((f) => f.type === "cf_agent_chat_messages")[0]);
    const expected = [...summary(a.chat.messages.slice(0, 2)), ...summary(added)];
    expectEqual(summary(sent.messages), expected, "A: cf_agent_chat_messages sent by setMessages");
    await waitFor("A to show the set transcript", () => a.chat.messages.length === 4);
    expectEqual(summary(a.chat.messages), expected, "A: messages after setMessages");

    await waitFor("B to receive the new transcript", () => b.inbound((f) => f.type === "cf_agent_chat_messages" && f.messages.length === 4).length);
    await waitFor("B to show the new transcript", () => b.chat.messages.length === 4);
    expectEqual(summary(b.chat.messages), expected, "B: messages after the broadcast");
    // setMessages has no acknowledgement, so the server transcript is polled.
    const stored = await pollTranscript(name, (messages) => JSON.stringify(summary(messages)) === JSON.stringify(expected));
    expectEqual(summary(stored), expected, "get-messages after setMessages");
    await sleep(SETTLE_MS);
    expectEqual(
      a.log.filter((e) => e.dir === "<" && e.frame.type === "cf_agent_chat_messages" && e.t >= a.log.find((x) => x.frame === sent).t).length,
      0,
      "A: cf_agent_chat_messages echoed to the sender of setMessages",
    );

    const next = await sendAndFinish(a, "after setMessages");
    await waitForTurnEnd(b, next.id);
    expectEqual(next.body.messages.map((m) => m.id).slice(0, 4), expected.map((m) => m.id), "A: next request carries the set transcript");
    checkStream(a, next.id, { messageIds: trailingUserIds(next.body.messages) });
    for (const tab of [a, b]) {
      expectOneAssistantPerTurn(tab.chat.messages, 3, `${tab.label} after the next turn`);
      expectEqual(summary(tab.chat.messages.slice(0, 4)), expected, `${tab.label}: history kept`);
      expectEqual(textOf(tab.chat.messages[5]), `${ECHO_PREFIX}after setMessages`, `${tab.label}: reply after setMessages`);
    }
    expectEqual(summary(await serverTranscript(name)), summary(a.chat.messages), "get-messages after the next turn");
    return {};
  },

  // A model error mid-stream: status "error" with the server's text, partial text kept.
  async error(name) {
    const a = await openTab("A", name);
    const req = await sendAndFinish(a, "/fail", { expectStatus: "error" });
    const stream = checkStream(a, req.id, { error: FAIL_TEXT });
    expectEqual(stream.text, FAIL_PARTIAL, "A: text streamed before the error");

    expectEqual(a.chat.status, "error", "A: status");
    expectEqual(a.chat.error?.message, FAIL_TEXT, "A: error.message");
    expectOneAssistantPerTurn(a.chat.messages, 1, "A");
    expectEqual(textOf(a.chat.messages[1]), FAIL_PARTIAL, "A: partial text kept");
    expectEqual(a.chat.messages[1].id, stream.messageId, "A: assistant id equals start.messageId");

    const stored = await serverTranscript(name);
    expectEqual(summary(stored), summary(a.chat.messages), "get-messages after the failed turn (partial persisted)");
    const mark = { outcome: "error", errorText: FAIL_TEXT };
    expectEqual(outcomeMark(stored[1]), mark, "get-messages: the failed reply's metadata");

    // The chat recovers: the next turn succeeds and clears the error.
    const next = await sendAndFinish(a, "after the error");
    checkStream(a, next.id, { messageIds: trailingUserIds(next.body.messages) });
    expect(!a.chat.error, `A: error still set after a successful turn: ${a.chat.error?.message}`);
    expectOneAssistantPerTurn(a.chat.messages, 2, "A");
    expectEqual(textOf(a.chat.messages[3]), `${ECHO_PREFIX}after the error`, "A: reply after the error");
    // A's request carried its own copy of the failed reply, without the mark: the stored one keeps it,
    // and a client that loads the conversation later has it in its transcript.
    const after = await serverTranscript(name);
    expectEqual(outcomeMark(after[1]), mark, "get-messages after the next turn: the failed reply's metadata");
    expectEqual(outcomeMark(after[3]), {}, "get-messages: the next reply has no mark");
    await closeTab(a); // a reload: the page mounts again and loads the transcript
    const b = await openTab("B", name);
    expectEqual(summary(b.chat.messages), summary(after), "B: messages right after mount");
    expectEqual(outcomeMark(b.chat.messages[1]), mark, "B (mounted after a reload): the failed reply's metadata");
    return { error: FAIL_TEXT };
  },

  // The socket dies mid-stream: the same hook reconnects (same _pk), probes, ACKs, gets the replay
  // and the rest live; the reply is complete and not duplicated.
  async resume(name) {
    const a = await openTab("A", name);
    const count = 40;
    const full = words(count);
    a.chat.sendMessage({ text: `/slow ${count} 25` });
    const req = await waitFor("A to send the chat request", () => chatRequests(a)[0]);
    await waitFor("A to show a few streamed words", () => textOf(a.chat.messages.at(-1)).includes("w5 "));
    const before = a.inbound((f) => f.type === RESP && f.id === req.id);
    a.sockets[0].terminate();
    await waitFor("A to reconnect", () => a.sockets.length === 2 && a.sockets[1].readyState === WS.OPEN);
    await waitForTurnEnd(a, req.id);

    const pk = (s) => new URL(s.connectUrl).searchParams.get("_pk");
    expectEqual(pk(a.sockets[1]), pk(a.sockets[0]), "A: _pk of the reconnected socket");
    const stream = checkResumedStream(a, 2, req.id, before);
    expectEqual(stream.text, full, "A#2: text of replay + live chunks");
    expect(stream.live > 0, "A#2: the turn should still be live after the replay (reconnect was too slow?)");

    expectOneAssistantPerTurn(a.chat.messages, 1, "A");
    expectEqual(textOf(a.chat.messages[1]), full, "A: text after the resume (complete, not duplicated)");
    expectEqual(a.chat.messages[1].id, stream.messageId, "A: assistant id equals start.messageId");
    expectEqual(summary(await serverTranscript(name)), summary(a.chat.messages), "get-messages after the turn");
    return { replayed: stream.replayed, live: stream.live };
  },

  // The page reloads mid-stream: a fresh hook (new _pk) hydrates from get-messages, then resumes.
  async reload(name) {
    const a = await openTab("A", name);
    const count = 40;
    const full = words(count);
    a.chat.sendMessage({ text: `/slow ${count} 25` });
    const req = await waitFor("A to send the chat request", () => chatRequests(a)[0]);
    await waitFor("A to show a few streamed words", () => textOf(a.chat.messages.at(-1)).includes("w5 "));
    await closeTab(a);

    const b = await openTab("B", name);
    await waitForTurnEnd(b, req.id);
    const stream = checkResumedStream(b, 1, req.id);
    expectEqual(stream.text, full, "B: text of replay + live chunks");
    // B is not the sender: it gets the final transcript before the terminal frame (docs/protocol.md#normal-turn).
    const entries = b.onSocket(1);
    const doneAt = entries.findIndex((e) => e.frame === stream.terminal);
    const finalSync = entries.slice(0, doneAt).filter((e) => e.dir === "<" && e.frame.type === "cf_agent_chat_messages").at(-1)?.frame;
    expect(finalSync, "B: no cf_agent_chat_messages before the terminal frame");
    expectEqual(summary(finalSync.messages).map((m) => [m.role, m.text]), [["user", `/slow ${count} 25`], ["assistant", full]], "B: final transcript broadcast");

    expectOneAssistantPerTurn(b.chat.messages, 1, "B");
    expectEqual(textOf(b.chat.messages[1]), full, "B: text after the reload (complete, not duplicated)");
    expectEqual(b.chat.messages[1].id, stream.messageId, "B: assistant id equals start.messageId");
    expectEqual(summary(await serverTranscript(name)), summary(b.chat.messages), "get-messages after the turn");
    return { replayed: stream.replayed, live: stream.live };
  },

  // Approve a tool call (send_email needs approval): cf_agent_tool_approval, message_updated,
  // continuation handshake, one merged assistant message: tool part output-available + the text.
  async approve(name) {
    return approvalScenario(name, { approved: true });
  },

  // Reject it: the part becomes output-denied, the tool never runs, the model explains the denial.
  async reject(name) {
    return approvalScenario(name, { approved: false });
  },

  // The page reloads while an approval is pending: a fresh client shows the stored
  // approval-requested part from get-messages and approves from there; one merged message.
  async approvereload(name) {
    return approvalScenario(name, { approved: true, reload: true });
  },

  // An approval-gated action (refund_order, docs/architecture.md#approval-gated-actions): the approval request
  // carries the action's descriptor, kept as approval.descriptor by the client and the server;
  // the approved execution's output and its reply attachment (an email draft, message-metadata)
  // settle the same assistant message.
  async "action-approval"(name) {
    return approvalScenario(name, { approved: true, call: REFUND_CALL });
  },

  // A durable-pause action (deploy_release, docs/architecture.md#durable-pause): the turn settles the
  // tool part with the paused output (approvalDescriptor beside it on the chunk and on the stored
  // part, never as part.approval) and finishes normally; a next turn keeps the stored descriptor.
  async "durable-pause"(name) {
    const a = await openTab("A", name);
    const req = await sendAndFinish(a, `/tool deploy_release ${JSON.stringify(DEPLOY_INPUT)}`);
    const userId = req.body.messages[0].id;
    const stream = checkStream(a, req.id, { messageIds: [userId] });
    const toolCallId = toolCallOf(stream, "deploy_release");
    expectEqual(chunkTypes(stream.chunks), [
      "start", "start-step", "tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available", "finish-step",
      "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ], "A: chunk types of the durable-pause turn (deltas collapsed; no approval request)");
    expectEqual(stream.chunks.find((c) => c.type === "tool-input-available").input, DEPLOY_INPUT, "A: tool input");
    expectEqual(stream.chunks.at(-1).messageMetadata?.finishReason, "stop", "A: finish reason of the durable-pause turn");

    const outputChunk = stream.chunks.find((c) => c.type === "tool-output-available");
    const executionId = outputChunk.output?.executionId;
    expect(
      /^actpause_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(executionId),
      `A: executionId ${JSON.stringify(executionId)} is not actpause_<uuid>`,
    );
    const paused = { status: "paused", executionId, action: "deploy_release", message: PAUSE_MESSAGE };
    const descriptor = {
      requestId: req.id,
      toolCallId,
      action: "deploy_release",
      summary: "Deploy a release",
      input: { ...DEPLOY_INPUT, environment: "production" },
      permissions: ["deploy:run"],
      risk: "high",
      kind: "durable-pause",
    };
    expectSame(outputChunk, { type: "tool-output-available", toolCallId, output: paused, approvalDescriptor: descriptor }, "A: tool-output-available chunk (paused output, descriptor beside it)");
    // The demo model tells the user in words; the envelope is the model's, never shown as text.
    const text = "Asked staff to approve deploy_release.";
    expectEqual(stream.text, text, "A: text after the paused action");
    expectEqual(
      a.outbound().map((f) => f.type),
      ["cf_agent_stream_resume_request", "cf_agent_use_chat_request"],
      "A: frames sent (the pause asks nothing of the client: no approval, tool result or continuation probe)",
    );

    const tool = { type: "tool-deploy_release", toolCallId, state: "output-available", input: DEPLOY_INPUT, output: paused };
    const message = await checkMergedToolTurn(a, name, { userId, assistantId: stream.messageId, tool, text });
    const [part] = toolParts(message);
    expectEqual(part.approval, undefined, "A: approval of the client's paused part (a settled output is not an approval request)");
    // ai 7 builds the part from the chunk's known fields only (processUIMessageStream,
    // "tool-output-available"): the sibling approvalDescriptor is not kept on the client's part.
    const clientKeepsDescriptor = Object.hasOwn(part, "approvalDescriptor");
    expectEqual(clientKeepsDescriptor, false, "A: approvalDescriptor kept on the client's part by ai 7");
    const stored = await serverTranscript(name);
    const [storedPart] = toolParts(stored[1]);
    expectSame(storedPart.approvalDescriptor, descriptor, "get-messages after the turn: approvalDescriptor of the tool part");
    expectEqual(storedPart.approval, undefined, "get-messages after the turn: approval of the paused part");

    // The next turn carries the client's copy of the part (without the descriptor); the server
    // keeps its settled copy, descriptor and paused output included.
    const next = await sendAndFinish(a, "thanks");
    checkStream(a, next.id, { messageIds: trailingUserIds(next.body.messages) });
    const sentPart = toolParts(next.body.messages.find((m) => m.id === stream.messageId))[0];
    expectSame(sentPart?.output, paused, "A: paused output in the next request's copy of the part");
    const sentWithDescriptor = Object.hasOwn(sentPart, "approvalDescriptor");
    expectEqual(sentWithDescriptor, false, "A: approvalDescriptor in the next request's copy of the part (the client never had it)");
    expectNoErrorState(a);
    expectEqual(a.chat.status, "ready", "A: status after the next turn");
    expectOneAssistantPerTurn(a.chat.messages, 2, "A");
    expectEqual(textOf(a.chat.messages[3]), `${ECHO_PREFIX}thanks`, "A: reply to the next message");
    const after = await serverTranscript(name);
    expectSame(toolSummary(after), toolSummary(a.chat.messages), "get-messages after the next turn");
    const [afterPart] = toolParts(after[1]);
    expectSame(afterPart.output, paused, "get-messages after the next turn: paused output");
    expectSame(afterPart.approvalDescriptor, descriptor, "get-messages after the next turn: approvalDescriptor kept");

    // A page reload hydrates from get-messages: that copy of the part has the descriptor. (A goes
    // first: useAgentChat shares its initial-messages fetch between hooks of one page.)
    await closeTab(a);
    const b = await openTab("B", name);
    expectSame(toolSummary(b.chat.messages), toolSummary(after), "B: hydrated messages");
    const hydratedKeepsDescriptor = Object.hasOwn(toolParts(b.chat.messages[1])[0], "approvalDescriptor");
    expectSame(toolParts(b.chat.messages[1])[0].approvalDescriptor, descriptor, "B: approvalDescriptor of the hydrated part");
    return { executionId, clientKeepsDescriptor, sentWithDescriptor, hydratedKeepsDescriptor };
  },

  // A client tool declared by the server (getBrowserInfo): onToolCall answers with addToolOutput;
  // cf_agent_tool_result, message_updated, continuation; one merged assistant message.
  async clienttool(name) {
    const calls = [];
    const onToolCall = async ({ toolCall, addToolOutput }) => {
      calls.push({ t: now(), toolCall });
      if (toolCall.toolName !== "getBrowserInfo") return;
      await sleep(20); // a real browser tool answers asynchronously
      addToolOutput({ toolCallId: toolCall.toolCallId, output: BROWSER_INFO });
    };
    const a = await openTab("A", name, { onToolCall });
    const answerAt = a.log.length;
    const req = await sendAndFinish(a, "/tool getBrowserInfo {}");
    const userId = req.body.messages[0].id;
    const first = checkStream(a, req.id, { messageIds: [userId] });
    const toolCallId = toolCallOf(first, "getBrowserInfo");
    expectEqual(chunkTypes(first.chunks), [
      "start", "start-step", "tool-input-start", "tool-input-delta", "tool-input-available", "finish-step", "finish",
    ], "A: chunk types of the client-tool turn (deltas collapsed)");
    expectEqual(first.chunks.find((c) => c.type === "tool-input-available").input, {}, "A: tool-input-available input");
    expectEqual(first.chunks.at(-1).messageMetadata?.finishReason, "tool-calls", "A: finish reason of the client-tool turn");

    await waitFor("A to send cf_agent_tool_result", () => a.outbound((f) => f.type === "cf_agent_tool_result").length);
    const contId = await waitForContinuationEnd(a, answerAt);
    expectEqual(calls.map((c) => c.toolCall), [{ toolCallId, toolName: "getBrowserInfo", input: {} }], "A: onToolCall calls");
    expectEqual(
      a.outbound((f) => f.type === "cf_agent_tool_result"),
      [{ type: "cf_agent_tool_result", toolCallId, toolName: "getBrowserInfo", output: BROWSER_INFO, autoContinue: true }],
      "A: cf_agent_tool_result frames sent",
    );
    const cont = checkContinuation(a, answerAt, req.id);
    expectEqual(cont.contId, contId, "A: continuation id");
    const updated = cont.updates.filter((f) => toolParts(f.message).some((p) => p.toolCallId === toolCallId));
    expect(updated.length > 0, "A: no cf_agent_message_updated for the tool result");
    expectEqual(updated[0].message.id, first.messageId, "A: cf_agent_message_updated message id (the assistant message)");
    expectEqual(
      toolParts(updated[0].message).map((p) => [p.toolCallId, p.state, p.output]),
      [[toolCallId, "output-available", BROWSER_INFO]],
      "A: tool part in cf_agent_message_updated",
    );

    const expectedText = `getBrowserInfo returned ${JSON.stringify(BROWSER_INFO)}.`;
    if (!cont.endedBeforeAck) expectEqual(cont.text, expectedText, "A: continuation text");
    await checkMergedToolTurn(a, name, {
      userId,
      assistantId: first.messageId,
      tool: { type: "tool-getBrowserInfo", toolCallId, state: "output-available", input: {}, output: BROWSER_INFO },
      text: expectedText,
    });
    return { contId, probeAnswer: cont.probeAnswer, replayEnd: cont.replayEnd, replayed: cont.replayed, live: cont.live };
  },

  // A streaming server tool (crunch_numbers): preliminary outputs and data-progress parts in the
  // same turn; onData saw the progress; the final output is not preliminary.
  async progress(name) {
    const a = await openTab("A", name);
    const count = 3;
    const req = await sendAndFinish(a, `/tool crunch_numbers ${JSON.stringify({ count })}`);
    const userId = req.body.messages[0].id;
    const stream = checkStream(a, req.id, { messageIds: [userId] });
    const toolCallId = toolCallOf(stream, "crunch_numbers");
    const expectedProgress = Array.from({ length: count }, (_, i) => ({ done: i + 1, of: count }));
    const outputs = Array.from({ length: count }, (_, i) => ({ done: i + 1, total: ((i + 1) * (i + 2)) / 2 }));
    const final = outputs.at(-1);

    const progressChunks = stream.chunks.filter((c) => c.type === "data-progress");
    expectEqual(progressChunks.map((c) => c.data), expectedProgress, "A: data-progress chunks");
    const outputChunks = stream.chunks.filter((c) => c.type === "tool-output-available");
    expect(outputChunks.every((c) => c.toolCallId === toolCallId), "A: tool-output-available for another call id");
    expectEqual(outputChunks.filter((c) => c.preliminary === true).map((c) => c.output), outputs, "A: preliminary outputs");
    const last = outputChunks.at(-1);
    expect(last.preliminary !== true, `A: the last tool-output-available must be final (not preliminary), got ${JSON.stringify(last)}`);
    expectEqual(last.output, final, "A: final tool output");
    const types = chunkTypes(stream.chunks);
    expect(types.indexOf("tool-input-available") < types.indexOf("data-progress"), "A: progress before the tool input was complete");
    expect(types.lastIndexOf("tool-output-available") < types.indexOf("text-start"), "A: text before the final tool output");

    expectEqual(
      a.dataParts.filter((d) => d.part.type === "data-progress").map((d) => d.part.data),
      expectedProgress,
      "A: data-progress parts seen by onData",
    );
    // No client round trip: the tool runs on the server inside the turn.
    expectEqual(
      a.outbound().map((f) => f.type),
      ["cf_agent_stream_resume_request", "cf_agent_use_chat_request"],
      "A: frames sent (no tool result, approval or continuation probe)",
    );
    const expectedText = `crunch_numbers returned ${JSON.stringify(final)}.`;
    expectEqual(stream.text, expectedText, "A: text after the tool");
    const message = await checkMergedToolTurn(a, name, {
      userId,
      assistantId: stream.messageId,
      tool: { type: "tool-crunch_numbers", toolCallId, state: "output-available", input: { count }, output: final },
      text: expectedText,
      data: [{ type: "data-progress", id: "crunch", data: expectedProgress.at(-1) }],
    });
    expect(toolParts(message)[0].preliminary !== true, "A: the final tool part is still marked preliminary");
    return { preliminary: outputs.length, onData: a.dataParts.length };
  },

  // MCP servers (docs/protocol.md#mcp-servers-frame): useAgent's onMcpUpdate gets the servers the
  // demo agent declares (the demo MCP server, DEMO_MCP_URL) in the reference's MCPServersState
  // shape; a turn calls one of its tools through the real MCP connection, the client sees the
  // server ready with its tools, prompts and resources, and a second tab gets the same on connect.
  async mcp(name) {
    const a = await openTab("A", name);
    await waitFor("A: an MCP update on connect", () => a.mcpUpdates.length > 0);
    checkMcpShape(a.mcpUpdates[0].mcp, "A: the MCP structure on connect");
    expect(MCP_SERVER in a.mcpUpdates[0].mcp.servers, `A: the declared server ${MCP_SERVER} on connect: ${JSON.stringify(a.mcpUpdates[0].mcp)}`);

    const req = await sendAndFinish(a, `/tool convert_units ${JSON.stringify(MCP_INPUT)}`);
    const stream = checkStream(a, req.id);
    const outputs = stream.chunks.filter((c) => c.type === "tool-output-available").map((c) => c.output);
    expectEqual(outputs, [MCP_OUTPUT], "A: the MCP tool's output in the stream");
    const part = toolParts(a.chat.messages.at(-1))[0];
    expectSame({ type: part?.type, state: part?.state, input: part?.input, output: part?.output },
      { type: "tool-convert_units", state: "output-available", input: MCP_INPUT, output: MCP_OUTPUT }, "A: the tool part");

    const ready = (tab) => {
      const last = tab.mcpUpdates.at(-1)?.mcp;
      return last?.servers?.[MCP_SERVER]?.state === "ready" ? last : null;
    };
    const seen = await waitFor("A: the demo server ready", () => ready(a));
    checkMcpShape(seen, "A: the MCP structure once ready");
    const server = seen.servers[MCP_SERVER];
    expectEqual(server.name, MCP_SERVER, "A: the server's name");
    expect(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/.test(server.server_url), `A: the server's URL: ${server.server_url}`);
    expectEqual(server.error, null, "A: the ready server's error");
    const of = (items) => items.filter((item) => item.serverId === MCP_SERVER).map((item) => item.name).sort();
    expectEqual(of(seen.tools), ["convert_units", "count_words"], "A: the server's tools");
    expectEqual(of(seen.prompts), ["convert"], "A: the server's prompts");
    expectEqual(of(seen.resources), ["units"], "A: the server's resources");
    const tool = seen.tools.find((t) => t.name === "convert_units");
    expectSame(Object.keys(tool.inputSchema?.properties ?? {}).sort(), ["from_unit", "to_unit", "value"], "A: convert_units's input schema");

    const b = await openTab("B", name);
    const seenByB = await waitFor("B: the demo server ready on connect", () => ready(b));
    expectSame(seenByB.servers, seen.servers, "B: the servers, as A last saw them");
    expectSame(of(seenByB.tools), of(seen.tools), "B: the server's tools");
    return { states: a.mcpUpdates.map((u) => u.mcp.servers?.[MCP_SERVER]?.state), tools: of(seen.tools) };
  },

  // A refused connection (no valid session) must close with a terminal code (1008 or 4000-4999,
  // docs/protocol.md#close-codes) so the client stops reconnecting and reports connectionError.
  async unauthenticated(name) {
    const a = mountTab("A", name, "sessionid=not-a-session");
    await waitFor("the server to close the refused socket", () => a.socketEvents.some((e) => e.close !== undefined), 10_000);
    // Long enough for several reconnects at minReconnectionDelay 100 / maxReconnectionDelay 200.
    await sleep(1500);
    const closes = a.socketEvents.filter((e) => e.close !== undefined).map((e) => e.close);
    const terminal = (code) => code === 1008 || (code >= 4000 && code <= 4999);
    expect(terminal(closes[0]), `the server closed the refused socket with code ${closes[0]}; only 1008 or 4000-4999 stop the client reconnecting (close codes seen: ${JSON.stringify(closes)})`);
    expectEqual(a.sockets.length, 1, "A: sockets opened (no reconnect after a terminal close)");
    expect(a.chat?.connectionError, "A: connectionError must be set after a terminal close");
    expectEqual(a.chat.connectionError.code, closes[0], "A: connectionError.code");
    expect(!a.agent.identified, "A: identified on a refused connection");
    expect(!a.inbound().some((f) => f.type === "cf_agent_identity"), "A: cf_agent_identity sent on a refused connection");
    expectEqual(fetchLog.map((f) => f.status), [401], "A: get-messages status without a session");
    expectEqual(a.chat.messages, [], "A: messages");
    return { closeCode: closes[0] };
  },
};

// ---------------------------------------------------------------------------------------------

function dumpLogs() {
  const clip = (s, n = 400) => (s.length > n ? `${s.slice(0, n)}…(${s.length} chars)` : s);
  const lines = [];
  for (const tab of openTabs) {
    lines.push(`--- tab ${tab.label} (instance ${tab.name}) sockets: ${tab.sockets.map((s) => s.connectUrl).join(", ")}`);
    for (const e of tab.log) lines.push(`[${String(e.t).padStart(6)} ms] ${tab.label}#${e.sock} ${e.dir} ${clip(JSON.stringify(e.frame))}`);
    for (const e of tab.socketEvents) lines.push(`[${String(e.t).padStart(6)} ms] ${tab.label} event ${JSON.stringify(e)}`);
    const last = tab.snapshots.at(-1);
    if (last) lines.push(`    final state: ${clip(JSON.stringify(last), 2000)}`);
  }
  for (const f of fetchLog) lines.push(`[${String(f.t).padStart(6)} ms] fetch ${f.url} -> ${f.status} (cookie sent: ${f.cookie})`);
  console.log(lines.join("\n"));
}

async function main() {
  if (!scenarioName || !HOST || !(scenarioName in scenarios)) {
    console.log(USAGE);
    console.log(`scenarios: ${Object.keys(scenarios).join(", ")}`);
    console.log(`RESULT ${JSON.stringify({ ok: false, scenario: scenarioName ?? null, reason: "bad arguments" })}`);
    return 1;
  }
  const name = `conf-${scenarioName}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const started = performance.now();
  let result;
  try {
    const details = await scenarios[scenarioName](name);
    result = { ok: true, scenario: scenarioName, instance: name, ms: Math.round(performance.now() - started), ...details };
  } catch (error) {
    const reason = error instanceof ConformanceError ? error.message : `harness error: ${error?.stack ?? error}`;
    result = { ok: false, scenario: scenarioName, instance: name, ms: Math.round(performance.now() - started), reason };
  }
  if (!result.ok || DUMP) dumpLogs();
  for (const tab of openTabs) {
    try {
      tab.root.unmount();
    } catch {
      // Unmounting is best effort at exit.
    }
  }
  console.log(`RESULT ${JSON.stringify(result)}`);
  return result.ok ? 0 : 1;
}

// Exit explicitly: sockets, timers and React's scheduler would otherwise keep Node alive.
process.exit(await main());
