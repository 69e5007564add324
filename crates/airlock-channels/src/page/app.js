// The approval inbox. Polls the hub for waiting calls, counts down to each
// one's expiry, and posts the person's choice with the page's CSRF token.
// Text from calls is only ever set as textContent, never parsed as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]').content;
const inbox = document.getElementById("inbox");
const status = document.getElementById("status");
const logins = document.getElementById("logins");
const cards = new Map();
const CHOICES = [
  ["allow_once", "Allow once"],
  ["allow_for_run", "Allow for this run"],
  ["always_allow", "Always allow"],
  ["deny", "Deny"],
];

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const c of children) node.append(c);
  return node;
}

function card(call) {
  const countdown = el("span", { className: "countdown" });
  const result = el("p", { className: "result" });
  const buttons = CHOICES.map(([choice, label]) => {
    const b = el("button", { type: "button", textContent: label });
    b.dataset.choice = choice;
    b.addEventListener("click", () => decide(call.id, choice));
    return b;
  });
  const pre = el("pre", { className: "arguments", textContent: call.arguments });
  const args = el("div", {}, pre);
  if (call.arguments_cut) {
    // Only the first 4 KB came with the list; the rest on request.
    const more = el("button", { type: "button", className: "more",
      textContent: "Show all " + call.arguments_bytes + " bytes" });
    more.addEventListener("click", async () => {
      more.disabled = true;
      try {
        const r = await fetch("/api/arguments/" + encodeURIComponent(call.id));
        const body = await r.json();
        if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
        pre.textContent = body.arguments;
        more.remove();
      } catch (e) {
        more.textContent = "could not load them: " + e.message;
      }
    });
    args.append(more);
  }
  const details = el("dl", {},
    el("dt", { textContent: "Connection" }), el("dd", { textContent: call.connection }),
    el("dt", { textContent: "What it does" }), el("dd", { textContent: call.description || "(no description)" }),
    el("dt", { textContent: "Why it asks" }), el("dd", { textContent: call.reason }),
    el("dt", { textContent: "Expires" }), el("dd", {}, countdown));
  const node = el("li", { className: "call", id: "call-" + call.id },
    el("h2", { textContent: call.tool }),
    details,
    args,
    el("div", { className: "choices" }, ...buttons),
    result);
  node.dataset.id = call.id;
  return { node, countdown, result, buttons, expiresAt: Date.now() + call.expires_in_ms, done: false };
}

function finish(c, text, state) {
  c.done = true;
  c.result.textContent = text;
  c.node.classList.add("done");
  c.node.dataset.state = state;
  for (const b of c.buttons) b.disabled = true;
}

async function decide(id, choice) {
  const c = cards.get(id);
  if (!c || c.done) return;
  for (const b of c.buttons) b.disabled = true;
  let text, state;
  try {
    const r = await fetch("/api/decide", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Airlock-CSRF": csrf },
      body: JSON.stringify({ id, choice }),
    });
    const body = await r.json();
    text = body.message || body.error || ("HTTP " + r.status);
    state = body.result || "error";
  } catch (e) {
    text = "could not reach airlock: " + e;
    state = "error";
  }
  finish(c, text, state);
}

function tick() {
  for (const c of cards.values()) {
    if (c.done) continue;
    const left = Math.max(0, Math.ceil((c.expiresAt - Date.now()) / 1000));
    c.countdown.textContent = left > 0 ? "in " + left + " s" : "expired";
    if (left === 0) finish(c, "expired: the call did not run", "expired");
  }
}

// Sources waiting for a person to log in: the hub's own words, which name
// the command to run in a terminal. The page cannot log in for them.
function showLogins(list) {
  logins.replaceChildren(...list.map((l) =>
    el("li", { className: "login" },
      el("strong", { textContent: l.source }), " ",
      el("span", { textContent: l.detail }))));
  logins.hidden = list.length === 0;
}

async function refresh() {
  let list;
  try {
    const r = await fetch("/api/pending", { cache: "no-store" });
    if (r.status === 401) {
      status.textContent = "This page's session has ended. Run `airlock page` for a new link.";
      return;
    }
    const body = await r.json();
    list = body.pending;
    showLogins(body.logins || []);
  } catch (e) {
    status.textContent = "airlock is not reachable; is it still running?";
    return;
  }
  const waiting = new Set(list.map((c) => c.id));
  for (const call of list) {
    if (!cards.has(call.id)) {
      const c = card(call);
      cards.set(call.id, c);
      inbox.prepend(c.node);
    }
  }
  for (const [id, c] of cards) {
    if (!c.done && !waiting.has(id)) finish(c, "no longer waiting: decided elsewhere, or expired", "gone");
  }
  const open = [...cards.values()].filter((c) => !c.done).length;
  status.textContent =
    open === 0 ? "No calls are waiting for you." : open === 1 ? "1 call is waiting for you." : open + " calls are waiting for you.";
  tick();
}

refresh();
setInterval(refresh, 1000);
setInterval(tick, 1000);
