/*
 * Reply attachments: extras an action attached to the turn's reply, carried in the
 * assistant message's metadata.attachments and shown under its parts.
 */

import { el, json, safeUrl, textOf } from "./dom.js";

const RENDERERS = {
  email_draft: renderEmailDraft,
  card: renderCardAttachment,
  voice_note: renderVoiceNote,
};

/** The attachments block of an assistant message, or null when it has none. */
export function renderAttachments(message) {
  const list = message.metadata?.attachments;
  if (!Array.isArray(list)) return null;
  const items = list.filter((a) => a && typeof a === "object" && typeof a.type === "string");
  if (!items.length) return null;
  const wrap = el("div", "attachments");
  for (const attachment of items) {
    const node = el("div", "attachment");
    node.dataset.type = attachment.type;
    const render = Object.hasOwn(RENDERERS, attachment.type) ? RENDERERS[attachment.type] : renderOtherAttachment;
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
