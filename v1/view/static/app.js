// v1 view: the page. Every piece of run data reaches the DOM as text (textContent), never as HTML.
"use strict";

const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
let timers = [];
let routeToken = 0;

// ---------- small helpers ----------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) >= 1000 ? value.toFixed(0) : value.toFixed(digits);
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1 ? value.toFixed(2) + " s" : (value * 1000).toFixed(0) + " ms";
}

function pretty(value) {
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch (e) { return value; }
  }
  return JSON.stringify(value, null, 2);
}

function href(view, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return "#/" + view + (text ? "?" + text : "");
}

function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

function message(kind, text) { return el("div", { class: "message " + kind }, text); }

function card(label, value, title) {
  return el("div", { class: "card", title: title || null }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}

function keyValueTable(entries) {
  return el("table", {}, el("tbody", {}, entries.filter(([, v]) => v !== undefined).map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", {}, v instanceof Node ? v : fmt(v))))));
}

function setCrumbs(...parts) {
  replace(crumbs, ...parts.map(([text, link]) => link ? el("a", { href: link }, text) : el("span", {}, text)));
}

async function api(path) {
  let response;
  try {
    response = await fetch(path, { cache: "no-store" });
  } catch (error) {
    throw new Error("the viewer server is not answering (was `v1 view` stopped?)");
  }
  let data = null;
  try { data = await response.json(); } catch (error) { data = null; }
  if (!response.ok || data === null) {
    throw new Error((data && data.error) || `the server answered HTTP ${response.status}`);
  }
  return data;
}

function every(ms, fn) { timers.push(setInterval(fn, ms)); }

function debounce(fn, ms) {
  let handle = null;
  return (...args) => { clearTimeout(handle); handle = setTimeout(() => fn(...args), ms); };
}

// ---------- charts ----------

function histogramChart(title, hist) {
  const box = el("div", { class: "panel bars" }, el("h3", {}, title));
  if (!hist || !hist.counts || hist.counts.length === 0) return append(box, [el("p", { class: "muted" }, "no values")]);
  const width = 300, height = 110, pad = 18;
  const chart = svg("svg", { width, height: height + pad, viewBox: `0 0 ${width} ${height + pad}`, role: "img" });
  const top = Math.max(...hist.counts);
  const barWidth = width / hist.counts.length;
  hist.counts.forEach((count, i) => {
    const h = top ? (count / top) * (height - 14) : 0;
    const low = hist.min + ((hist.max - hist.min) * i) / hist.counts.length;
    const high = hist.min + ((hist.max - hist.min) * (i + 1)) / hist.counts.length;
    const rect = svg("rect", { x: i * barWidth + 1, y: height - h, width: Math.max(barWidth - 2, 1), height: h, fill: "#60a5fa" });
    rect.appendChild(svg("title", {}, `${fmt(low)} – ${fmt(high)}: ${count}`));
    chart.appendChild(rect);
    if (count && hist.counts.length <= 12) chart.appendChild(svg("text", { x: i * barWidth + barWidth / 2, y: height - h - 3, "text-anchor": "middle", "font-size": 10, fill: "#374151" }, count));
  });
  chart.appendChild(svg("line", { x1: 0, y1: height, x2: width, y2: height, stroke: "#9ca3af" }));
  chart.appendChild(svg("text", { x: 0, y: height + 13, "font-size": 11, fill: "#6b7280" }, fmt(hist.min)));
  chart.appendChild(svg("text", { x: width, y: height + 13, "font-size": 11, fill: "#6b7280", "text-anchor": "end" }, fmt(hist.max)));
  box.appendChild(chart);
  return box;
}

function lineChart(title, steps, key) {
  const points = steps.filter((s) => typeof s[key] === "number" && isFinite(s[key])).map((s) => [s.step ?? 0, s[key]]);
  const box = el("div", { class: "panel chart" }, el("h3", {}, title));
  if (points.length === 0) return append(box, [el("p", { class: "muted" }, `no ${key} in metrics.jsonl`)]);
  const width = 300, height = 130, left = 44, bottom = 16;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => left + (x1 === x0 ? (width - left) / 2 : ((x - x0) / (x1 - x0)) * (width - left - 4));
  const sy = (y) => 6 + (y1 === y0 ? (height - 12) / 2 : (1 - (y - y0) / (y1 - y0)) * (height - 12));
  const chart = svg("svg", { width, height: height + bottom, viewBox: `0 0 ${width} ${height + bottom}`, role: "img" });
  chart.appendChild(svg("line", { x1: left, y1: height, x2: width, y2: height, stroke: "#9ca3af" }));
  chart.appendChild(svg("line", { x1: left, y1: 0, x2: left, y2: height, stroke: "#9ca3af" }));
  chart.appendChild(svg("polyline", { points: points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" "), fill: "none", stroke: "#2563eb", "stroke-width": 1.5 }));
  if (points.length <= 60) points.forEach((p) => {
    const dot = svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2, fill: "#2563eb" });
    dot.appendChild(svg("title", {}, `step ${p[0]}: ${fmt(p[1], 4)}`));
    chart.appendChild(dot);
  });
  chart.appendChild(svg("text", { x: left - 4, y: 10, "font-size": 10, fill: "#6b7280", "text-anchor": "end" }, fmt(y1)));
  chart.appendChild(svg("text", { x: left - 4, y: height, "font-size": 10, fill: "#6b7280", "text-anchor": "end" }, fmt(y0)));
  chart.appendChild(svg("text", { x: left, y: height + 13, "font-size": 10, fill: "#6b7280" }, "step " + x0));
  chart.appendChild(svg("text", { x: width, y: height + 13, "font-size": 10, fill: "#6b7280", "text-anchor": "end" }, "step " + x1));
  box.appendChild(chart);
  return box;
}

