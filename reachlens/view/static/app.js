// reachlens view: puts the server's fragments in place and keeps the view in the address bar.
// Every text a fragment holds was escaped by the server (reachlens.escape.html_text); this script adds none.
"use strict";

const params = () => new URLSearchParams(window.location.search);

async function fragment(name, query) {
  const res = await fetch(`/frag/${name}?${query.toString()}`, {credentials: "same-origin"});
  return res.text();
}

function state() {
  const p = new URLSearchParams();
  const set = document.getElementById("set-menu");
  if (set && set.value) p.set("set", set.value);
  for (const id of ["filter", "search"]) {
    const v = document.getElementById(id).value.trim();
    if (v) p.set(id, v);
  }
  const sort = document.getElementById("sort-menu");
  if (sort && sort.value) p.set("sort", sort.value);
  return p;
}

// Each box shows the answer to the latest request made for it; an answer that comes after a newer one is dropped.
const latest = {list: 0, question: 0};

// The list comes at once; while the questions' texts are still being rebuilt from the task it says so
// (data-pending), and the same list is asked for again with them (texts=wait).
async function showList(p) {
  const list = document.getElementById("list");
  const turn = ++latest.list;
  list.setAttribute("aria-busy", "true");
  const html = await fragment("list", p);
  if (turn !== latest.list) return;
  list.innerHTML = html;
  list.removeAttribute("aria-busy");
  if (list.querySelector("#questions[data-pending]")) {
    const q = new URLSearchParams(p);
    q.set("texts", "wait");
    const full = await fragment("list", q);
    if (turn === latest.list) list.innerHTML = full;
  }
}

// The question comes at once; its prompt (the task and the model's tokenizer loaded for it) is asked for apart.
async function showQuestion(p) {
  const box = document.getElementById("question");
  const turn = ++latest.question;
  if (!p.get("question")) { box.innerHTML = ""; return; }
  const q = new URLSearchParams({set: p.get("set") || "", question: p.get("question")});
  box.setAttribute("aria-busy", "true");
  const html = await fragment("question", q);
  if (turn !== latest.question) return;
  box.innerHTML = html;
  box.removeAttribute("aria-busy");
  const slot = box.querySelector("#prompt[data-pending]");
  if (slot) {
    const prompt = await fragment("prompt", q);
    if (turn === latest.question) { slot.innerHTML = prompt; slot.removeAttribute("data-pending"); }
  }
}

async function showControls(p) {
  const q = new URLSearchParams();
  if (p.get("set")) q.set("set", p.get("set"));
  document.getElementById("controls").innerHTML = await fragment("controls", q);
  const sort = document.getElementById("sort-menu");
  if (sort) sort.value = p.get("sort") || "";
  const filter = p.get("filter") || "";  // a menu whose choice is the whole filter shows that choice
  for (const menu of document.querySelectorAll("select.preset")) {
    if ([...menu.options].some((o) => o.value === filter)) menu.value = filter;
  }
}

async function load() {
  const p = params();
  const q = new URLSearchParams();
  if (p.get("set")) q.set("set", p.get("set"));
  document.getElementById("sets").innerHTML = await fragment("sets", q);
  document.getElementById("filter").value = p.get("filter") || "";
  document.getElementById("search").value = p.get("search") || "";
  await showControls(p);
  await Promise.all([showList(p), showQuestion(p)]);
  document.body.dataset.ready = "1";
}

function go(p) {
  window.history.pushState(null, "", `?${p.toString()}`);
  return Promise.all([showList(p), showQuestion(p)]);
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("view-form");
  form.addEventListener("submit", (e) => { e.preventDefault(); go(state()); });
  form.addEventListener("change", async (e) => {
    const t = e.target;
    if (t.id === "set-menu") {
      document.getElementById("filter").value = "";
      const p = new URLSearchParams({set: t.value});
      await showControls(p);
      go(p);
    } else if (t.classList.contains("preset")) {
      const parts = [...document.querySelectorAll("select.preset")].map((s) => s.value).filter((v) => v);
      document.getElementById("filter").value = parts.map((v) => parts.length > 1 ? `(${v})` : v).join(" and ");
      go(state());
    } else if (t.id === "sort-menu") {
      go(state());
    }
  });
  document.getElementById("list").addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-qid]");
    if (!row) return;
    const p = state();
    p.set("question", decodeURIComponent(row.dataset.qid));
    window.history.pushState(null, "", `?${p.toString()}`);
    showQuestion(p);
  });
  document.getElementById("question").addEventListener("toggle", async (e) => {
    const d = e.target;
    if (!d.matches || !d.matches("details.sample") || !d.open || d.dataset.loaded) return;
    const p = params();
    const q = new URLSearchParams({set: p.get("set") || "", question: p.get("question") || "",
                                   side: d.dataset.side, idx: d.dataset.idx});
    d.querySelector("pre").innerHTML = await fragment("sample", q);
    d.dataset.loaded = "1";
  }, true);
  window.addEventListener("popstate", load);
  load();
});
