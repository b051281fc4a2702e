/*
 * DOM helpers shared by the renderers. Model text only ever reaches the page through
 * textContent (el's `text`), never innerHTML.
 */

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** Pretty JSON for display ("" for undefined; String() for what JSON cannot encode). */
export function json(value, indent = 2) {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, indent);
  } catch {
    return String(value);
  }
}

/** Strings as they are, anything else as compact JSON. */
export function textOf(value) {
  return typeof value === "string" ? value : json(value, 0);
}

/** A URL safe for href/src (http, https, blob; media data: URLs if allowed), or null. */
export function safeUrl(url, allowData = false) {
  if (typeof url !== "string") return null;
  try {
    const parsed = new URL(url, location.href);
    if (["http:", "https:", "blob:"].includes(parsed.protocol)) return parsed.href;
    if (allowData && parsed.protocol === "data:" && /^data:(image|audio|video|application\/pdf)/i.test(url)) {
      return url;
    }
  } catch {
    /* invalid */
  }
  return null;
}