// ---------- runs list ----------

const RUN_COLUMNS = [
  ["name", "Run"], ["env", "Env"], ["model", "Model"], ["date", "Date"], ["status", "Status"],
  ["rollouts", "Rollouts", true], ["avg_reward", "Mean reward", true], ["pass1", "pass@1", true], ["passk", "pass@k", true], ["errors", "Errors", true],
];

function passK(row) {
  const ks = Object.keys(row.pass_at_k || {}).map(Number).sort((a, b) => a - b);
  if (ks.length === 0) return [null, null, null];
  const last = ks[ks.length - 1];
  return [row.pass_at_k["1"] ?? null, row.pass_at_k[String(last)], last];
}

async function viewRuns(params, token) {
  setCrumbs(["runs"]);
  const state = { filter: params.get("filter") || "", sort: params.get("sort") || "-date", data: null };
  const tableBox = el("div", {});
  const problems = el("div", {});
  const filter = el("input", { type: "search", placeholder: "filter by env, model, folder…", value: state.filter, "aria-label": "filter runs",
    oninput: (e) => { state.filter = e.target.value; render(); } });
  replace(app, el("h1", {}, "Runs"), problems, el("div", { class: "toolbar" }, filter, el("span", { class: "muted", id: "run-count" })), tableBox);

  function value(row, key) {
    if (key === "pass1") return passK(row)[0];
    if (key === "passk") return passK(row)[1];
    return row[key];
  }

  function render() {
    const data = state.data;
    if (!data) return;
    replace(problems, ...data.problems.map((p) => message("error", p.message)));
    const needle = state.filter.toLowerCase();
    let rows = data.runs.filter((r) => !needle || [r.name, r.env, r.model, r.path].some((v) => v && String(v).toLowerCase().includes(needle)));
    const key = state.sort.replace(/^-/, ""), sign = state.sort.startsWith("-") ? -1 : 1;
    rows = rows.slice().sort((a, b) => {
      const x = value(a, key), y = value(b, key);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sign;
    });
    document.getElementById("run-count").textContent = `${rows.length} of ${data.runs.length} run(s)`;
    if (data.runs.length === 0) {
      replace(tableBox, message("info", "No runs found. Run `v1 eval ...` or `v1 train ...` and point `v1 view` at its output folder."));
      return;
    }
    const head = el("tr", {}, RUN_COLUMNS.map(([k, label, num]) => el("th", {
      class: "sortable" + (num ? " num" : ""), onclick: () => { state.sort = state.sort === "-" + k ? k : "-" + k; render(); },
    }, label + (key === k ? (sign < 0 ? " ▼" : " ▲") : ""))));
    const body = rows.map((r) => {
      const [p1, pk, k] = passK(r);
      const link = href("run", { id: r.id });
      return el("tr", { class: "clickable", "data-run": r.id, onclick: (e) => { if (e.target.tagName !== "A") location.hash = link; } },
        el("td", {}, el("a", { href: link }, r.name), r.problem ? el("div", { class: "bad" }, r.problem) : null, el("div", { class: "muted" }, r.kind)),
        el("td", {}, r.env ?? "–"), el("td", {}, r.model ?? "–"), el("td", {}, r.date ? String(r.date).replace("T", " ").slice(0, 19) : "–"),
        el("td", {}, r.status ? el("span", { class: "badge " + r.status }, r.status) : "–"),
        el("td", { class: "num" }, r.kind === "train" ? `${fmt(r.steps)} steps` : (r.planned ? `${fmt(r.rollouts)} / ${fmt(r.planned)}` : fmt(r.rollouts))),
        el("td", { class: "num" }, fmt(r.avg_reward)), el("td", { class: "num" }, fmt(p1)),
        el("td", { class: "num" }, pk === null ? "–" : `${fmt(pk)} (k=${k})`),
        el("td", { class: "num" + (r.errors ? " bad" : "") }, fmt(r.errors)));
    });
    replace(tableBox, el("table", { id: "runs" }, el("thead", {}, head), el("tbody", {}, body)));
  }

  async function load() {
    try {
      state.data = await api("/api/runs");
      if (token === routeToken) render();
    } catch (error) {
      if (token === routeToken) replace(tableBox, message("error", error.message));
    }
  }
  await load();
  every(5000, load);
}

