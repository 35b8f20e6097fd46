// scholar pasa serve: one page, no build step, no network beyond this server.
"use strict";
const TOKEN = new URLSearchParams(location.search).get("token");
const $ = (id) => document.getElementById(id);
let current = null;     // the search shown: {id, source}
let runData = null;     // the opened run

function api(path, opts = {}) {
  const url = new URL(path, location.origin);
  if (TOKEN) url.searchParams.set("token", TOKEN);
  return fetch(url, opts).then(async (r) => {
    const body = await r.json().catch(() => ({ error: `${r.status} ${r.statusText}` }));
    if (!r.ok) throw new Error(body.error || `${r.status}`);
    return body;
  });
}
function showError(e) { const el = $("error"); el.textContent = e ? String(e.message || e) : ""; el.hidden = !e; }
function el(tag, attrs = {}, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) { if (k === "class") n.className = v; else if (v != null) n.setAttribute(k, v); }
  for (const k of kids) n.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return n;
}
const fmt = (v) => v == null ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));
const ARXIV = /^(\d{4}\.\d{4,5}|[a-z-]+(\.[A-Z]{2})?\/\d{7})(v\d+)?$/;
function paperLink(id, title) {
  return ARXIV.test(id) ? el("a", { href: `https://arxiv.org/abs/${id}`, target: "_blank", rel: "noopener" }, title || id) : el("span", {}, title || id);
}

