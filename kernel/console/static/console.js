// The live timeline: entries after the last one shown are fetched every
// second and appended as text (textContent: nothing a worker or a model
// wrote is ever parsed as HTML).
"use strict";
(function () {
  const table = document.getElementById("timeline");
  if (!table) return;
  const id = table.dataset.episode;
  let last = Number(table.dataset.last);
  const body = table.tBodies[0];
  async function poll() {
    try {
      const r = await fetch("/episodes/" + encodeURIComponent(id) + "/events?after=" + last, { credentials: "same-origin" });
      if (r.ok) {
        for (const e of await r.json()) {
          const tr = document.createElement("tr");
          for (const v of [e.at, "epoch " + e.epoch, e.text]) {
            const td = document.createElement("td");
            td.textContent = v;
            tr.appendChild(td);
          }
          tr.className = "live";
          body.appendChild(tr);
          last = e.seq;
        }
        table.dataset.last = String(last);
      }
    } catch (_) {}
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
})();