// ---------- one run ----------

function runCards(detail) {
  const meta = detail.metadata || {};
  const results = detail.results;
  const cards = [card("env", meta.env_id ?? meta.name ?? "–"), card("model", meta.model ?? "–")];
  if (results) {
    const s = results.summary;
    cards.push(card("rollouts", results.planned ? `${results.count} / ${results.planned}` : String(results.count)));
    cards.push(card("mean reward", fmt(s.avg_reward)));
    for (const [k, v] of Object.entries(s.pass_at_k || {})) cards.push(card(`pass@${k}`, fmt(v), `reward >= ${s.pass_threshold}`));
    cards.push(card("errors", `${s.num_errors} (${fmt(100 * s.avg_error, 1)}%)`));
    if (s.num_retries) cards.push(card("retries", String(s.num_retries)));
    if (meta.time_ms !== undefined) cards.push(card("wall time", seconds(meta.time_ms / 1000)));
  }
  return el("div", { class: "cards" }, cards);
}

function runMessages(detail) {
  const out = [];
  if (detail.metadata_problem) out.push(message("error", `metadata.json: ${detail.metadata_problem.replace(/^metadata\.json: /, "")}. The rollouts below are read from results.jsonl.`));
  const r = detail.results;
  if (r) {
    if (r.indexing) out.push(message("info", `Reading results.jsonl: ${(r.indexed_bytes / 2 ** 20).toFixed(0)} of ${(r.size_bytes / 2 ** 20).toFixed(0)} MiB, ${r.count} rollouts so far…`));
    if (r.missing) out.push(message("info", "No results.jsonl yet: no rollout has finished, or the run was started with --no-save."));
    if (r.bad_line_count) out.push(message("warn", `results.jsonl: ${r.bad_line_count} line(s) are not JSON objects and are left out (line ${r.bad_lines.join(", ")}${r.bad_line_count > r.bad_lines.length ? ", …" : ""}).`));
    if (r.partial_bytes) out.push(message(r.status === "running" ? "info" : "warn", `results.jsonl: the last line is incomplete (${r.partial_bytes} bytes without a line end): ${r.status === "running" ? "it is being written" : "the run was cut short; `v1 eval --resume` drops and redoes it"}.`));
    if (r.status === "running") out.push(message("info", "This run is still being written; the page follows it."));
  }
  const t = detail.training;
  if (t && t.problem) out.push(message("error", t.problem));
  if (t && t.bad_lines) out.push(message("warn", `metrics.jsonl: ${t.bad_lines} line(s) could not be read and are left out.`));
  return out;
}

function metadataPanel(meta) {
  if (!meta) return null;
  const version = meta.version_info || {};
  return el("div", { class: "panel" }, el("h3", {}, "metadata.json"), keyValueTable([
    ["env", meta.env_id ?? meta.name], ["model", meta.model], ["base url", meta.base_url], ["date", meta.date],
    ["examples × rollouts", `${fmt(meta.num_examples)} × ${fmt(meta.rollouts_per_example)}`],
    ["sampling args", meta.sampling_args ? JSON.stringify(meta.sampling_args) : undefined],
    ["scoring", meta.scoring ? `${(meta.scoring.rollout || []).join(", ") || "–"}; advantage: ${meta.scoring.advantage ?? "–"}` : undefined],
    ["pass threshold", meta.pass_threshold], ["max retries", meta.max_retries],
    ["version", version.vf_version ? `v1 ${version.vf_version}${version.vf_commit ? " @ " + String(version.vf_commit).slice(0, 10) : ""}` : undefined],
    ["folder", meta.path_to_save],
  ]), el("details", {}, el("summary", {}, "all of metadata.json"), el("pre", {}, JSON.stringify(meta, null, 2))));
}

function countsTable(title, counts) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  return el("div", { class: "panel" }, el("h3", {}, title), entries.length ? el("table", {}, el("tbody", {},
    entries.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "num" }, fmt(v)))))) : el("p", { class: "muted" }, "none"));
}

