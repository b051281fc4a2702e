/*
 * Scheduled prompts in the admin: every <time class="local-time" datetime="…"> is shown in the
 * reader's own time zone (the server wrote it in the schedule's zone, for pages without scripts).
 */
(function () {
  "use strict";
  const format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    hourCycle: "h23", timeZoneName: "short",
  });
  function localise(root) {
    for (const node of root.querySelectorAll("time.local-time[datetime]")) {
      const moment = new Date(node.getAttribute("datetime"));
      if (Number.isNaN(moment.getTime())) continue;
      node.title = `${node.textContent} (${moment.toISOString()})`;
      node.textContent = format.format(moment);
      node.dataset.localised = "true";
    }
  }
  document.addEventListener("DOMContentLoaded", () => localise(document));
})();
