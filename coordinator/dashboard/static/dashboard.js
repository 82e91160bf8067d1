// The redfleet dashboard: polls the JSON endpoints every second, draws tables and SVG plots.
// Everything shown that came from Redis (goals, briefs, event fields, artifact text) goes
// into the page as text nodes or attribute values, never as markup.
"use strict";

const POLL_MS = 1000;
const MAX_EVENTS = 1000; // kept on the page; older ones leave it
const SVG_NS = "http://www.w3.org/2000/svg";
const STATUSES = new Set([
  "queued", "claimed", "waiting", "blocked", "running", "succeeded", "failed", "dead", "cancelled",
]);

// -- building the page --------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function status(value) {
  const cls = STATUSES.has(value) ? `status s-${value}` : "status";
  return el("span", { class: cls }, value);
}

function link(href, text) {
  return el("a", { href }, text);
}

function jobHref(jobId) {
  return `/jobs/${encodeURIComponent(jobId)}`;
}

function artifactHref(jobId, artifactId) {
  return `${jobHref(jobId)}/artifacts/${encodeURIComponent(artifactId)}`;
}

function age(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function usd(value) {
  return `$${Number(value).toFixed(4)}`;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// -- fetching -----------------------------------------------------------------------------

async function getJSON(url) {
  const reply = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  const doc = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new Error(doc.error || `${reply.status} ${reply.statusText}`);
  return doc;
}

function setLive(ok, text) {
  const live = document.getElementById("live");
  live.textContent = text;
  live.className = ok ? "live" : "live down";
}

// Runs ``step`` now and again POLL_MS after each run ends, so polls never overlap.
function poll(step) {
  const run = async () => {
    try {
      await step();
      setLive(true, `live · ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      setLive(false, `not updating: ${err.message}`);
    }
    setTimeout(run, POLL_MS);
  };
  run();
}

// -- jobs ---------------------------------------------------------------------------------

function jobsPage() {
  const filter = document.getElementById("status-filter");
  const params = new URLSearchParams(location.search);
  filter.value = params.get("status") || "";
  filter.addEventListener("change", () => {
    const next = new URLSearchParams(location.search);
    if (filter.value) next.set("status", filter.value);
    else next.delete("status");
    history.replaceState(null, "", next.toString() ? `?${next}` : location.pathname);
  });
  poll(async () => {
    const query = filter.value ? `?status=${encodeURIComponent(filter.value)}` : "";
    const doc = await getJSON(`/api/jobs${query}`);
    document.getElementById("active").textContent = `${doc.active} active`;
    document.getElementById("queues").textContent =
      "· queued envelopes: " +
      Object.entries(doc.queues).map(([q, n]) => `${q} ${n}`).join(", ");
    fill(
      document.querySelector("#jobs tbody"),
      doc.jobs.map((job) => {
        const end = job.finished_ms || doc.now_ms;
        // Settled is not succeeded: a failed or cancelled job says how many did not.
        const others = Object.entries(job.unsucceeded || {}).map(([s, n]) => `${n} ${s}`);
        return el(
          "tr", { "data-job": job.job_id },
          el("td", {}, link(jobHref(job.job_id), job.job_id)),
          el("td", {}, status(job.status)),
          el("td", { class: "num" },
            `${job.done}/${job.total}` + (others.length ? ` (${others.join(", ")})` : "")),
          job.stage_next
            ? el("td", { title: "the planner waits for its tasks, then runs this stage" },
                `next: ${job.stage}`)
            : el("td", {}, job.stage),
          el("td", { class: "num" }, job.tokens),
          el("td", { class: "num" }, usd(job.cost_usd)),
          el("td", { class: "num", title: `ran ${age(end - job.created_ms)}` },
            age(doc.now_ms - job.created_ms)),
          el("td", { class: "goal" }, job.goal),
        );
      }),
    );
  });
}

// -- one job ------------------------------------------------------------------------------

// Lease deadlines on this page's clock: the server says how long is left, by Redis time.
const leases = new Map();

function tickLeases() {
  const now = performance.now();
  for (const [node, deadline] of leases) {
    if (!node.isConnected) leases.delete(node);
    else node.textContent = `lease ${Math.max(0, (deadline - now) / 1000).toFixed(1)} s`;
  }
}

function taskNode(task, children, jobId) {
  const parts = [
    el("span", { class: `kind k-${task.kind || task.role}` }, task.kind || task.role),
    " ",
    el("code", {}, task.task_id),
    " ",
    status(task.status),
    el("span", { class: "meta" },
      ` attempt ${task.attempts} · token ${task.token}` + (task.owner ? ` · ${task.owner}` : "")),
  ];
  if (task.lease_remaining_ms !== null && task.lease_remaining_ms !== undefined) {
    const lease = el("span", { class: "lease" });
    leases.set(lease, performance.now() + task.lease_remaining_ms);
    parts.push(" ", lease);
  }
  if (task.stage) parts.push(el("span", { class: "meta" }, ` · stage ${task.stage}`));
  const item = el("li", { "data-task": task.task_id }, ...parts);
  if (task.brief) item.append(el("div", { class: "brief" }, task.brief));
  if (task.error) item.append(el("div", { class: "error" }, task.error));
  if (task.question) item.append(el("div", { class: "error" }, `asks: ${task.question}`));
  if (task.status === "blocked") {
    item.append(decisionButtons(jobId, task.task_id, task.approval_for || ""));
  }
  const kids = children.get(task.task_id) || [];
  if (kids.length) item.append(el("ul", {}, ...kids.map((t) => taskNode(t, children, jobId))));
  return item;
}

// Approve or reject a blocked task: the one write the dashboard makes, as JSON (which a
// page of another site cannot send here without a preflight the server never allows).
// A decision names the question it answers (``asked``): one the task no longer asks is refused.
function decisionButtons(jobId, taskId, asked) {
  const url = (verdict) =>
    `/api/jobs/${encodeURIComponent(jobId)}/tasks/${encodeURIComponent(taskId)}/${verdict}`;
  const send = async (verdict, note) => {
    const reply = await fetch(url(verdict), {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ note, asked }),
    });
    const doc = await reply.json().catch(() => ({}));
    setLive(reply.ok, reply.ok ? `${taskId} ${doc.decision}` : `not decided: ${doc.error}`);
  };
  const approve = el("button", { type: "button", class: "approve" }, "approve");
  approve.addEventListener("click", () => send("approve", ""));
  const reject = el("button", { type: "button", class: "reject" }, "reject");
  reject.addEventListener("click", () => {
    const note = window.prompt(`Why is ${taskId} rejected? (its job fails)`);
    if (note && note.trim()) send("reject", note);
  });
  return el("div", { class: "decision" }, approve, " ", reject);
}

function renderTree(doc) {
  const ids = new Set(doc.tasks.map((t) => t.task_id));
  const children = new Map();
  const roots = [];
  for (const task of doc.tasks) {
    if (task.parent_id && ids.has(task.parent_id)) {
      if (!children.has(task.parent_id)) children.set(task.parent_id, []);
      children.get(task.parent_id).push(task);
    } else roots.push(task);
  }
  leases.clear();
  document.getElementById("tree").replaceChildren(
    ...roots.map((t) => taskNode(t, children, doc.job_id)),
  );
  tickLeases();
}

function renderUsage(doc) {
  const u = doc.usage;
  const names = Object.keys(doc.providers || {});
  const providers = Object.entries(doc.providers || {}).map(([p, n]) => `${p} (${n})`).join(", ");
  // A replay calls no model: its cost is only what the tokens would have cost.
  const replay = names.length > 0 && names.every((p) => p.split(" ")[0] === "scripted");
  const rows = [
    ["model calls", u.calls], ["input tokens", u.input_tokens], ["cached tokens", u.cached_tokens],
    ["output tokens", u.output_tokens], ["context high-water", u.high_water],
    ["cache-hit ratio", u.cache_hit_ratio],
    ["cost", replay ? `${usd(u.cost_usd)} had a model been paid` : usd(u.cost_usd)],
    ["providers", replay ? `${providers}: a replay, no model was called` : providers || "none"],
  ];
  const i = doc.items;
  if (i) {  // a job over many items: the counts as of the planner's last stage
    rows.push(["items", `${i.done + i.validated} of ${i.total} done (${i.validated} validated, ` +
      `${i.failed} failed, ${i.pending} pending)`]);
  }
  document.getElementById("usage").replaceChildren(
    ...rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]),
  );
}

function renderFeatures(doc) {
  const problem = doc.features_error
    ? [el("tr", {}, el("td", { colspan: 5, class: "error" }, `feature list ${doc.features_error}`))]
    : [];
  fill(
    document.querySelector("#features tbody"),
    problem.concat(doc.features.map((f) => {
      const verdict = f.passes ? "passes" : (f.verdict || "open");
      const evidence = el("td", {});
      for (const id of f.evidence) evidence.append(link(artifactHref(doc.job_id, id), id), " ");
      return el(
        "tr", {},
        el("td", {}, f.id),
        el("td", {}, el("span", { class: `verdict v-${verdict}` }, verdict),
          f.note ? el("span", { class: "meta" }, ` ${f.note}`) : ""),
        el("td", {}, el("code", {}, f.check)),
        evidence,
        el("td", {}, f.description),
      );
    })),
  );
}

function renderArtifacts(doc) {
  const hidden = doc.artifacts_total - doc.artifacts.length;
  const older = hidden > 0
    ? [el("tr", {}, el("td", { colspan: 5, class: "meta" },
      `${hidden} older artifacts not listed (redfleet artifacts ${doc.job_id})`))]
    : [];
  fill(
    document.querySelector("#artifacts tbody"),
    older.concat(doc.artifacts.map((a) =>
      el(
        "tr", {},
        el("td", {}, link(artifactHref(doc.job_id, a.id), a.id)),
        el("td", {}, a.kind),
        el("td", { class: "num" }, a.bytes),
        el("td", {}, a.trust),
        el("td", {}, a.title),
      ))),
  );
}

function eventItem(e) {
  const shown = new Set(["id", "event", "ts", "job_id", "task_id", "worker", "token"]);
  const time = e.ts.slice(11, 23);
  const rest = Object.entries(e).filter(([k]) => !shown.has(k)).map(([k, v]) => `${k}=${v}`);
  return el(
    "li", { "data-event": e.event },
    el("time", {}, time), " ",
    el("span", { class: "event" }, e.event), " ",
    e.task_id ? el("code", {}, e.task_id) : "",
    e.worker ? ` by ${e.worker}` : "",
    e.token !== undefined ? ` token=${e.token}` : "",
    rest.length ? el("span", { class: "meta" }, ` ${rest.join(" ")}`) : "",
  );
}

function jobPage() {
  const jobId = document.body.dataset.job;
  const api = `/api/jobs/${encodeURIComponent(jobId)}`;
  const list = document.getElementById("events");
  let after = null;
  let drawn = "";
  setInterval(tickLeases, 100);
  poll(async () => {
    const [doc, calls, events] = await Promise.all([
      getJSON(api),
      getJSON(`${api}/calls`),
      getJSON(after === null ? `${api}/events` : `${api}/events?after=${encodeURIComponent(after)}`),
    ]);
    const head = document.getElementById("job-status");
    head.replaceChildren(status(doc.status), ` ${doc.scenario} · ${doc.tasks.length} tasks`);
    document.getElementById("job-reason").textContent = doc.reason || "";
    renderTree(doc);
    renderUsage(doc);
    renderFeatures(doc);
    renderArtifacts(doc);
    const key = `${calls.calls.length}/${doc.status}`;
    if (key !== drawn) {
      drawPlots(calls, doc);
      drawn = key;
    }
    after = events.last;
    list.append(...events.events.map(eventItem));
    while (list.children.length > MAX_EVENTS) list.firstElementChild.remove();
  });
}

// -- plots --------------------------------------------------------------------------------

const PLOT = { width: 640, height: 220, left: 56, right: 12, top: 12, bottom: 28 };

function frame(container, name, yMax, yLabel, xLabel) {
  const root = svg("svg", {
    viewBox: `0 0 ${PLOT.width} ${PLOT.height}`, class: "plot", "data-plot": name, role: "img",
  });
  const innerH = PLOT.height - PLOT.top - PLOT.bottom;
  for (let i = 0; i <= 4; i++) {
    const y = PLOT.top + innerH - (innerH * i) / 4;
    root.append(svg("line", { x1: PLOT.left, x2: PLOT.width - PLOT.right, y1: y, y2: y, class: "grid" }));
    root.append(svg("text", { x: PLOT.left - 6, y: y + 4, class: "tick", "text-anchor": "end" },
      yLabel((yMax * i) / 4)));
  }
  root.append(svg("text", { x: PLOT.width - PLOT.right, y: PLOT.height - 6, class: "tick",
    "text-anchor": "end" }, xLabel));
  container.replaceChildren(root);
  return root;
}

function scaleY(value, yMax) {
  const innerH = PLOT.height - PLOT.top - PLOT.bottom;
  return PLOT.top + innerH - (yMax ? (innerH * value) / yMax : 0);
}

function empty(container, text) {
  container.replaceChildren(el("p", { class: "meta" }, text));
}

function compact(n) {
  return n >= 1000 ? `${(n / 1000).toFixed(n >= 10000 ? 0 : 1)}k` : `${Math.round(n)}`;
}

// One <g class="call"> per model call: cached, uncached input and output stacked.
function plotCalls(container, calls) {
  const yMax = Math.max(1, ...calls.map((c) => Math.max(c.input_tokens + c.output_tokens, c.high_water)));
  const root = frame(container, "calls", yMax, compact, `${calls.length} calls`);
  const band = (PLOT.width - PLOT.left - PLOT.right) / calls.length;
  const width = Math.max(1, band * 0.7);
  const water = [];
  calls.forEach((c, i) => {
    const x = PLOT.left + band * i + (band - width) / 2;
    const g = svg("g", { class: "call", "data-call": c.n, "data-task": c.task_id || "" });
    const segments = [
      ["cached", 0, c.cached_tokens],
      ["input", c.cached_tokens, c.input_tokens],
      ["output", c.input_tokens, c.input_tokens + c.output_tokens],
    ];
    for (const [cls, from, to] of segments) {
      if (to > from) {
        const top = scaleY(to, yMax);
        g.append(svg("rect", { x, y: top, width, height: scaleY(from, yMax) - top, class: cls }));
      }
    }
    g.append(svg("title", {}, `call ${c.n} · ${c.kind} ${c.task_id || ""} · ${c.call}` +
      `${c.tool ? ` · ${c.tool}` : ""}\ninput ${c.input_tokens} (cached ${c.cached_tokens})` +
      ` · output ${c.output_tokens} · ${c.latency_ms} ms`));
    root.append(g);
    water.push(`${x + width / 2},${scaleY(c.high_water, yMax)}`);
  });
  root.append(svg("polyline", { points: water.join(" "), class: "high-water" }));
}

function plotCache(container, calls, ratio) {
  const root = frame(container, "cache", 1, (v) => v.toFixed(2), `overall ${ratio.toFixed(3)}`);
  const band = (PLOT.width - PLOT.left - PLOT.right) / calls.length;
  const points = calls.map((c, i) => {
    const value = c.input_tokens ? c.cached_tokens / c.input_tokens : 0;
    return `${PLOT.left + band * (i + 0.5)},${scaleY(value, 1)}`;
  });
  root.append(svg("line", { x1: PLOT.left, x2: PLOT.width - PLOT.right, y1: scaleY(ratio, 1),
    y2: scaleY(ratio, 1), class: "overall" }));
  root.append(svg("polyline", { points: points.join(" "), class: "ratio" }));
}

function plotCost(container, calls, doc) {
  const start = doc.created_ms;
  const end = Math.max(start + 1, doc.finished_ms || doc.now_ms, ...calls.map((c) => c.ts_ms));
  const total = calls[calls.length - 1].cost_micro_usd_total / 1e6;
  const root = frame(container, "cost", total || 1e-6, (v) => `$${v.toPrecision(2)}`,
    `${age(end - start)} since submit`);
  const x = (ts) => PLOT.left + ((PLOT.width - PLOT.left - PLOT.right) * (ts - start)) / (end - start);
  let last = 0;
  const points = [`${x(start)},${scaleY(0, total)}`];
  for (const c of calls) {
    const cost = c.cost_micro_usd_total / 1e6;
    points.push(`${x(c.ts_ms)},${scaleY(last, total)}`, `${x(c.ts_ms)},${scaleY(cost, total)}`);
    last = cost;
  }
  points.push(`${x(end)},${scaleY(last, total)}`);
  root.append(svg("polyline", { points: points.join(" "), class: "cost" }));
}

function plotLatency(container, latency) {
  const kinds = Object.entries(latency);
  const height = PLOT.top + PLOT.bottom + kinds.length * 28;
  const root = svg("svg", { viewBox: `0 0 ${PLOT.width} ${height}`, class: "plot",
    "data-plot": "latency", role: "img" });
  const x0 = PLOT.left + 48;
  const xMax = Math.max(1, ...kinds.map(([, v]) => v.max_ms));
  const scale = (ms) => ((PLOT.width - PLOT.right - 220 - x0) * ms) / xMax;
  kinds.forEach(([kind, v], i) => {
    const y = PLOT.top + i * 28;
    root.append(svg("text", { x: x0 - 8, y: y + 15, class: "tick", "text-anchor": "end" }, kind));
    root.append(svg("rect", { x: x0, y, width: Math.max(1, scale(v.mean_ms)), height: 20,
      class: `k-${kind} latency` }));
    root.append(svg("line", { x1: x0 + scale(v.max_ms), x2: x0 + scale(v.max_ms),
      y1: y - 2, y2: y + 22, class: "max" }));
    root.append(svg("text", { x: PLOT.width - PLOT.right, y: y + 15, class: "tick",
      "text-anchor": "end" }, `${v.mean_ms} ms mean, ${v.max_ms} max, ${v.calls} calls`));
  });
  container.replaceChildren(root);
}

function drawPlots(doc, job) {
  const plots = ["plot-calls", "plot-cache", "plot-cost", "plot-latency"].map((id) =>
    document.getElementById(id));
  if (!doc.calls.length) {
    for (const p of plots) empty(p, "no model calls yet");
    return;
  }
  plotCalls(plots[0], doc.calls);
  plotCache(plots[1], doc.calls, doc.usage.cache_hit_ratio);
  plotCost(plots[2], doc.calls, job);
  plotLatency(plots[3], doc.latency);
}

// -- an artifact --------------------------------------------------------------------------

async function artifactPage() {
  const { job, artifact } = document.body.dataset;
  document.getElementById("back").setAttribute("href", jobHref(job));
  const api = `/api/jobs/${encodeURIComponent(job)}/artifacts/${encodeURIComponent(artifact)}`;
  const content = document.getElementById("content");
  try {
    // Page by page (each answer is capped), appended as text: a 20 MB log stays readable.
    let doc = await getJSON(api);
    document.getElementById("artifact-meta").textContent =
      ` · ${doc.kind} · ${doc.bytes} bytes · ${doc.trust} · ${doc.title}` +
      (doc.unreadable ? ` · ${doc.unreadable}` : "");
    content.textContent = doc.content;
    const more = el("button", { type: "button" }, "");
    const showMore = () => {
      more.textContent = `show more (${doc.next} of ${doc.length} characters shown)`;
      if (doc.next === null) more.remove();
      else content.after(more);
    };
    more.addEventListener("click", async () => {
      doc = await getJSON(`${api}?offset=${doc.next}`);
      content.append(doc.content);
      showMore();
    });
    showMore();
    setLive(true, "loaded");
  } catch (err) {
    setLive(false, err.message);
  }
}

// -- workers ------------------------------------------------------------------------------

const WORKER_COLUMNS = ["worker_id", "role", "state", "busy", "slots", "tasks",
  "heartbeat_age_ms", "host", "pid"];

function workersPage() {
  poll(async () => {
    const doc = await getJSON("/api/workers");
    // Fields a newer worker writes (slots, busy tasks) are shown as they come.
    const extra = [...new Set(doc.workers.flatMap(Object.keys))]
      .filter((k) => !WORKER_COLUMNS.includes(k)).sort();
    const columns = [...WORKER_COLUMNS, ...extra];
    document.querySelector("#workers thead tr").replaceChildren(
      ...columns.map((c) => el("th", {}, c === "heartbeat_age_ms" ? "heartbeat" : c)));
    fill(document.querySelector("#workers tbody"), doc.workers.map((w) =>
      el("tr", { "data-worker": w.worker_id }, ...columns.map((c) => {
        if (c === "heartbeat_age_ms") return el("td", { class: "num" }, `${(w[c] / 1000).toFixed(1)} s ago`);
        if (c === "tasks") {  // "job_id/task_id" each: one link each
          return el("td", {}, ...(w[c] || []).flatMap((held) =>
            [link(jobHref(held.split("/")[0]), held), " "]));
        }
        return el("td", {}, w[c] ?? "");
      }))));
    fill(document.querySelector("#queues tbody"), Object.entries(doc.queues).map(([q, n]) =>
      el("tr", {}, el("td", {}, q), el("td", { class: "num" }, n))));
    fill(document.querySelector("#claims tbody"), doc.claims.map((c) =>
      el("tr", {},
        el("td", {}, el("code", {}, c.task_id)),
        el("td", {}, link(jobHref(c.job_id), c.job_id)),
        el("td", {}, c.role), el("td", {}, c.owner), el("td", { class: "num" }, c.token),
        el("td", { class: "num" }, `${(c.lease_remaining_ms / 1000).toFixed(1)} s`))));
    // Model routes as `redfleet limits show` has them: each cell already a string.
    document.querySelector("#routes thead tr").replaceChildren(
      ...doc.routes.columns.map((c) => el("th", {}, c)));
    fill(document.querySelector("#routes tbody"), doc.routes.rows.map((r) =>
      el("tr", { "data-route": r.route }, ...doc.routes.columns.map((c) => el("td", {}, r[c] ?? "")))));
  });
}

const PAGES = { jobs: jobsPage, job: jobPage, artifact: artifactPage, workers: workersPage };
PAGES[document.body.dataset.page]?.();
