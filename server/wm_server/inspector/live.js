// Live commit progress for the inspector's commit page: the page lists every stored event;
// while the commit runs, this appends the new ones as WatchCommit delivers them (server-sent
// events, resumed by the browser after a drop with Last-Event-ID). No inline script, no
// network but the inspector itself (the page's Content-Security-Policy allows nothing else).
"use strict";
(function () {
  const list = document.getElementById("events");
  const status = document.getElementById("live-status");
  if (!list || !list.dataset.stream || typeof EventSource === "undefined") return;
  const source = new EventSource(list.dataset.stream + "?after=" + (list.dataset.after || "0"));
  const say = (text) => { if (status) status.textContent = text; };
  const seen = new Set(Array.from(list.children).map((li) => li.dataset.sequence));
  source.addEventListener("open", () => say("live"));
  source.addEventListener("commit", (message) => {
    const event = JSON.parse(message.data);
    if (seen.has(String(event.sequence))) return;
    seen.add(String(event.sequence));
    const item = document.createElement("li");
    item.dataset.sequence = String(event.sequence);
    if (event.failure) item.className = "failure";
    item.textContent = event.stage + " " + event.detail;
    list.appendChild(item);
    const state = document.getElementById("commit-state");
    if (state) state.textContent = event.state;
  });
  source.addEventListener("end", () => { source.close(); say("finished"); });
  source.addEventListener("failure", (message) => {
    source.close();
    say("stopped: " + JSON.parse(message.data).message);
  });
  source.addEventListener("error", () => say("reconnecting…"));
})();