// ---- tabs ----
for (const b of document.querySelectorAll(".tab")) {
  b.onclick = () => {
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === b);
    for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${b.dataset.view}`;
    if (b.dataset.view === "runs") loadRuns();
  };
}

// ---- setting ----
let corpusFacts = null, expandNoteShown = false, replaceRunning = true;

function corpusLine(c) {
  const model = (m) => `${m.name.replace("embedded:", "")} (${m.size})`;
  const papers = c.built ? `${c.papers.toLocaleString()} papers` + (c.first_date ? ` from ${c.first_date.slice(0, 7)} to ${c.last_date.slice(0, 7)}` : "") +
    `, ${c.with_sections.toLocaleString()} with sections` : "not built yet (scholar papers build)";
  return `Searching corpus "${c.name}": ${papers} · search ${c.search} · expand ${c.expand} · ` +
    `Crawler ${model(c.crawler)} · Selector ${model(c.selector)}. For ${c.bigger}.`;
}

function loadSetting() {
  api("/api/setting").then((s) => {
    if (s.corpus) { corpusFacts = s.corpus; $("corpus").textContent = corpusLine(s.corpus); }
    replaceRunning = s.replace_running !== false;
    const b = s.budgets || {};
    const state = s.loaded ? "" : (s.load_error ? " · the models failed to load" : " · loading models…");
    $("headline").textContent = (s.corpus && s.corpus.headline ? s.corpus.headline : "") + state;
    $("setting").textContent = `search=${s.search} · expand=${s.expand} · crawler ${s.crawler.split("/").pop()} · ` +
      `selector ${s.selector.split("/").pop()} · budgets: ${b.max_sessions} sessions, ${b.max_actions} actions, ` +
      `${b.max_queue} papers · ${s.loaded ? `loaded in ${s.load_seconds} s` + (s.warm_seconds != null ? `, warmed in ${s.warm_seconds} s` : "") : (s.load_error ? "load failed" : "loading models…")}`;
    $("selector-line").textContent = s.selector_line ? `"selected": ${s.selector_line}` : "";
    if (s.load_error) showError(`loading the agent failed: ${s.load_error}`);
    if (!s.loaded && !s.load_error) setTimeout(loadSetting, 2000);
  }).catch(showError);
}

$("details-toggle").onclick = () => {
  const open = $("details").hidden;
  $("details").hidden = !open;
  $("details-toggle").setAttribute("aria-expanded", String(open));
};

// ---- search ----
$("search-form").onsubmit = (ev) => {
  ev.preventDefault();
  startSearch({ query: $("query").value });
};

// "more like this": a crawl that starts from a paper (its title searched, the paper expanded where it can be)
function moreLikeThis(paper) {
  $("query").value = paper.title;
  startSearch({ seed_paper: paper.paper_id }, paper);
}

function startSearch(body, seed) {
  showError(null);
  if ($("before").value.trim()) body.before = $("before").value.trim();
  // a new search replaces the one this page is running (serve.replace_running=false keeps both going): the server
  // cancels the old one and the new one says it waits for it to stop
  const replacing = current && !current.finished && replaceRunning;
  if (replacing) body.replaces = current.id;
  api("/api/search", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
    .then((r) => follow(r.id, { seed, replaced: replacing })).catch(showError);
}
$("cancel").onclick = () => {
  if (!current || current.finished) return;
  showCancelling();
  api(`/api/search/${current.id}/cancel`, { method: "POST" }).catch(showError);
};

// at the click, not when the search has stopped: the live counters are stale from now on
function showCancelling(replacedBy) {
  if (!current || current.cancelling) return;
  current.cancelling = true;
  $("status").textContent = replacedBy ? "cancelling… (replaced by a new search)" : "cancelling…";
  $("status").className = "status cancelling";
  $("progress").replaceChildren();
  $("cancel").disabled = true;
}

function follow(id, opts = {}) {
  if (current && current.source) current.source.close();
  for (const n of ["events", "results", "search-tree", "progress", "note"]) $(n).replaceChildren();
  $("status").className = "status";
  $("status").textContent = opts.replaced ? "the previous search is stopping: replaced by your new search…" : "";
  $("cancel").hidden = false;
  $("cancel").disabled = false;
  const title = $("search-title");
  title.hidden = !opts.seed;
  if (opts.seed) title.replaceChildren("More like this: ", el("b", {}, opts.seed.title), ` (${opts.seed.paper_id}) — a crawl that starts from this paper; the paper itself is left out of its results`);
  const url = new URL(`/api/search/${id}/events`, location.origin);
  if (TOKEN) url.searchParams.set("token", TOKEN);
  const source = new EventSource(url);
  current = { id, source, t0: performance.now(), replaced: opts.replaced };
  source.onmessage = (m) => onEvent(JSON.parse(m.data));
  source.onerror = () => { if (current && current.finished) source.close(); };
}

function onEvent(ev) {
  const d = ev.data || {};
  const st = $("status");
  switch (ev.kind) {
    case "queued": case "position":
      if (current.cancelling) break;
      st.textContent = d.waits_for ? "waiting for the search it replaced to stop…" :
        d.position > 0 ? `waiting: position ${d.position} in the queue (one search runs at a time)` : "starting…"; break;
    case "cancelling": showCancelling(d.replaced_by); break;
    case "loading": st.textContent = `loading the ${d.what}…`; break;
    case "running": if (!current.cancelling) st.textContent = "crawling…"; break;
    case "session": {
      // the server's sentence; the raw actions stay on hover
      const raw = d.actions.map((a) => `[${a.kind}] ${a.argument} (${a.status}, +${a.added})`).join("  ");
      $("events").append(el("li", { class: `session${d.cached ? " cached" : ""}`, title: `${d.start}${d.paper ? " " + d.paper : ""}: ${raw || "no action"}` }, d.text));
      $("events").scrollTop = 1e9;
      break;
    }
    case "progress": {
      if (current.cancelling) break;
      const b = d.budget_left || {};
      $("progress").replaceChildren(...[["papers in queue", d.queue], ["sessions", d.sessions], ["actions", d.actions],
        ["papers to visit", d.pending], ["budget left", `${fmt(b.max_sessions)} sessions · ${fmt(b.max_actions)} actions · ${fmt(b.max_queue)} papers · ${fmt(b.max_gen_tokens)} tokens`],
        ["time", `${d.seconds} s`]].map(([k, v]) => el("span", { class: "stat" }, `${k}: `, el("b", {}, v))));
      break;
    }
    case "selecting": if (!current.cancelling) st.textContent = `the Selector reads ${d.papers} papers…`; break;
    case "select_progress": if (!current.cancelling) st.textContent = `the Selector has read ${d.done} of ${d.of} papers…`; break;
    case "result": showResult(d); break;
    case "done": case "failed": case "cancelled":
      current.finished = true; current.source.close(); $("cancel").hidden = true;
      if (ev.kind !== "done") {
        const why = d.replaced_by ? " (replaced by a new search)" : "";
        st.textContent = ev.kind === "failed" ? `failed: ${d.error}` :
          `cancelled${why}${current.partial ? `: the ${current.partial} papers crawled before the cancel, in crawl order` : current.partial === 0 ? ": before any paper was crawled" : ""}`;
        st.className = `status ${ev.kind}`;
      }
      break;
  }
}

function showResult(r) {
  if (r.cancelled) current.partial = r.papers.length;
  const ends = [...new Set(r.trees.map((t) => t.end))];
  const cache = r.cache && r.cache.all_cached ? el("span", { class: "cache-mark", title: `${r.cache.hits} answers of the crawl and the Selector came from the LLM response cache, none was computed now` }, "from the LLM cache") : "";
  $("status").replaceChildren(`${r.papers.length} papers crawled, ${r.selected} selected${r.mark ? ` (${r.mark})` : ""} in ${r.seconds} s · ${ends.join("; ")}`, cache);
  if (r.seed) {  // a more-like-this search names its seed (also when the page reloads it)
    $("search-title").hidden = false;
    $("search-title").replaceChildren("More like this: ", el("b", {}, r.seed.title), ` (${r.seed.paper_id}) — a crawl that starts from this paper; the paper itself is left out of its results`);
  }
  // the live counters stop at the last session; the end (or the cancel) replaces them with the crawl's final state
  const last = r.trees.reduce((a, t) => ({ queue: a.queue + t.queue, sessions: a.sessions + t.sessions }), { queue: 0, sessions: 0 });
  $("progress").replaceChildren(...[["papers in queue", last.queue], ["sessions", last.sessions], ...(r.cancelled ? [] : [["papers to visit", 0]]),
    ["ended", ends.join("; ")], ["time", `${r.seconds} s`]].map(([k, v]) => el("span", { class: "stat" }, `${k}: `, el("b", {}, v))));
  // a corpus where [Expand] (almost) cannot happen: said once per page, with the first result
  const expandNote = corpusFacts && corpusFacts.expand_note && !expandNoteShown ? corpusFacts.expand_note : "";
  if (expandNote) expandNoteShown = true;
  $("note").textContent = [expandNote, r.note].filter((x) => x).join(" · ");
  const t = $("results");
  const heads = [["#", "c-num", ""], ["P", "c-p", "the Selector's P(relevant)"], ["✓", "c-sel", "selected by the Selector"],
    ["paper", "c-paper", ""], ["date", "c-date", ""], ["", "c-act", ""]];
  t.replaceChildren(el("tr", {}, ...heads.map(([h, c, title]) => el("th", { class: c, title: title || null }, h))));
  r.papers.forEach((p, i) => {
    const why = r.cancelled ? el("span", {}, "") : el("button", { type: "button", class: "why", title: "why the Selector decided so" }, "why?");
    const more = el("button", { type: "button", class: "more", title: "a crawl that starts from this paper" }, "more like this");
    more.onclick = () => moreLikeThis(p);
    const snip = p.snippet ? el("div", { class: "snippet", title: p.snippet }, p.snippet) : el("div", { class: "snippet none" }, "no abstract in this corpus");
    const title = el("div", { class: "title", title: p.title }, p.gold ? el("span", { class: "gold", title: "a gold paper of this query" }, "★ ") : "", paperLink(p.paper_id, p.title));
    const row = el("tr", { class: "paper-row" }, el("td", { class: "num" }, i + 1),
      el("td", { class: "num", title: r.cancelled ? "cancelled before the Selector read it" : "P(relevant)" }, r.cancelled || p.score == null ? "–" : p.score.toFixed(2)),
      el("td", { class: "sel", title: r.cancelled ? "cancelled: not judged" : p.selected ? "selected" : "not selected" }, r.cancelled ? "" : p.selected ? "✓" : ""),
      el("td", {}, title, snip), el("td", {}, p.date || "–"), el("td", { class: "act" }, why, " ", more));
    why.onclick = () => {
      why.disabled = true; why.textContent = "…";
      api(`/api/search/${current.id}/rationale?paper_id=${encodeURIComponent(p.paper_id)}`).then((j) => {
        row.after(el("tr", {}, el("td", {}), el("td", { colspan: 5, class: "rationale" }, rationaleText(j))));
        why.remove();
      }).catch((e) => { showError(e); why.disabled = false; why.textContent = "why?"; });
    };
    t.append(row);
  });
  if (r.cancelled) t.classList.add("cancelled"); else t.classList.remove("cancelled");
  $("search-tree").replaceChildren(el("h2", {}, r.cancelled ? "Crawl tree (as far as it got)" : "Crawl tree"), ...r.trees.map(renderTree));
}

// ---- trees ----
function renderTree(root) {
  const gold = root.gold_total ? ` · gold found ${root.gold_found}/${root.gold_total}` : "";
  const head = el("div", { class: "meta" }, `run ${root.run} · ${root.queue} papers · ${root.sessions} sessions` +
    ` · ${root.end}` + gold);
  const wrap = el("div", { class: "tree-root" }, el("div", {}, el("b", {}, root.label)), head);
  if (root.grammar_errors) wrap.append(el("div", { class: "bad" }, `grammar errors: ${root.grammar_errors.join(", ")}`));
  wrap.append(renderChildren(root.children));
  if (root.gold_missed && root.gold_missed.length) wrap.append(el("div", { class: "meta" }, `gold not found: ${root.gold_missed.join(", ")}`));
  return wrap;
}
function renderChildren(children) {
  const ul = el("ul");
  for (const c of children || []) {
    let li;
    if (c.kind === "paper") {
      li = el("li", { class: `paper${c.gold ? " gold" : ""}` }, paperLink(c.id, c.label), el("span", { class: "meta" }, ` ${c.date || ""} · depth ${c.depth}`));
      if (c.grammar_errors) li.append(el("span", { class: "bad" }, `  grammar errors: ${c.grammar_errors.join(", ")}`));
    } else {
      const ok = c.status === "executed";
      li = el("li", { class: `action ${c.kind}` }, el("span", { class: `k ${c.kind}` }, `[${c.kind[0].toUpperCase() + c.kind.slice(1)}]`), " ", c.label,
        el("span", { class: ok ? "meta" : "bad" }, ok ? ` → ${c.children.length} added (${c.candidates} candidates${c.duplicates ? `, ${c.duplicates} duplicates` : ""}${c.dropped_by_date ? `, ${c.dropped_by_date} after the date` : ""})${c.fallback ? " · fallback search of the query" : ""}` : ` ${c.status}`));
    }
    if (c.children && c.children.length) li.append(renderChildren(c.children));
    ul.append(li);
  }
  return ul;
}

// ---- runs ----
function loadRuns() {
  api("/api/runs").then((r) => {
    const sel = $("runs-list");
    const keep = sel.value;
    const when = (t) => new Date(t * 1000).toLocaleString();
    // a question asked again is one entry: its newest run, with how often it was asked
    const name = (x) => `${x.query ? `"${x.query.slice(0, 60)}${x.query.length > 60 ? "…" : ""}" · ` : ""}${x.path}  (${x.kind}, ${when(x.mtime)}` +
      `${x.repeats > 1 ? `, asked ${x.repeats}×, newest shown` : ""})`;
    sel.replaceChildren(...r.runs.map((x) => el("option", { value: x.path }, name(x))));
    if (keep && r.runs.some((x) => x.path === keep)) sel.value = keep;
    // the tab opens on a run, the newest, not on an empty table
    if (!openedPath && r.runs.length) { sel.value = r.runs[0].path; openRun(r.runs[0].path); }
    // a second run to put beside the first (two page searches, two evals): "with"
    const other = $("compare-run"), keepOther = other.value;
    other.replaceChildren(el("option", { value: "" }, "(no other run)"), ...r.runs.map((x) => el("option", { value: x.path }, name(x))));
    other.value = keepOther;
  }).catch(showError);
}
let openedPath = null;
$("open-run").onclick = () => openRun($("run-path").value.trim() || $("runs-list").value);
$("runs-list").onchange = () => { $("run-path").value = ""; openRun($("runs-list").value); };  // opens at once
$("compare-run").onchange = () => { if (openedPath) openRun(openedPath); };

function openRun(path) {
  showError(null);
  openedPath = path;
  const other = $("compare-run").value;
  const withRun = other && other !== path ? `&with=${encodeURIComponent(other)}` : "";
  api(`/api/run?path=${encodeURIComponent(path)}${withRun}`).then((r) => {
    runData = r;
    const label = (n) => (r.info && r.info[n] ? r.info[n].label : n);
    $("run-kind").textContent = `${r.kind}: ${r.queries.length} quer${r.queries.length === 1 ? "y" : "ies"}, rows ${r.rows.map(label).join(", ")}`;
    // two runs: the first row of each, side by side; one run: its first two rows
    const firstOf = r.paths ? r.paths.map((_, i) => r.rows.find((n) => n.startsWith(`${i + 1}:`))) : r.rows.slice(0, 2);
    for (const [id, i] of [["compare-a", 0], ["compare-b", 1]]) {
      $(id).replaceChildren(...r.rows.map((n) => el("option", { value: n }, label(n))));
      $(id).value = firstOf[i] || r.rows[Math.min(i, r.rows.length - 1)];
    }
    renderRunTable();
    $("compare").replaceChildren();
  }).catch(showError);
}
$("compare-a").onchange = $("compare-b").onchange = () => renderRunTable();

const SHORT = { crawler_recall: "crawler R", precision: "P", recall: "R", recall_at_20: "R@20", recall_at_50: "R@50",
  recall_at_100: "R@100", n_queue: "queue", n_returned: "selected", actions: "actions", sessions: "sessions",
  gen_tokens: "tokens", wall_s: "s" };
function renderRunTable() {
  const r = runData; if (!r) return;
  const rows = [$("compare-a").value, $("compare-b").value].filter((v, i, a) => v && a.indexOf(v) === i);
  const t = $("run-table");
  // each row's own columns: a search-only row has no crawler recall, precision, actions...
  const cols = Object.fromEntries(rows.map((n) => [n, r.columns.filter((c) => r.queries.some((q) => (q.rows[n] || {})[c] != null))]));
  const label = (n) => (r.info && r.info[n] ? r.info[n].label : n);
  const top = el("tr", {}, el("th", { rowspan: 2, class: "q" }, "query"),
    ...rows.map((n) => el("th", { colspan: Math.max(cols[n].length, 1), class: "rowname", "data-row": n }, label(n))));
  const sub = el("tr", {}, ...rows.flatMap((n) => (cols[n].length ? cols[n] : [""]).map((c) => el("th", { title: (r.column_help || {})[c] || c }, SHORT[c] || c))));
  // the mean of every column over the queries, with eval pasa's 95 % interval where the run has one
  const ci = (m) => (m && m.ci ? ` (${fmt(m.ci[0])}–${fmt(m.ci[1])})` : "");
  const mean = el("tr", { class: "mean" }, el("td", { class: "q" }, el("b", {}, `mean of ${r.queries.length} quer${r.queries.length === 1 ? "y" : "ies"}`)),
    ...rows.flatMap((n) => (cols[n].length ? cols[n] : [""]).map((c) => {
      const m = ((r.means || {})[n] || {})[c];
      return el("td", { class: "num" }, el("b", {}, m ? fmt(m.mean) : ""), m ? ci(m) : "");
    })));
  t.replaceChildren(top, sub, mean);
  // what the columns mean, visible under the table (not only on hover)
  const used = [...new Set(rows.flatMap((n) => cols[n]))];
  $("run-legend").replaceChildren(...used.map((c) => el("span", { class: "legend" }, el("b", {}, SHORT[c] || c), " = ",
    ((r.column_help || {})[c] || c).replace(/^[^:]*: /, ""))),
    ...rows.filter((n) => (r.blank || {})[n] && r.blank[n].length).map((n) => el("span", { class: "legend" },
      `${label(n)}: blank = not applicable (${r.blank[n].map((c) => SHORT[c] || c).join(", ")})`)));
  for (const q of r.queries) {
    const tr = el("tr", { class: "pick", "data-qid": q.qid }, el("td", { class: "q" }, q.query || q.qid),
      ...rows.flatMap((n) => (cols[n].length ? cols[n] : [""]).map((c) => el("td", { class: "num" }, fmt((q.rows[n] || {})[c])))));
    tr.onclick = () => { for (const x of t.querySelectorAll("tr.current")) x.classList.remove("current"); tr.classList.add("current"); compare(q, rows); };
    t.append(tr);
  }
}

function compare(q, rows) {
  const box = $("compare");
  const label = (n) => (runData.info && runData.info[n] ? runData.info[n].label : n);
  box.replaceChildren(...rows.map((n) => el("div", { class: "col tree", "data-row": n }, el("h2", {}, label(n)), el("div", { class: "meta" }, "loading…"))));
  const lists = {};
  rows.forEach((n, i) => {
    const col = box.children[i];
    const m = q.rows[n] || {};
    const extra = [m.stopped_by ? `stopped by ${[].concat(m.stopped_by).filter((s) => s).join(", ") || "–"}` : "",
      m.grammar_errors && Object.keys(m.grammar_errors).length ? `grammar errors ${JSON.stringify(m.grammar_errors)}` : ""].filter(Boolean).join(" · ");
    if (!runData.trees[n]) { col.children[1].textContent = `this row kept no trajectories${extra ? " · " + extra : ""}`; return; }
    // each row reads its own run, row and query (a merged table of two runs keeps them per row and cell)
    const info = (runData.info || {})[n] || {};
    const path = info.path || runData.path, row = info.row || n, qid = m.qid || q.qid;
    api(`/api/run/tree?path=${encodeURIComponent(path)}&row=${encodeURIComponent(row)}&qid=${encodeURIComponent(qid)}`)
      .then((t) => {
        const parts = [];
        if (t.ranked && t.ranked.length) { lists[n] = t.ranked; parts.push(el("ol", { class: "ranked" })); }
        col.children[1].replaceWith(...parts, ...t.trees.map(renderTree));
        markShared(box, rows, lists);
      })
      .catch((e) => { col.children[1].textContent = e.message; });
  });
}
// the final lists of two searches, top 10 each, a paper in both marked "in both"
function markShared(box, rows, lists) {
  rows.forEach((n, i) => {
    const ol = box.children[i].querySelector("ol.ranked");
    if (!ol || !lists[n]) return;
    const others = new Set(rows.filter((o) => o !== n && lists[o]).flatMap((o) => lists[o].map((p) => p.paper_id)));
    ol.replaceChildren(el("lh", { class: "meta" }, "the final list, top 10"), ...lists[n].map((p) => el("li", { class: `ranked-paper${p.gold ? " gold" : ""}` },
      p.gold ? el("span", { class: "gold", title: "a gold paper of this query" }, "★ ") : "", paperLink(p.paper_id, p.title),
      el("span", { class: "meta" }, ` ${p.score == null ? "" : `P ${p.score.toFixed(2)}`}${p.selected ? " · selected" : ""}`),
      others.has(p.paper_id) ? el("span", { class: "shared" }, " · in both") : "")));
  });
}

loadSetting();

// "why?": the decision the list made (and its score), then the reason; a reason that argues the other way says so
function rationaleText(j) {
  const decision = j.unmarked ? "nothing is marked" : j.decision == null ? "(no True/False decision parsed)" : j.decision ? "True" : "False";
  const score = j.score == null ? "" : ` (P ${j.score.toFixed(2)})`;
  const against = j.disagrees ? " The reason below argues the other way; the decision is the score's:" : "";
  return `Selector: ${decision}${score}.${against} ${j.rationale}`;
}
