/*
 * The instance's MCP servers, as cf_agent_mcp_servers frames describe them (the structure of
 * Cloudflare's MCPServersState: {servers: {id: {name, server_url, state, error, ...}}, tools,
 * prompts, resources}, each tool, prompt and resource with the serverId it comes from).
 *
 * The server sends the whole structure on connect and again whenever a server's state changes,
 * so each frame replaces what is shown. The panel stays hidden while the instance has no servers.
 */

import { el } from "./dom.js";

/** States a server may be in: connecting, authenticating, discovering, connected, ready, failed. */
const SETTLED_OK = "ready";

export class McpServersView {
  /** @param {HTMLElement} container  the (initially hidden) #mcp-servers element */
  constructor(container) {
    this.container = container;
    /** The last structure shown, for the test hook. */
    this.state = { servers: {}, tools: [], prompts: [], resources: [] };
  }

  /** Show the structure of one frame (anything malformed counts as no servers). */
  update(mcp) {
    const state = {
      servers: mcp && typeof mcp.servers === "object" && mcp.servers ? mcp.servers : {},
      tools: Array.isArray(mcp?.tools) ? mcp.tools : [],
      prompts: Array.isArray(mcp?.prompts) ? mcp.prompts : [],
      resources: Array.isArray(mcp?.resources) ? mcp.resources : [],
    };
    this.state = state;
    // In the server's order: those the agent declares, then those added at runtime, oldest first.
    const ids = Object.keys(state.servers);
    const container = this.container;
    container.replaceChildren();
    container.hidden = ids.length === 0;
    if (!ids.length) return;

    const ready = ids.filter((id) => state.servers[id]?.state === SETTLED_OK).length;
    const head = el("span", "mcp-title", "MCP servers");
    head.title = "Model Context Protocol servers whose tools this agent uses";
    container.append(head, el("span", "mcp-summary", `${ready} of ${ids.length} ready`));
    const list = el("ul", "mcp-list");
    for (const id of ids) list.append(this.serverItem(id, state.servers[id] || {}, state));
    container.append(list);
  }

  serverItem(id, server, state) {
    const of = (items) => items.filter((item) => item?.serverId === id);
    const tools = of(state.tools);
    const item = el("li", "mcp-server");
    item.dataset.id = id;
    item.dataset.state = String(server.state ?? "unknown");
    const name = el("span", "mcp-name", server.name ?? id);
    if (server.server_url) name.title = server.server_url;
    const counts = [
      plural(tools.length, "tool"),
      plural(of(state.prompts).length, "prompt"),
      plural(of(state.resources).length, "resource"),
    ].join(" · ");
    item.append(name, el("span", "mcp-state", item.dataset.state), el("span", "mcp-counts", counts));
    if (tools.length) {
      const names = el("span", "mcp-tools", tools.map((tool) => tool?.name).filter(Boolean).join(", "));
      item.append(names);
    }
    if (server.error) item.append(el("span", "mcp-error", server.error));
    return item;
  }
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