function runSummary(detail) {
  const parts = [...runMessages(detail), runCards(detail)];
  const r = detail.results;
  if (r) {
    const s = r.summary;
    const charts = [histogramChart("reward", r.histograms.reward)];
    for (const [name, hist] of Object.entries(r.histograms.metrics)) charts.push(histogramChart("metric: " + name, hist));
    charts.push(histogramChart("turns per rollout", r.histograms.turns), histogramChart("seconds per rollout", r.histograms.seconds));
    parts.push(el("h2", {}, "Distributions"), el("div", { class: "grid" }, charts));
    const errorRows = r.errors.map((g) => el("tr", {}, el("td", {}, el("a", { href: href("run", { id: detail.id, error: g.type }) }, g.type)),
      el("td", { class: "num" }, g.count), el("td", {}, el("div", { class: "text" }, g.message))));
    const timing = Object.entries(s.avg_timing || {}).map(([k, v]) => [k, seconds(v)]);
    const usage = Object.entries(s.usage || {}).map(([k, v]) => [k + " (mean)", fmt(v, 1)]);
    parts.push(el("h2", {}, "Outcomes"), el("div", { class: "grid" },
      countsTable("stop conditions", s.stop_conditions),
      el("div", { class: "panel" }, el("h3", {}, "errors by type"), errorRows.length ? el("table", { id: "errors" }, el("thead", {},
        el("tr", {}, el("th", {}, "type"), el("th", { class: "num" }, "count"), el("th", {}, "first message"))), el("tbody", {}, errorRows)) : el("p", { class: "muted" }, "no errors")),
      el("div", { class: "panel" }, el("h3", {}, "timing per rollout (mean)"), timing.length ? keyValueTable(timing) : el("p", { class: "muted" }, "no timing"),
        usage.length ? el("h3", {}, "tokens per rollout") : null, usage.length ? keyValueTable(usage) : null),
      countsTable("mean metrics", s.avg_metrics)));
  }
  const t = detail.training;
  if (t) {
    parts.push(el("h2", {}, "Training"));
    const keys = [["reward", "reward"], ["loss", "loss"], ["kl", "KL"], ["entropy", "entropy"]];
    for (const extra of ["mismatch_kl", "grad_norm"]) if (t.steps.some((s) => typeof s[extra] === "number")) keys.push([extra, extra]);
    parts.push(el("div", { class: "grid", id: "training-curves" }, keys.map(([k, label]) => lineChart(label + " per step", t.steps, k))));
    const summary = t.summary ? Object.entries(t.summary).map(([k, v]) => [k, fmt(v)]) : [];
    parts.push(el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h3", {}, "summary.json"), summary.length ? keyValueTable(summary) : el("p", { class: "muted" }, "not written yet (the run is going, or was stopped)")),
      el("div", { class: "panel" }, el("h3", {}, "checkpoints"), t.checkpoints.length ? el("ul", {}, t.checkpoints.map((c) => el("li", {}, c))) : el("p", { class: "muted" }, "none")),
      el("div", { class: "panel" }, el("h3", {}, "steps"), el("p", {}, `${t.steps.length} step(s) in metrics.jsonl`),
        t.steps.length ? el("details", {}, el("summary", {}, "last step"), el("pre", {}, JSON.stringify(t.steps[t.steps.length - 1], null, 2))) : null)));
  }
  if (detail.metadata) parts.push(el("h2", {}, "Settings"), metadataPanel(detail.metadata));
  return parts;
}

