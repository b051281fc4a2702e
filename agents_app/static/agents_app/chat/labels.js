/*
 * Who a message is from, as the label above it says: "You", "Agent", "System", and for a prompt
 * that a schedule posted (metadata.source "schedule", agents_app.schedules) "scheduled: <name>".
 */

export function roleLabel(message, role) {
  if (role === "assistant") return "Agent";
  if (role !== "user") return "System";
  const metadata = message.metadata || {};
  return metadata.source === "schedule" ? `scheduled: ${metadata.schedule}` : "You";
}
