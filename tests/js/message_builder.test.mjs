// The chat page's message builder under Node's test runner (node --test; no npm packages).
//
// Parity: tests/unit/test_chat_js.py builds the expected message of every case with the Python
// MessageBuilder and names the file of cases in CHAT_JS_PARITY_CASES; each case here applies the
// same chunks with the JS builder and must make the same message. Run alone (without that
// variable) the parity suite is skipped and only the unit tests below run.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  MessageBuilder,
  hasContent,
  isToolPart,
  toolNameOf,
  truthy,
} from "../../agents_app/static/agents_app/chat/message-builder.js";

const casesFile = process.env.CHAT_JS_PARITY_CASES;

/** Apply a case's chunks (copies: the cases file is shared) as the page would. */
function build({ base, messageId, chunks }) {
  const builder = base ? new MessageBuilder(structuredClone(base)) : MessageBuilder.create(messageId);
  for (const chunk of structuredClone(chunks)) builder.apply(chunk);
  return builder.message;
}

describe("same message as messages.py", { skip: casesFile ? false : "CHAT_JS_PARITY_CASES is not set" }, () => {
  const cases = casesFile ? JSON.parse(readFileSync(casesFile, "utf8")) : {};
  for (const [name, c] of Object.entries(cases)) {
    test(name, () => {
      assert.deepStrictEqual(build(c), c.expected);
    });
  }
});

describe("message builder", () => {
  test("a tool part's name: from the type of tool-<name>, from toolName of dynamic-tool", () => {
    assert.equal(toolNameOf({ type: "tool-get_weather", toolName: "other" }), "get_weather");
    assert.equal(toolNameOf({ type: "tool-a-b" }), "a-b");
    assert.equal(toolNameOf({ type: "dynamic-tool", toolName: "mcp_search" }), "mcp_search");
    assert.equal(toolNameOf({ type: "dynamic-tool" }), "tool");
  });

  test("tool parts are tool-* and dynamic-tool parts", () => {
    assert.ok(isToolPart({ type: "tool-x" }));
    assert.ok(isToolPart({ type: "dynamic-tool" }));
    assert.ok(!isToolPart({ type: "text" }));
    assert.ok(!isToolPart({ type: "toolbox" }));
    assert.ok(!isToolPart(null));
    assert.ok(!isToolPart({ type: 3 }));
  });

  test("content is anything but step boundaries", () => {
    assert.ok(!hasContent({ parts: [] }));
    assert.ok(!hasContent({ parts: [{ type: "step-start" }] }));
    assert.ok(hasContent({ parts: [{ type: "step-start" }, { type: "data-x", data: 1 }] }));
    assert.ok(!hasContent(null));
  });

  test("Python's truth value", () => {
    for (const falsy of [null, undefined, false, 0, "", [], {}]) assert.equal(truthy(falsy), false, JSON.stringify(falsy));
    for (const value of [true, 1, "x", [0], { a: 0 }]) assert.equal(truthy(value), true, JSON.stringify(value));
  });

  test("parts are read afresh: a page may replace them between chunks", () => {
    const message = { id: "m", role: "assistant", parts: [] };
    const builder = new MessageBuilder(message);
    builder.apply({ type: "tool-input-available", toolCallId: "c", toolName: "t", input: {} });
    message.parts = [{ type: "tool-t", toolCallId: "c", toolName: "t", state: "approval-responded", input: {} }];
    builder.apply({ type: "tool-output-available", toolCallId: "c", output: 1 });
    assert.deepStrictEqual(message.parts, [
      { type: "tool-t", toolCallId: "c", toolName: "t", state: "output-available", input: {}, output: 1 },
    ]);
  });

  test("sparse chunks leave null, never undefined (the message stays valid JSON as it is)", () => {
    const message = build({
      messageId: "m",
      chunks: [
        { type: "file" },
        { type: "tool-input-start", toolCallId: "a" },
        { type: "tool-input-error", toolCallId: "b", toolName: "x" },
        { type: "tool-output-available", toolCallId: "a" },
        { type: "data-x", id: "d" },
      ],
    });
    assert.deepStrictEqual(message, JSON.parse(JSON.stringify(message)));
    assert.deepStrictEqual(message.parts[0], { type: "file", mediaType: null, url: null });
  });

  test("chunks the page handles itself change nothing here", () => {
    const message = build({
      messageId: "m",
      chunks: [
        { type: "finish", messageMetadata: { finishReason: "stop" } },
        { type: "error", errorText: "x" },
        { type: "abort" },
        { type: "data-status", data: "busy", transient: true },
        { type: "tool-input-delta", toolCallId: "c", inputTextDelta: "{" },
      ],
    });
    assert.deepStrictEqual(message, { id: "m", role: "assistant", parts: [] });
  });
});
