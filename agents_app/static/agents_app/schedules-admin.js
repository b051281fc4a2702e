/*
 * Scheduled prompts in the admin:
 * - every <time class="local-time" datetime="…"> is shown in the reader's own time zone (the server
 *   wrote it in the schedule's zone, for pages without scripts);
 * - on a schedule's form, what the schedule being typed means and its next three runs (or what was
 *   not understood) appear under the Schedule field, from ScheduleAdmin.preview_view.
 */
(function () {
  "use strict";
  const format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    hourCycle: "h23", timeZoneName: "short",
  });
  // Milliseconds of quiet typing before the schedule is checked (one request per pause, not per key).
  const PREVIEW_DELAY_MS = 250;

  function localise(root) {
    for (const node of root.querySelectorAll("time.local-time[datetime]")) {
      const moment = new Date(node.getAttribute("datetime"));
      if (Number.isNaN(moment.getTime())) continue;
      node.title = `${node.textContent} (${moment.toISOString()})`;
      node.textContent = format.format(moment);
      node.dataset.localised = "true";
    }
  }

  function errorList(messages) {
    const list = document.createElement("ul");
    list.className = "schedule-preview-errors";
    for (const message of messages) {
      const item = document.createElement("li");
      item.textContent = message;
      list.append(item);
    }
    return list;
  }

  function livePreview(box) {
    const field = document.querySelector(".form-row.field-schedule");
    const schedule = document.getElementById("id_schedule");
    if (!field || !schedule) return;
    const help = field.querySelector(".help");
    if (help) help.after(box); else field.append(box);
    const inputs = ["id_agent", "id_instance_name", "id_schedule", "id_timezone"]
      .map((id) => document.getElementById(id)).filter(Boolean);
    let timer = null;
    let asked = 0;  // answers to older questions are dropped: the newest text wins

    async function check() {
      const question = ++asked;
      const query = new URLSearchParams();
      for (const input of inputs) query.set(input.name, input.value);
      let answer;
      try {
        const response = await fetch(`${box.dataset.url}?${query}`, {
          headers: { Accept: "application/json" }, credentials: "same-origin",
        });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        answer = await response.json();
      } catch (error) {
        answer = { ok: false, errors: { schedule: `The schedule could not be checked (${error.message}).` } };
      }
      if (question !== asked) return;
      box.replaceChildren();
      if (answer.ok) {
        const meaning = document.createElement("div");
        meaning.className = "schedule-next-runs";
        meaning.innerHTML = answer.html;  // built by the server with format_html: escaped
        box.append(meaning);
        localise(box);
      } else if (Object.keys(answer.errors).length) {
        box.append(errorList(Object.values(answer.errors)));
      }
      box.hidden = !box.childElementCount;
    }

    for (const input of inputs) {
      for (const type of ["input", "change"]) {
        input.addEventListener(type, () => {
          clearTimeout(timer);
          timer = setTimeout(check, PREVIEW_DELAY_MS);
        });
      }
    }
    // A page the server sent back with the schedule's error shows that error already.
    if (schedule.value.trim() && !field.querySelector(".errorlist")) check();
  }

  document.addEventListener("DOMContentLoaded", () => {
    localise(document);
    const box = document.getElementById("schedule-preview");
    if (box && box.dataset.url) livePreview(box);
  });
})();