async function viewRun(params, token) {
  const id = params.get("id");
  const state = { q: params.get("q") || "", error: params.get("error") || "", stop: params.get("stop") || "", sort: params.get("sort") || "position", offset: 0, detail: null };
  const summaryBox = el("div", { id: "run-summary" });
  const listBox = el("div", { id: "rollouts" });
  const title = el("h1", {}, id);
  replace(app, title, summaryBox, listBox);
  let detail;
  try {
    detail = await api("/api/run?id=" + encodeURIComponent(id));
  } catch (error) {
    setCrumbs(["runs", "#/"], ["?"]);
    replace(summaryBox, message("error", error.message));
    return;
  }
  if (token !== routeToken) return;
  setCrumbs(["runs", "#/"], [detail.name]);
  title.textContent = detail.name;
  title.appendChild(el("div", { class: "muted", style: "font-size:12px;font-weight:400" }, detail.path));
  replace(summaryBox, ...runSummary(detail));
  state.detail = detail;
  if (!detail.results) {
    if (detail.training && !detail.training.summary) {
      every(3000, async () => {
        let fresh;
        try { fresh = await api("/api/run?id=" + encodeURIComponent(id)); } catch (error) { return; }
        if (token === routeToken) replace(summaryBox, ...runSummary(fresh));
      });
    }
    return;
  }

  const search = el("input", { type: "search", placeholder: "search rollouts (any text in the saved JSON)…", value: state.q, size: 40, "aria-label": "search rollouts" });
  search.addEventListener("input", debounce(() => { state.q = search.value; state.offset = 0; loadList(); }, 350));
  const errorSelect = el("select", { "aria-label": "error filter", onchange: (e) => { state.error = e.target.value; state.offset = 0; loadList(); } },
    el("option", { value: "" }, "all rollouts"), el("option", { value: "any" }, "with an error"), el("option", { value: "none" }, "without errors"),
    detail.results.errors.map((g) => el("option", { value: g.type }, "error: " + g.type)));
  errorSelect.value = state.error;
  const stopSelect = el("select", { "aria-label": "stop condition", onchange: (e) => { state.stop = e.target.value; state.offset = 0; loadList(); } },
    el("option", { value: "" }, "any stop condition"), Object.keys(detail.results.summary.stop_conditions || {}).map((s) => el("option", { value: s }, "stop: " + s)));
  stopSelect.value = state.stop;
  const sortSelect = el("select", { "aria-label": "sort", onchange: (e) => { state.sort = e.target.value; state.offset = 0; loadList(); } },
    [["position", "in file order"], ["-reward", "reward, high first"], ["reward", "reward, low first"], ["example", "by example"],
      ["-turns", "most turns"], ["-seconds", "slowest"], ["-tokens", "most output tokens"], ["-tool_calls", "most tool calls"]].map(([v, l]) => el("option", { value: v }, l)));
  sortSelect.value = state.sort;
  const compare = detail.same_env && detail.same_env.length ? el("select", { "aria-label": "compare with", onchange: (e) => { if (e.target.value) location.hash = href("compare", { a: id, b: e.target.value }); } },
    el("option", { value: "" }, "compare with…"), detail.same_env.map((other) => el("option", { value: other }, other))) : null;
  const tableBox = el("div", {});
  const pager = el("div", { class: "pager" });
  replace(listBox, el("h2", {}, "Rollouts"), el("div", { class: "toolbar" }, search, errorSelect, stopSelect, sortSelect, compare), pager, tableBox);

  async function loadList() {
    const query = { id, offset: state.offset, limit: 50, q: state.q, error: state.error, stop: state.stop, sort: state.sort };
    let page;
    try {
      page = await api("/api/rollouts?" + new URLSearchParams(Object.entries(query).filter(([, v]) => v !== "")).toString());
    } catch (error) {
      replace(tableBox, message("error", error.message));
      return;
    }
    if (token !== routeToken) return;
    const rows = page.rows.map((r) => {
      const link = href("rollout", { id, n: r.n });
      return el("tr", { class: "clickable", "data-n": r.n, onclick: (e) => { if (e.target.tagName !== "A") location.hash = link; } },
        el("td", { class: "num" }, el("a", { href: link }, "#" + r.n)), el("td", {}, fmt(r.example_id)), el("td", { class: "num" }, fmt(r.rollout_index)),
        el("td", { class: "num" }, fmt(r.reward)), el("td", {}, r.stop ?? "–"),
        el("td", {}, r.error ? el("span", { class: "badge error", title: r.error_message }, r.error) : ""),
        el("td", { class: "num" }, r.turns), el("td", { class: "num" }, r.tool_calls), el("td", { class: "num" }, seconds(r.seconds)),
        el("td", {}, el("div", { class: "text" }, r.prompt)), el("td", {}, el("div", { class: "text" }, r.answer)));
    });
    replace(tableBox, page.total === 0 ? message("info", page.count === 0 ? "No rollouts saved yet." : "No rollout matches.") :
      el("table", { id: "rollout-table" }, el("thead", {}, el("tr", {}, ["", "example", "rollout", "reward", "stop", "error", "turns", "tool calls", "time", "prompt", "answer"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
    const last = Math.min(state.offset + page.rows.length, page.total);
    replace(pager, 
      el("button", { disabled: state.offset === 0, onclick: () => { state.offset = Math.max(0, state.offset - 50); loadList(); } }, "‹ previous"),
      el("span", { class: "muted" }, page.total ? `${state.offset + 1}–${last} of ${page.total}${page.total !== page.count ? ` matching (${page.count} in all)` : ""}` : ""),
      el("button", { disabled: last >= page.total, onclick: () => { state.offset += 50; loadList(); } }, "next ›"));
  }
  await loadList();
  const following = (d) => d.results && (d.results.status === "running" || d.results.indexing);
  if (following(detail)) {
    every(detail.results.indexing ? 1000 : 3000, async () => {
      let fresh;
      try { fresh = await api("/api/run?id=" + encodeURIComponent(id)); } catch (error) { return; }
      if (token !== routeToken) return;
      replace(summaryBox, ...runSummary(fresh));
      if (!fresh.results || fresh.results.count !== state.detail.results.count) loadList();
      state.detail = fresh;
    });
  }
}

// ---------- one rollout ----------

function contentNodes(content) {
  if (content === null || content === undefined) return [];
  if (typeof content === "string") return [el("div", { class: "text" }, content)];
  if (Array.isArray(content)) {
    return content.map((part) => {
      if (part && part.type === "text") return el("div", { class: "text" }, part.text ?? "");
      if (part && (part.type === "image_url" || part.type === "image")) return el("div", { class: "muted" }, "[image]");
      return el("pre", {}, JSON.stringify(part, null, 2));
    });
  }
  return [el("pre", {}, JSON.stringify(content, null, 2))];
}

function messageNode(msg, toolNames) {
  const role = msg.role || "message";
  const body = el("div", { class: "body" });
  const reasoning = msg.reasoning_content ?? msg.reasoning ?? msg.thinking;
  if (reasoning) body.appendChild(el("details", { class: "reasoning" }, el("summary", {}, `reasoning (${String(reasoning).length} chars)`), el("div", { class: "text" }, reasoning)));
  append(body, contentNodes(msg.content));
  for (const call of msg.tool_calls || []) {
    const fn = call.function || call;
    toolNames[call.id] = fn.name;
    body.appendChild(el("div", { class: "toolcall" }, el("div", {}, "tool call ", el("span", { class: "name" }, fn.name ?? "?"), el("span", { class: "muted" }, call.id ? `  (${call.id})` : "")),
      el("pre", {}, pretty(fn.arguments ?? ""))));
  }
  if (!body.childNodes.length) body.appendChild(el("span", { class: "muted" }, "(empty)"));
  let label = role;
  if (role === "tool") label = `tool result${msg.tool_call_id && toolNames[msg.tool_call_id] ? ": " + toolNames[msg.tool_call_id] : ""}`;
  return el("div", { class: "msg " + role }, el("div", { class: "role" }, label), body);
}

function logprobColor(logprob) {
  const p = Math.exp(Math.max(-20, Math.min(0, logprob)));
  return `hsl(${Math.round(120 * p)}, 75%, ${Math.round(88 - 10 * (1 - p))}%)`;
}

function tokenView(step, i) {
  const t = step.tokens;
  const ids = t.completion_ids || [], logprobs = t.completion_logprobs || [], mask = t.completion_mask || [];
  const inLoss = mask.filter((m) => m).length;
  const spans = ids.map((id, j) => {
    const lp = logprobs[j];
    const masked = mask.length && !mask[j];
    return el("span", { class: "tok" + (masked ? " masked" : ""), style: typeof lp === "number" ? `background:${logprobColor(lp)}` : null,
      title: `token ${j}: id ${id}${typeof lp === "number" ? `, logprob ${lp.toFixed(4)}, p ${Math.exp(lp).toFixed(3)}` : ""}, ${masked ? "not in the loss" : "in the loss"}` }, id);
  });
  return el("div", { class: "panel" }, el("h3", {}, `step ${i + 1}: ${ids.length} completion token(s), ${inLoss} in the loss mask; prompt ${(t.prompt_ids || []).length} token(s)`
    + (t.is_truncated ? " (truncated)" : "") + (t.overlong_prompt ? " (overlong prompt)" : "")), el("div", { class: "tokens" }, spans));
}

async function viewRollout(params, token) {
  const id = params.get("id"), n = params.get("n");
  let data;
  try {
    data = await api(`/api/rollout?id=${encodeURIComponent(id)}&n=${encodeURIComponent(n)}`);
  } catch (error) {
    setCrumbs(["runs", "#/"], [id, href("run", { id })], ["rollout"]);
    replace(app, message("error", error.message));
    return;
  }
  if (token !== routeToken) return;
  const o = data.output;
  setCrumbs(["runs", "#/"], [data.name, href("run", { id })], [`rollout #${data.n}`]);
  const timing = o.timing || {};
  const usage = o.token_usage || {};
  const trajectory = Array.isArray(o.trajectory) ? o.trajectory : [];
  const parts = [el("h1", {}, `Rollout #${data.n}`, el("span", { class: "muted", style: "font-size:13px;font-weight:400" }, `  of ${data.count} · example ${fmt(o.example_id)}, rollout ${fmt(o.rollout_index)}`)),
    el("div", { class: "pager" },
      el("a", { href: data.n > 0 ? href("rollout", { id, n: data.n - 1 }) : null }, "‹ previous"),
      el("a", { href: data.n + 1 < data.count ? href("rollout", { id, n: data.n + 1 }) : null }, "next ›"),
      el("a", { href: href("run", { id, example: "" }) }, "back to the run"))];
  parts.push(el("div", { class: "cards" }, card("reward", fmt(o.reward)), card("advantage", fmt(o.advantage)), card("stop", o.stop_condition ?? "–"),
    card("turns", String(trajectory.length)), card("time", seconds(timing.total)),
    card("tokens in / out", `${fmt(usage.input_tokens, 0)} / ${fmt(usage.output_tokens, 0)}`)));
  if (o.error) {
    const e = typeof o.error === "object" ? o.error : { message: o.error };
    parts.push(el("div", { class: "message error", id: "rollout-error" }, el("strong", {}, `${e.type ?? "error"}${e.where ? ` (in ${e.where})` : ""}: `), el("div", { class: "text" }, e.message ?? ""),
      e.traceback ? el("details", {}, el("summary", {}, "traceback"), el("pre", {}, e.traceback)) : null));
  }
  const weights = data.reward_weights || {};
  const metricRows = Object.entries(o.metrics || {}).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "num" }, fmt(v, 4)),
    el("td", { class: "num" }, k in weights ? fmt(weights[k]) : "–"), el("td", { class: "num" }, k in weights && typeof v === "number" ? fmt(v * weights[k], 4) : "–")));
  parts.push(el("h2", {}, "Reward"), el("table", { id: "reward" }, el("thead", {}, el("tr", {}, el("th", {}, "metric / reward function"), el("th", { class: "num" }, "value"), el("th", { class: "num" }, "weight"), el("th", { class: "num" }, "weighted"))),
    el("tbody", {}, metricRows, el("tr", {}, el("th", {}, "reward"), el("th", { class: "num" }, fmt(o.reward, 4)), el("th", {}), el("th", {})))));
  if (o.answer !== undefined && o.answer !== null && o.answer !== "") parts.push(el("p", {}, el("strong", {}, "expected answer: "), el("span", { class: "text" }, typeof o.answer === "string" ? o.answer : JSON.stringify(o.answer))));

  const toolNames = {};
  const conversation = el("div", { id: "conversation" });
  for (const msg of Array.isArray(o.prompt) ? o.prompt : []) conversation.appendChild(messageNode(msg, toolNames));
  if (typeof o.prompt === "string") conversation.appendChild(messageNode({ role: "prompt", content: o.prompt }, toolNames));
  if (Array.isArray(o.completion)) for (const msg of o.completion) conversation.appendChild(messageNode(msg, toolNames));
  else if (typeof o.completion === "string") conversation.appendChild(messageNode({ role: "completion", content: o.completion }, toolNames));
  parts.push(el("h2", {}, "Conversation"), conversation);

  const stepRows = trajectory.map((step, i) => {
    const extras = step.extras || {}, response = step.response || {}, u = response.usage || {}, m = response.message || {};
    const duration = typeof extras.end === "number" && typeof extras.start === "number" ? extras.end - extras.start : null;
    return el("tr", {}, el("td", { class: "num" }, i + 1), el("td", { class: "num" }, seconds(duration)), el("td", { class: "num" }, fmt(u.prompt_tokens)),
      el("td", { class: "num" }, fmt(u.completion_tokens)), el("td", {}, m.finish_reason ?? "–"), el("td", {}, (m.tool_calls || []).map((c) => c.name).join(", ")),
      el("td", {}, extras.dialect ?? "–"), el("td", {}, step.tokens ? "yes" : "–"));
  });
  if (stepRows.length) parts.push(el("h2", {}, "Model calls"), el("table", { id: "steps" }, el("thead", {}, el("tr", {}, ["step", "time", "prompt tokens", "completion tokens", "finish", "tool calls", "dialect", "token data"].map((h) => el("th", {}, h)))), el("tbody", {}, stepRows)));
  const spans = ["setup", "generation", "scoring", "model", "env"].filter((k) => timing[k] && typeof timing[k].duration === "number").map((k) => [k, seconds(timing[k].duration)]);
  if (spans.length) parts.push(el("h3", {}, "Timing"), keyValueTable([...spans, ["total", seconds(timing.total)], ["overhead", seconds(timing.overhead)]]));
  const withTokens = trajectory.map((s, i) => [s, i]).filter(([s]) => s.tokens && Array.isArray(s.tokens.completion_ids));
  if (withTokens.length) parts.push(el("h2", {}, "Tokens"), el("p", { class: "legend" }, "Completion token ids coloured by probability (red: unlikely, green: likely; hover for the logprob); struck-through tokens are outside the loss mask."),
    el("div", { id: "tokens" }, withTokens.map(([s, i]) => tokenView(s, i))));
  if (o.artifacts && typeof o.artifacts === "object" && Object.keys(o.artifacts).length) {
    parts.push(el("h2", {}, "Artifacts"), el("div", { id: "artifacts" }, Object.entries(o.artifacts).map(([name, value]) =>
      el("details", { open: true }, el("summary", {}, name), el("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2))))));
  }
  if (o.roles && typeof o.roles === "object" && Object.keys(o.roles).length) parts.push(el("h2", {}, "Roles"), el("div", { id: "roles" }, Object.entries(o.roles).map(([key, r]) => roleNode(key, r || {}))));
  if (o.info && typeof o.info === "object" && Object.keys(o.info).length) parts.push(el("details", {}, el("summary", {}, "task info"), el("pre", {}, JSON.stringify(o.info, null, 2))));
  parts.push(el("details", {}, el("summary", {}, "the whole saved line (JSON)"), el("pre", {}, JSON.stringify(o, null, 2))));
  replace(app, ...parts);
}

// One role of an episode (docs/agents-in-an-episode.md): its own conversation, trajectory length and trainability.
function roleNode(key, r) {
  const steps = Array.isArray(r.trajectory) ? r.trajectory.length : 0;
  const conversation = el("div", { class: "role-conversation" });
  const toolNames = {};
  for (const msg of Array.isArray(r.prompt) ? r.prompt : []) conversation.appendChild(messageNode(msg, toolNames));
  for (const msg of Array.isArray(r.completion) ? r.completion : []) conversation.appendChild(messageNode(msg, toolNames));
  const facts = [`${steps} model call${steps === 1 ? "" : "s"}`, r.trainable ? "trained" : "not trained", `reward ${fmt(r.reward)}`, `stop ${r.stop_condition ?? "–"}`];
  if (r.error) facts.push(`error ${typeof r.error === "object" ? r.error.type : "error"}`);
  return el("details", { class: "role", "data-role": key }, el("summary", {}, el("strong", {}, key), el("span", { class: "muted" }, "  " + facts.join(" · "))), conversation);
}

// ---------- compare ----------

async function viewCompare(params, token) {
  const a = params.get("a"), b = params.get("b");
  let data;
  try {
    data = await api(`/api/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  } catch (error) {
    setCrumbs(["runs", "#/"], ["compare"]);
    replace(app, message("error", error.message));
    return;
  }
  if (token !== routeToken) return;
  setCrumbs(["runs", "#/"], [data.a.name, href("run", { id: a })], ["compare"]);
  const state = { show: params.get("show") || "changed" };
  const ex = data.examples;
  const both = ex.filter((e) => e.delta !== null);
  const better = both.filter((e) => e.delta > 1e-12), worse = both.filter((e) => e.delta < -1e-12);
  const tableBox = el("div", {});
  const show = el("select", { "aria-label": "which examples", onchange: (e) => { state.show = e.target.value; render(); } },
    [["changed", "better or worse"], ["better", "better in B"], ["worse", "worse in B"], ["all", "all examples"]].map(([v, l]) => el("option", { value: v }, l)));
  show.value = state.show;
  function render() {
    let rows = ex;
    if (state.show === "better") rows = better; else if (state.show === "worse") rows = worse;
    else if (state.show === "changed") rows = [...better, ...worse];
    rows = rows.slice().sort((x, y) => (x.delta ?? 0) - (y.delta ?? 0));
    const link = (run, n, mean) => n === null ? "–" : el("a", { href: href("rollout", { id: run, n }) }, fmt(mean));
    replace(tableBox, rows.length === 0 ? message("info", "No example in this selection.") : el("table", { id: "compare" },
      el("thead", {}, el("tr", {}, ["example", "prompt", "A mean reward", "B mean reward", "B − A"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map((e) => el("tr", {}, el("td", {}, fmt(e.example_id)), el("td", {}, el("div", { class: "text" }, e.prompt)),
        el("td", { class: "num" }, link(a, e.a_first, e.a_mean), el("span", { class: "muted" }, ` (${e.a_count})`)),
        el("td", { class: "num" }, link(b, e.b_first, e.b_mean), el("span", { class: "muted" }, ` (${e.b_count})`)),
        el("td", { class: "num " + (e.delta > 0 ? "delta-pos" : e.delta < 0 ? "delta-neg" : "") }, e.delta === null ? "only in one" : (e.delta > 0 ? "+" : "") + fmt(e.delta)))))));
  }
  const side = (label, s, id) => el("div", { class: "panel" }, el("h3", {}, label), el("a", { href: href("run", { id }) }, s.name), el("div", { class: "muted" }, `${s.env ?? "?"} · ${s.model ?? "?"}`));
  replace(app, el("h1", {}, "Compare runs"), data.same_env ? null : message("warn", "These runs are of different environments; examples with the same id may not be the same task."),
    el("div", { class: "grid" }, side("A", data.a, a), side("B", data.b, b)),
    el("div", { class: "cards" }, card("examples", String(ex.length)), card("better in B", String(better.length)), card("worse in B", String(worse.length)),
      card("unchanged", String(both.length - better.length - worse.length)), card("only in one run", String(ex.length - both.length))),
    el("div", { class: "toolbar" }, show), tableBox);
  render();
}

// ---------- routing ----------

const VIEWS = { "": viewRuns, run: viewRun, rollout: viewRollout, compare: viewCompare };

async function route() {
  timers.forEach(clearInterval);
  timers = [];
  const token = ++routeToken;
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, query] = hash.split("?");
  const view = VIEWS[name];
  if (!view) {
    setCrumbs(["runs", "#/"]);
    replace(app, message("error", `No page "${name}" here.`), el("a", { href: "#/" }, "back to the runs"));
    return;
  }
  window.scrollTo(0, 0);
  try {
    await view(new URLSearchParams(query || ""), token);
  } catch (error) {
    replace(app, message("error", "This page could not be shown: " + error.message));
  }
}

window.addEventListener("hashchange", route);
route();
