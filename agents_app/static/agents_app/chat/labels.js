/*
 * Who a message is from, as the label above it says: "You", "Agent", "System"; for a prompt
 * that a schedule posted (metadata.source "schedule", agents_app.schedules) "scheduled: <name>";
 * for the task a parent agent handed its sub-agent (metadata.source "agent",
 * agents_app.agent_tools) the parent agent's slug.
 */

export function roleLabel(message, role) {
  if (role === "assistant") return "Agent";
  if (role !== "user") return "System";
  const metadata = message.metadata || {};
  if (metadata.source === "schedule") return `scheduled: ${metadata.schedule}`;
  if (metadata.source === "agent" && typeof metadata.agent === "string" && metadata.agent) return metadata.agent;
  return "You";
}
