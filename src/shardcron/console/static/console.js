// shardcron console: live sections and confirmations. No framework, no build step.
"use strict";

// A <section data-live="URL" data-every="MS"> is fetched again every MS milliseconds and
// its content replaced when the server's HTML changed. Polling pauses in a hidden tab.
function follow(section) {
  const url = section.dataset.live;
  const every = Number(section.dataset.every || 1000);
  let shown = null;

  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.status === 401) {
        window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
        return;
      }
      if (!response.ok) throw new Error(String(response.status));
      showRegistry(response.headers.get("x-registry"));
      const html = await response.text();
      if (html !== shown) {
        section.innerHTML = html;
        shown = html;
      }
      document.body.dataset.live = "ok";
      section.dataset.updated = String(Date.now());
    } catch (error) {
      document.body.dataset.live = "stale";
    }
  }

  (function loop() {
    setTimeout(async () => {
      await refresh();
      loop();
    }, every);
  })();
}

// Each refresh says whether the console reaches the registry ("connected" or "down"): the
// banner follows it, so an outage shows on a page that stays open, and so does the recovery.
function showRegistry(state) {
  if (!state) return;
  const banner = document.getElementById("registry-down");
  if (banner) banner.hidden = state === "connected";
  document.body.dataset.registry = state;
}

document.querySelectorAll("[data-live]").forEach(follow);

// Destructive buttons carry data-confirm: ask first, and tell the server it was asked.
// Without script the server asks on a page of its own.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset ? form.dataset.confirm : undefined;
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  form.elements.confirm.value = "yes";
});
