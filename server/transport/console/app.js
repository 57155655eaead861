// The Dendro web console: a read-only view of dendrod's datasets, jobs and
// models, drawn from the JSON endpoints under /api/v1 (docs/http.md).
//
// Routes live in the URL fragment:
//   #/                                 overview (jobs, models, datasets)
//   #/jobs  #/datasets  #/models       one list each
//   #/models/NAME                      the versions of one model
//   #/models/NAME/versions/V           one version and its tree (SVG)
// A fragment may end in ?key=K (the API key: kept in this tab's session
// storage, then removed from the address), q=TEXT (leaf search on the tree
// page), color=K (colour the tree's K clusters; 0 one colour; by default
// the most even cut, see autoColorLevel), tips=N (open the tree with at
// most N tips drawn, 100 by default) and zoom=F (start the tree enlarged F
// times about its centre).
//
// Every value from the server reaches the page through textContent or an
// attribute set by the DOM API, never as markup; the tree is drawn here
// from its JSON, leaf names as text nodes.
"use strict";

(function () {
  const KEY_STORAGE = "dendro.console.key";
  const POLL_MS = 1000;
  const main = document.getElementById("main");
  let generation = 0;  // bumped by every navigation; stale work stops
  let pollTimer = null;

  // --- API key -----------------------------------------------------------

  function apiKey() {
    try {
      return window.sessionStorage.getItem(KEY_STORAGE) || "";
    } catch (e) {
      return "";
    }
  }

  function setApiKey(key) {
    try {
      if (key) window.sessionStorage.setItem(KEY_STORAGE, key);
      else window.sessionStorage.removeItem(KEY_STORAGE);
    } catch (e) {
      // Storage may be disabled; the key then lasts for this page only.
    }
    memoryKey = key;
    showKeyState();
  }

  let memoryKey = "";
  function currentKey() {
    return apiKey() || memoryKey;
  }

  function showKeyState() {
    document.getElementById("key-state").textContent =
      currentKey() ? "key set" : "no key";
  }

  // --- routing -----------------------------------------------------------

  // "#/models/a/versions/2?q=x" -> {parts: ["models","a","versions","2"], params}
  function parseHash() {
    const raw = window.location.hash.replace(/^#/, "");
    const q = raw.indexOf("?");
    const path = q >= 0 ? raw.slice(0, q) : raw;
    const params = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "");
    const parts = path.split("/").filter((p) => p.length > 0).map(decodeURIComponent);
    return { parts, params };
  }

  // Moves ?key= out of the address into session storage.
  function takeKeyFromHash() {
    const { parts, params } = parseHash();
    if (!params.has("key")) return;
    setApiKey(params.get("key"));
    params.delete("key");
    const rest = params.toString();
    const hash = "#/" + parts.map(encodeURIComponent).join("/") + (rest ? "?" + rest : "");
    window.history.replaceState(null, "", hash);
  }

  // --- fetching ----------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // The answer to GET `path`, sent with the key; an ApiError unless 2xx.
  async function fetchOk(path) {
    const headers = {};
    const key = currentKey();
    if (key) headers["Authorization"] = "Bearer " + key;
    const res = await fetch(path, { headers, cache: "no-store" });
    if (!res.ok) {
      const text = await res.text();
      let message = "HTTP " + res.status;
      try {
        const body = JSON.parse(text);
        if (body && typeof body.error === "string") message = body.error;
      } catch (e) {
        // not JSON: keep the status line
      }
      throw new ApiError(res.status, message);
    }
    return res;
  }

  async function fetchText(path) {
    return (await fetchOk(path)).text();
  }

  async function fetchBlob(path) {
    return (await fetchOk(path)).blob();
  }

  async function fetchJson(path) {
    return JSON.parse(await fetchText(path));
  }

  // Every page of a list endpoint (`field` names the array).
  async function fetchAll(path, field) {
    const out = [];
    let token = "";
    for (;;) {
      const sep = path.indexOf("?") >= 0 ? "&" : "?";
      const url = path + sep + "page_size=1000" +
        (token ? "&page_token=" + encodeURIComponent(token) : "");
      const body = await fetchJson(url);
      out.push(...(body[field] || []));
      token = body.next_page_token || "";
      if (!token) return out;
    }
  }

  function modelPath(name, version) {
    return "/api/v1/models/" + encodeURIComponent(name) + "/versions/" +
      encodeURIComponent(String(version));
  }

  // --- DOM helpers -------------------------------------------------------

  // el("td", {class: "num"}, "text", childNode, ...)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("data-")) node.setAttribute(k, String(v));
      else if (k === "href" || k === "id" || k === "title" || k === "type" ||
               k === "placeholder" || k === "value" || k === "min" || k === "max" ||
               k === "for" || k === "step" || k === "download") node.setAttribute(k, String(v));
      else throw new Error("el: attribute " + k + " is not allowed");
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      node.appendChild(typeof c === "string" || typeof c === "number"
        ? document.createTextNode(String(c)) : c);
    }
    return node;
  }

  function link(href, text) {
    return el("a", { href }, text);
  }

  function table(headers, rows, attrs) {
    const head = el("tr", {}, ...headers.map((h) =>
      el("th", { class: h.num ? "num" : null }, h.label || h)));
    const t = el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, ...rows));
    return t;
  }

  function when(ts) {
    if (!ts) return "";
    const d = new Date(ts);
    if (isNaN(d.getTime()) || d.getTime() <= 0) return "";
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function bytes(n) {
    n = Number(n || 0);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  function stateName(state) {
    return String(state || "").replace(/^JOB_STATE_/, "").toLowerCase();
  }

  function methodOf(spec) {
    for (const m of ["l2h", "tneb", "ghhc", "hppca", "hppca_add"]) {
      if (spec && spec[m]) return m;
    }
    return "";
  }

  function render(title, ...nodes) {
    main.replaceChildren(...nodes);
    document.title = title ? title + " - Dendro console" : "Dendro console";
  }

  function showError(err) {
    const box = el("p", { class: "error", id: "error", "data-status": err.status || 0 },
      err.message || String(err));
    if (err.status === 401) {
      box.appendChild(document.createTextNode(
        " Enter an API key above (any role may read)."));
    }
    main.replaceChildren(box);
    document.body.setAttribute("data-loaded", "error");
  }

  function loaded(view) {
    document.body.setAttribute("data-view", view);
    document.body.setAttribute("data-loaded", "true");
  }

  // --- jobs --------------------------------------------------------------

  function jobRow(job) {
    const state = stateName(job.state);
    const progress = Math.max(0, Math.min(1, Number(job.progress || 0)));
    const done = state === "succeeded";
    const bar = el("progress", { class: "job-progress", max: 1, value: progress });
    const pct = el("span", { class: "pct" }, Math.floor(progress * 100) + "%");
    const result = done && job.model_name
      ? link("#/models/" + encodeURIComponent(job.model_name) + "/versions/" +
             encodeURIComponent(job.model_version),
             job.model_name + " v" + job.model_version)
      : (job.error && job.error.message ? el("span", { class: "state-failed" }, job.error.message)
                                        : "");
    return el("tr", { class: "job", "data-job-id": job.id, "data-state": state,
                      "data-progress": progress },
      el("td", { class: "id" }, job.id),
      el("td", {}, (job.spec && job.spec.model_name) || ""),
      el("td", {}, methodOf(job.spec)),
      el("td", { class: "state state-" + state }, state),
      el("td", {}, bar, " ", pct),
      el("td", {}, job.stage || ""),
      el("td", {}, result),
      el("td", {}, when(job.create_time)),
      el("td", {}, job.owner || ""));
  }

  function jobsTable(jobs) {
    if (jobs.length === 0) return el("p", { class: "empty", id: "jobs" }, "No jobs.");
    const sorted = jobs.slice().reverse();  // newest first
    return table(["Job", "Model", "Method", "State", "Progress", "Stage", "Result",
                  "Created", "Owner"], sorted.map(jobRow), { id: "jobs" });
  }

  function unfinished(jobs) {
    return jobs.some((j) => ["queued", "running"].includes(stateName(j.state)));
  }

  // Re-reads the jobs every second while any is unfinished, replacing the
  // table in place.
  function pollJobs(gen, container, jobs) {
    if (pollTimer) clearTimeout(pollTimer);
    pollTimer = setTimeout(async function tick() {
      if (gen !== generation) return;
      try {
        jobs = await fetchAll("/api/v1/jobs", "jobs");
      } catch (e) {
        if (gen === generation) showError(e);
        return;
      }
      if (gen !== generation) return;
      container.replaceChildren(jobsTable(jobs));
      if (unfinished(jobs)) pollTimer = setTimeout(tick, POLL_MS);
    }, POLL_MS);
  }

  function jobsSection(gen, jobs) {
    const container = el("div", { id: "jobs-section" }, jobsTable(jobs));
    if (unfinished(jobs)) pollJobs(gen, container, jobs);
    return container;
  }

  // --- datasets and models -----------------------------------------------

  function datasetsTable(datasets) {
    if (datasets.length === 0) return el("p", { class: "empty", id: "datasets" }, "No datasets.");
    return table(["Dataset", "Name", { label: "Rows", num: true }, { label: "Columns", num: true },
                  "Labels", { label: "Size", num: true }, "Created", "Owner"],
      datasets.slice().reverse().map((d) => el("tr", { class: "dataset", "data-dataset-id": d.id },
        el("td", { class: "id" }, d.id),
        el("td", {}, d.display_name || ""),
        el("td", { class: "num" }, d.rows),
        el("td", { class: "num" }, d.cols),
        el("td", {}, d.has_labels ? "yes" : "no"),
        el("td", { class: "num" }, bytes(d.size_bytes)),
        el("td", {}, when(d.create_time)),
        el("td", {}, d.owner || ""))), { id: "datasets" });
  }

  // Versions grouped by name, newest version last within each.
  function byName(models) {
    const groups = new Map();
    for (const m of models) {
      if (!groups.has(m.name)) groups.set(m.name, []);
      groups.get(m.name).push(m);
    }
    for (const list of groups.values()) list.sort((a, b) => Number(a.version) - Number(b.version));
    return groups;
  }

  function labels(m) {
    return el("span", {}, ...(m.labels || []).map((l) => el("span", { class: "label" }, l)));
  }

  function modelsTable(models) {
    if (models.length === 0) return el("p", { class: "empty", id: "models" }, "No models.");
    const rows = [];
    for (const [name, versions] of [...byName(models)].sort((a, b) => a[0].localeCompare(b[0]))) {
      const latest = versions[versions.length - 1];
      rows.push(el("tr", { class: "model", "data-model": name },
        el("td", {}, link("#/models/" + encodeURIComponent(name), name)),
        el("td", { class: "num" }, versions.length),
        el("td", {}, link("#/models/" + encodeURIComponent(name) + "/versions/" +
                          encodeURIComponent(latest.version), "v" + latest.version)),
        el("td", { class: "labels" }, ...versions.flatMap((m) => (m.labels || []).map((l) =>
          el("span", { class: "label", "data-label": l, "data-version": m.version },
             l + " \u2192 v" + m.version)))),
        el("td", {}, latest.method),
        el("td", { class: "num" }, latest.num_leaves),
        el("td", { class: "num" }, latest.input_dim),
        el("td", {}, when(latest.create_time))));
    }
    return table(["Model", { label: "Versions", num: true }, "Latest", "Labels", "Method",
                  { label: "Leaves", num: true }, { label: "Inputs", num: true }, "Created"],
      rows, { id: "models" });
  }

  // `versions` ascending; each but the first links to its diff with the one before.
  function versionsTable(name, versions) {
    const before = new Map();
    versions.forEach((m, i) => { if (i > 0) before.set(m.version, versions[i - 1].version); });
    const diffLink = (m) => before.has(m.version)
      ? el("a", { class: "diff-link", href: "#/models/" + encodeURIComponent(name) + "/diff/" +
                  encodeURIComponent(before.get(m.version)) + "/" + encodeURIComponent(m.version) },
           "diff v" + before.get(m.version))
      : "";
    return table([{ label: "Version", num: true }, "Labels", "Method", { label: "Leaves", num: true },
                  { label: "Inputs", num: true }, "Dataset", "Job", "Created", "Owner", "", ""],
      versions.slice().reverse().map((m) => el("tr", { class: "version", "data-version": m.version },
        el("td", { class: "num" }, m.version),
        el("td", {}, labels(m)),
        el("td", {}, m.method),
        el("td", { class: "num" }, m.num_leaves),
        el("td", { class: "num" }, m.input_dim),
        el("td", { class: "id" }, m.dataset_id),
        el("td", { class: "id" }, m.job_id),
        el("td", {}, when(m.create_time)),
        el("td", {}, m.owner || ""),
        el("td", {}, link("#/models/" + encodeURIComponent(name) + "/versions/" +
                          encodeURIComponent(m.version), "tree")),
        el("td", {}, diffLink(m)))), { id: "versions" });
  }

  // --- two versions compared (GET .../diff, the 'dendro diff' report) -----

  function num(x, digits) {
    return x === null || x === undefined ? "undefined" : Number(x).toFixed(digits);
  }

  async function diffPage(gen, name, from, to) {
    const path = modelPath(name, to);
    const query = "?from=" + encodeURIComponent(from);
    const [doc, svg] = await Promise.all([fetchJson(path + "/diff" + query),
                                          fetchBlob(path + "/diff.svg" + query)]);
    if (gen !== generation) return;
    const r = doc.report;
    const a = name + " v" + doc.a.version, b = name + " v" + doc.b.version;
    const counts = r.events.counts;
    const summary = table(["Measure", { label: "Value", num: true }], [
      ["Leaves (shared)", r.a.leaves + " → " + r.b.leaves + " (" + r.shared_leaves +
        ", matched by " + r.matching + ")"],
      ["Robinson–Foulds (normalized)", r.robinson_foulds.distance + " (" +
        num(r.robinson_foulds.normalized, 3) + ")"],
      ["Cophenetic correlation", num(r.cophenetic_correlation.value, 3)],
      ["ARI of the cuts, mean / min (over " + r.ari.basis + ")",
        num(r.ari.mean, 3) + " / " + num(r.ari.min, 3)],
      ["Clusters stayed / moved", counts.stayed + " / " + counts.moved],
      ["Split / merged", counts.split + " / " + counts.merged],
      ["Gone / new", counts.gone + " / " + counts.new],
      ["Tanglegram crossings", r.tanglegram.crossings_before + " → " +
        r.tanglegram.crossings_after],
    ].map(([k, v]) => el("tr", { class: "diff-measure" }, el("td", {}, k),
                         el("td", { class: "num" }, String(v)))), { id: "diff-summary" });
    const shown = r.events.list.filter((e) => e.type !== "stayed").slice(0, 50);
    const points = (n) => n === null || n === undefined ? "" : Number(n).toLocaleString("en");
    const events = shown.length === 0
      ? el("p", { class: "empty", id: "diff-events" }, "Every cluster stayed.")
      : table(["Event", { label: "Leaves", num: true }, { label: "Points " + a, num: true },
               { label: "Points " + b, num: true }, "Parts", "Example leaves"],
        shown.map((e) => el("tr", { class: "diff-event", "data-type": e.type },
          el("td", {}, e.type), el("td", { class: "num" }, e.leaves),
          el("td", { class: "num" }, points(e.a_points)),
          el("td", { class: "num" }, points(e.b_points)),
          el("td", {}, e.parts.map((p) => p.leaves).join(" + ")),
          el("td", {}, e.example_leaves.join(", ")))), { id: "diff-events" });
    const picture = el("img", { id: "diff-tanglegram", class: "tanglegram",
                                title: "The two trees facing each other, shared leaves joined" });
    picture.addEventListener("load", () => picture.setAttribute("data-drawn", "true"));
    // As a data: address, which the page's img-src allows; an <img> runs no
    // script the picture might hold.
    const reader = new FileReader();
    reader.onload = () => { picture.src = reader.result; };
    reader.readAsDataURL(new Blob([svg], { type: "image/svg+xml" }));
    render(a + " vs " + b, el("h2", {}, "Model " + name + ": v" + doc.a.version + " → v" +
                                        doc.b.version),
           el("p", {}, link("#/models/" + encodeURIComponent(name), "all versions"), " · ",
              link("#/models/" + encodeURIComponent(name) + "/versions/" +
                   encodeURIComponent(doc.b.version), "tree of v" + doc.b.version)),
           summary, el("h3", {}, "What changed (largest first)"), events,
           el("h3", {}, "Tanglegram"), picture);
    loaded("diff");
  }

  // --- the tree ----------------------------------------------------------
  //
  // The page draws the hierarchy itself from the JSON tree (.../tree, no
  // points), in the picture ToSvg draws with its rectangular layout
  // (core/hierarchy/svg.h): leaves left to right in depth-first order,
  // height upwards with the root at the top, one elbow path (class "edge")
  // per drawn node below the root, one text (class "leaf") per drawn leaf.
  //
  // Large trees open folded: the highest merges are opened, in the order a
  // cut undoes them (CutToK), while at most TIPS_DEFAULT tips (?tips=N)
  // show; every subtree still closed is drawn as a wedge (class "collapsed")
  // with its leaf count. A click on a wedge opens its OPEN_STEP highest
  // merges; a click on an open node closes it. So a tree of any size draws
  // a bounded number of shapes until someone opens more.

  const SVG_NS = "http://www.w3.org/2000/svg";
  // ToSvg's colours (core/hierarchy/svg.cc).
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                   "#ff9da7", "#9c755f", "#bab0ac"];
  const ABOVE_CUT = "#8c8c8c";
  const PLAIN = "#3b3b3b";
  const TIPS_DEFAULT = 100;
  const TIPS_MAX = 2000;
  const OPEN_STEP = 20;
  const AUTO_K_MAX = 20;
  const TOP_LABELS = 5;

  // The JSON tree (core/hierarchy/export.h) indexed for drawing: parents,
  // heights, children, each node's leaf count and its leaves' span in the
  // depth-first leaf order, and the internal nodes in cut order.
  function indexTree(doc) {
    const n = doc.nodes.length;
    const parent = new Int32Array(n);
    const height = new Float64Array(n);
    const kids = new Array(n);
    let root = -1;
    for (const node of doc.nodes) {
      parent[node.id] = node.parent;
      height[node.id] = node.height;
      kids[node.id] = node.children || [];
      if (node.parent < 0) root = node.id;
    }
    // Pre-order, iteratively (a chain of 10^4 merges is 10^4 deep).
    const preorder = [];
    const stack = [root];
    while (stack.length > 0) {
      const v = stack.pop();
      preorder.push(v);
      for (let i = kids[v].length - 1; i >= 0; i--) stack.push(kids[v][i]);
    }
    const leafOrder = preorder.filter((v) => kids[v].length === 0);
    const pos = new Int32Array(n);  // a leaf's place in leafOrder
    leafOrder.forEach((v, i) => { pos[v] = i; });
    const size = new Int32Array(n);
    const first = new Int32Array(n);  // the node's first leaf, in leaf order
    let low = Infinity;
    for (let i = preorder.length - 1; i >= 0; i--) {
      const v = preorder[i];
      if (kids[v].length === 0) {
        size[v] = 1;
        first[v] = v;
        low = Math.min(low, height[v]);
      } else {
        let s = 0;
        for (const c of kids[v]) s += size[c];
        size[v] = s;
        first[v] = first[kids[v][0]];
      }
    }
    // Internal nodes in the order a cut undoes their merges: (height, id)
    // highest first, as Hierarchy::CutToK.
    const cutOrder = preorder.filter((v) => kids[v].length > 0)
      .sort((a, b) => height[b] - height[a] || b - a);
    return { n, leaves: leafOrder.length, root, parent, height, kids, size, first, pos, preorder,
             leafOrder, cutOrder, low, names: doc.leaf_names || [],
             stableIds: doc.stable_ids || null };
  }

  function leafName(t, v) {
    return v < t.names.length ? t.names[v] : String(v);
  }

  // The k clusters of CutToK(k): the k-1 highest merges undone, clusters
  // numbered by their smallest leaf id. Returns node -> cluster (-1 above
  // the cut), or null when an n-ary node makes k unreachable.
  function cutToK(t, k) {
    const above = new Uint8Array(t.n);
    let count = 1;
    for (let i = 0; count < k && i < t.cutOrder.length; i++) {
      above[t.cutOrder[i]] = 1;
      count += t.kids[t.cutOrder[i]].length - 1;
    }
    if (count !== k) return null;
    const top = new Int32Array(t.n).fill(-1);  // each node's cluster root
    const roots = [];
    const smallest = new Map();
    for (const v of [...t.preorder].reverse()) {
      smallest.set(v, t.kids[v].length === 0 ? v
        : Math.min(...t.kids[v].map((c) => smallest.get(c))));
    }
    for (const v of t.preorder) {
      if (above[v]) continue;
      const p = t.parent[v];
      if (p < 0 || above[p]) {
        top[v] = v;
        roots.push(v);
      } else {
        top[v] = top[p];
      }
    }
    roots.sort((a, b) => smallest.get(a) - smallest.get(b));
    const number = new Map(roots.map((r, i) => [r, i]));
    return Int32Array.from(top, (r) => (r < 0 ? -1 : number.get(r)));
  }

  // The colouring used when the address names none (?color=K does, 0 for
  // one colour): the cut into k clusters, k in [2, 20], whose cluster sizes
  // (in leaves) are the most even by Pielou's evenness H / ln k, H the
  // entropy of the size shares; a tie (within 1e-9) goes to the smaller k,
  // so three groups of four leaves get three colours, not twelve. The top
  // cut alone often splits off a few stragglers and leaves one colour over
  // nearly the whole tree; the most even cut shows its main parts.
  function autoColorLevel(t) {
    const sizes = [t.size[t.root]];
    let best = 0;
    let bestScore = -1;
    for (const v of t.cutOrder) {
      sizes.splice(sizes.indexOf(t.size[v]), 1);
      for (const c of t.kids[v]) sizes.push(t.size[c]);
      const k = sizes.length;
      if (k > AUTO_K_MAX) break;
      let entropy = 0;
      for (const s of sizes) entropy -= (s / t.leaves) * Math.log(s / t.leaves);
      const score = entropy / Math.log(k);
      if (score > bestScore + 1e-9) {
        best = k;
        bestScore = score;
      }
    }
    return best;
  }

  // Opens, below `v`, its highest merges in cut order while the subtree
  // shows at most `tips` tips.
  function openTop(t, open, v, tips) {
    const inside = [];
    const stack = [v];
    while (stack.length > 0) {
      const u = stack.pop();
      if (t.kids[u].length === 0) continue;
      inside.push(u);
      stack.push(...t.kids[u]);
    }
    inside.sort((a, b) => t.height[b] - t.height[a] || b - a);
    let count = 1;
    for (const u of inside) {
      if (u !== v && !open[t.parent[u]]) continue;
      const grow = t.kids[u].length - 1;
      if (count + grow > tips) break;
      open[u] = 1;
      count += grow;
    }
  }

  function closeSubtree(t, open, v) {
    const stack = [v];
    while (stack.length > 0) {
      const u = stack.pop();
      open[u] = 0;
      for (const c of t.kids[u]) if (open[c]) stack.push(c);
    }
  }

  // Up to TOP_LABELS leaf names that speak for a subtree: the first leaf of
  // each node in breadth-first order from it, so they come from its main
  // branches rather than from one corner.
  function topLabels(t, v) {
    const out = [];
    const seen = new Set();
    const queue = [v];
    for (let i = 0; i < queue.length && out.length < TOP_LABELS; i++) {
      const u = queue[i];
      if (!seen.has(t.first[u])) {
        seen.add(t.first[u]);
        out.push(leafName(t, t.first[u]));
      }
      queue.push(...t.kids[u]);
    }
    return out;
  }

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(x) {
    return Number.isInteger(x) ? String(x) : Number(x).toPrecision(4);
  }

  // The drawn tree: the nodes `open` shows, coloured by `cluster` (node ->
  // cluster, -1 above the cut; null: one colour).
  function drawTree(t, open, cluster) {
    const tips = [];
    const shown = [];  // pre-order
    const stack = [t.root];
    while (stack.length > 0) {
      const v = stack.pop();
      shown.push(v);
      if (t.kids[v].length === 0 || !open[v]) {
        tips.push(v);
        continue;
      }
      for (let i = t.kids[v].length - 1; i >= 0; i--) stack.push(t.kids[v][i]);
    }
    const slot = 16;
    const left = 70;
    const top = 20;
    const plot = 480;
    const labels = 130;
    const width = left + tips.length * slot + 20;
    const heightPx = top + plot + labels;
    const high = t.height[t.root];
    const span = high - t.low || 1;
    const y = (h) => top + (high - h) / span * plot;
    const base = y(t.low);
    const x = new Map();
    tips.forEach((v, i) => x.set(v, left + (i + 0.5) * slot));
    for (let i = shown.length - 1; i >= 0; i--) {
      const v = shown[i];
      if (x.has(v)) continue;
      const k = t.kids[v];
      x.set(v, (x.get(k[0]) + x.get(k[k.length - 1])) / 2);
    }
    const colour = (v) => (cluster === null ? PLAIN
      : cluster[v] < 0 ? ABOVE_CUT : PALETTE[cluster[v] % PALETTE.length]);
    const svg = svgEl("svg", { xmlns: SVG_NS, viewBox: `0 0 ${width} ${heightPx}` });
    svg.setAttribute("data-viewbox", `0 0 ${width} ${heightPx}`);
    // The height axis.
    const axis = svgEl("g", { class: "axis" });
    axis.appendChild(svgEl("path", { d: `M${left - 10} ${top}V${base}` }));
    for (let i = 0; i <= 4; i++) {
      const h = t.low + span * i / 4;
      axis.appendChild(svgEl("path", { d: `M${left - 14} ${y(h)}H${left - 10}` }));
      axis.appendChild(svgEl("text", { x: left - 16, y: y(h) + 4 }, fmt(h)));
    }
    svg.appendChild(axis);
    const edges = svgEl("g", { class: "edges" });
    const marks = svgEl("g", { class: "marks" });
    const names = svgEl("g", { class: "names" });
    const label = (vx) => `translate(${vx + 4} ${base + 6}) rotate(90)`;  // under a tip, downwards
    let leaves = 0;
    for (const v of shown) {
      const p = t.parent[v];
      const vx = x.get(v);
      const vy = y(t.height[v]);
      if (p >= 0) {
        edges.appendChild(svgEl("path", { class: "edge", "data-node": v, stroke: colour(v),
                                          d: `M${vx} ${vy}V${y(t.height[p])}H${x.get(p)}` }));
      }
      if (t.kids[v].length === 0) {
        leaves++;
        const cls = "leaf" + (cluster !== null && cluster[v] >= 0 ? " cluster-" + cluster[v] : "");
        names.appendChild(svgEl("text", { class: cls, "data-node": v, fill: colour(v),
                                          transform: label(vx) }, leafName(t, v)));
      } else if (!open[v]) {
        const w = slot * 0.42;
        marks.appendChild(svgEl("path", { class: "collapsed", "data-node": v, fill: colour(v),
                                          d: `M${vx} ${vy}L${vx - w} ${base}H${vx + w}Z` }));
        names.appendChild(svgEl("text", { class: "collapsed-label", "data-node": v,
                                          transform: label(vx) },
                                "\u25b8 " + t.size[v] + " leaves"));
      } else {
        marks.appendChild(svgEl("circle", { class: "node", "data-node": v, cx: vx, cy: vy, r: 3.5,
                                            fill: colour(v) }));
      }
    }
    svg.append(edges, marks, names);
    return { svg, tips: tips.length, leaves, nodes: shown.length };
  }

  // Zoom and pan by rewriting the viewBox of the picture `show` gave last.
  function makeZoomable(container) {
    let svg = null;
    let base = [0, 0, 1, 1];
    let box = base.slice();
    const apply = () => {
      if (svg) svg.setAttribute("viewBox", box.map((v) => v.toFixed(2)).join(" "));
    };
    // Zooms by `factor` (> 1 enlarges) about the point (fx, fy) of the box,
    // given as fractions of its width and height.
    function zoom(factor, fx, fy) {
      const w = box[2] / factor, h = box[3] / factor;
      box = [box[0] + (box[2] - w) * fx, box[1] + (box[3] - h) * fy, w, h];
      apply();
    }
    function reset() {
      box = base.slice();
      apply();
    }
    // A new picture; the view stays where it was if `keep` and the picture
    // has the same size.
    function show(next, keep) {
      const nextBase = next.getAttribute("viewBox").split(/[\s,]+/).map(Number);
      const same = nextBase.every((v, i) => v === base[i]);
      svg = next;
      base = nextBase;
      if (!(keep && same)) box = base.slice();
      apply();
    }
    container.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = container.getBoundingClientRect();
      zoom(ev.deltaY < 0 ? 1.2 : 1 / 1.2, (ev.clientX - r.left) / r.width,
           (ev.clientY - r.top) / r.height);
    }, { passive: false });
    let drag = null;
    let dragged = false;  // the last press moved the picture
    container.addEventListener("mousedown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, box: box.slice(), moved: false };
      dragged = false;
      container.classList.add("dragging");
    });
    window.addEventListener("mouseup", () => {
      container.classList.remove("dragging");
      dragged = drag !== null && drag.moved;
      drag = null;
    });
    container.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      const r = container.getBoundingClientRect();
      const scale = Math.max(drag.box[2] / r.width, drag.box[3] / r.height);
      drag.moved = drag.moved || Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) > 3;
      box = [drag.box[0] - (ev.clientX - drag.x) * scale,
             drag.box[1] - (ev.clientY - drag.y) * scale, drag.box[2], drag.box[3]];
      apply();
    });
    return { show, reset, zoomIn: () => zoom(1.25, 0.5, 0.5), zoomOut: () => zoom(0.8, 0.5, 0.5),
             zoomBy: (factor) => zoom(factor, 0.5, 0.5), dragged: () => dragged };
  }

  // Which leaves contain `query` (case-insensitive): a prefix count over
  // the leaf order, so any subtree's matches are one subtraction.
  function matchLeaves(t, query) {
    const q = query.trim().toLowerCase();
    const before = new Int32Array(t.leaves + 1);
    if (q === "") return { q, before, total: 0 };
    t.leafOrder.forEach((v, i) => {
      before[i + 1] = before[i] + (leafName(t, v).toLowerCase().includes(q) ? 1 : 0);
    });
    return { q, before, total: before[t.leaves] };
  }

  function matchesUnder(t, m, v) {
    const lo = t.pos[t.first[v]];
    return m.before[lo + t.size[v]] - m.before[lo];
  }

  // Marks the drawn leaves matching the query and dims the rest; a wedge
  // holding matches is marked too.
  function markMatches(t, svg, m) {
    for (const node of svg.querySelectorAll("text.leaf, path.collapsed, text.collapsed-label")) {
      const v = Number(node.getAttribute("data-node"));
      const match = m.q !== "" && matchesUnder(t, m, v) > 0;
      node.classList.toggle("hit", match);
      node.classList.toggle("dim", m.q !== "" && !match);
    }
  }

  // The fit behind a version: its job's method parameters and the shape of
  // the data it was trained on (either may have been deleted since).
  async function fitFacts(model) {
    const [job, dataset] = await Promise.allSettled([
      fetchJson("/api/v1/jobs/" + encodeURIComponent(model.job_id)),
      fetchJson("/api/v1/datasets/" + encodeURIComponent(model.dataset_id))]);
    const rows = dataset.status === "fulfilled" ? dataset.value.rows
      : (model.metadata || {}).dataset_rows;
    const cols = dataset.status === "fulfilled" ? dataset.value.cols : model.input_dim;
    const shape = el("dd", { id: "model-shape" },
      rows !== undefined ? Number(rows).toLocaleString("en") + " rows \u00d7 " +
                           Number(cols).toLocaleString("en") + " columns"
                         : Number(cols).toLocaleString("en") + " columns",
      dataset.status === "fulfilled" ? "" : " (dataset deleted)");
    const params = [];
    const spec = job.status === "fulfilled" ? job.value.spec || {} : {};
    const method = methodOf(spec);
    // Zero, empty and false fields take the method's defaults (dendro.proto).
    for (const [k, v] of Object.entries(method ? spec[method] || {} : {})) {
      const unset = v === "" || v === 0 || v === "0" || v === false;
      params.push(el("tr", { class: "param", "data-name": k }, el("td", {}, k),
        el("td", { class: unset ? "default" : null }, unset ? "default" : JSON.stringify(v))));
    }
    const metadata = Object.entries(model.metadata || {}).sort((a, b) => a[0].localeCompare(b[0]))
      .map(([k, v]) => el("tr", { class: "meta", "data-name": k }, el("td", {}, k),
                          el("td", {}, v)));
    const paramsBox = job.status === "fulfilled"
      ? table(["Parameter (" + method + ")", "Value"], params, { id: "model-params" })
      : el("p", { class: "empty", id: "model-params" }, "The fit's job record is gone.");
    const metadataBox = table(["Recorded by the fit", "Value"], metadata, { id: "model-metadata" });
    return { shape, paramsBox, metadataBox };
  }

  // A download: the answer to the link's address saved under `filename`,
  // fetched with the key (a plain link could not send it).
  function downloadLink(id, label, path, filename) {
    const a = el("a", { id, class: "download", href: path, download: filename }, label);
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      fetchBlob(a.getAttribute("href")).then((blob) => {
        const url = URL.createObjectURL(blob);
        const save = el("a", { href: url, download: filename });
        document.body.appendChild(save);
        save.click();
        save.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
        a.setAttribute("data-downloaded", String(blob.size));
      }).catch(showError);
    });
    return a;
  }

  async function treePage(gen, name, version, params) {
    const started = performance.now();
    const model = await fetchJson(modelPath(name, version));
    if (gen !== generation) return;
    const path = modelPath(name, model.version);
    const [doc, fit] = await Promise.all([fetchJson(path + "/tree"), fitFacts(model)]);
    if (gen !== generation) return;
    const fetched = performance.now() - started;
    const t = indexTree(doc);
    const tipsParam = parseInt(params.get("tips") || "", 10);
    const tips = Math.max(2, Math.min(TIPS_MAX, tipsParam > 0 ? tipsParam : TIPS_DEFAULT));
    const colorParam = params.get("color");
    let level = colorParam === null || colorParam === "" ? autoColorLevel(t)
      : Math.max(0, Math.min(t.leaves, parseInt(colorParam, 10) || 0));

    const stem = model.name + "-v" + model.version;
    const svgLink = () => path + "/tree.svg" + (level > 0 ? "?color_level=" + level : "");
    const downloads = el("p", { class: "downloads", id: "downloads" }, "Download: ",
      downloadLink("download-newick", "Newick", path + "/tree?format=newick", stem + ".nwk"), " ",
      downloadLink("download-linkage", "linkage (.npy)", path + "/tree?format=linkage",
                   stem + ".npy"), " ",
      downloadLink("download-json", "JSON", path + "/tree?include_points=true", stem + ".json"),
      " ", downloadLink("download-svg", "SVG", svgLink(), stem + ".svg"));
    const facts = el("dl", { class: "facts", id: "model-facts" },
      el("dt", {}, "Model"), el("dd", {}, link("#/models/" + encodeURIComponent(model.name),
                                               model.name)),
      el("dt", {}, "Version"), el("dd", { id: "model-version" }, model.version, " ", labels(model)),
      el("dt", {}, "Method"), el("dd", {}, model.method),
      el("dt", {}, "Leaf clusters"), el("dd", { id: "num-leaves" }, model.num_leaves),
      el("dt", {}, "Input columns"), el("dd", {}, model.input_dim),
      el("dt", {}, "Data shape"), fit.shape,
      el("dt", {}, "Trained on"), el("dd", { class: "id" }, model.dataset_id),
      el("dt", {}, "Job"), el("dd", { class: "id" }, model.job_id),
      el("dt", {}, "Created"), el("dd", {}, when(model.create_time)));
    const search = el("input", { type: "search", id: "leaf-search", placeholder: "search leaves",
                                 value: params.get("q") || "" });
    const count = el("span", { id: "match-count" });
    const colorInput = el("input", { type: "number", id: "color-level", min: 0,
                                     max: model.num_leaves, value: level });
    const zoomIn = el("button", { type: "button", id: "zoom-in", title: "zoom in" }, "+");
    const zoomOut = el("button", { type: "button", id: "zoom-out", title: "zoom out" }, "\u2212");
    const zoomReset = el("button", { type: "button", id: "zoom-reset" }, "reset");
    const fold = el("button", { type: "button", id: "tree-fold",
                                title: "close every subtree opened since" }, "fold");
    const status = el("span", { id: "tree-status" });
    const info = el("div", { id: "node-info", class: "hidden" });
    const tree = el("div", { id: "tree" });
    // What the fit itself flags (a degenerate t-NEB cut, say) comes first.
    const warning = (model.metadata || {}).warning;
    render(model.name + " v" + model.version,
      el("h2", {}, "Model " + model.name + " v" + model.version),
      ...(warning ? [el("p", { class: "warning", id: "model-warning" }, "Warning: " + warning)]
                  : []),
      facts,
      el("div", { class: "fit" }, fit.paramsBox, fit.metadataBox),
      downloads,
      el("div", { class: "toolbar" }, zoomIn, zoomOut, zoomReset, fold,
         el("label", { for: "color-level" }, "clusters"), colorInput,
         el("label", { for: "leaf-search" }, "find"), search, count),
      el("p", { class: "status" }, status), tree);
    tree.appendChild(info);

    const zoomer = makeZoomable(tree);
    zoomIn.onclick = zoomer.zoomIn;
    zoomOut.onclick = zoomer.zoomOut;
    zoomReset.onclick = zoomer.reset;
    let open = new Uint8Array(t.n);
    openTop(t, open, t.root, tips);
    let cluster = null;
    let matches = matchLeaves(t, search.value);
    let svg = null;
    let note = "";

    function recolour() {
      cluster = level > 0 ? cutToK(t, level) : null;
      note = level > 0 && cluster === null
        ? " (this tree has no cut into " + level + " clusters: one colour)" : "";
      document.getElementById("download-svg").setAttribute("href", svgLink());
      tree.setAttribute("data-color-level", cluster === null ? 0 : level);
    }

    function draw(keepView) {
      const started = performance.now();
      const drawn = drawTree(t, open, cluster);
      if (svg) svg.remove();
      svg = drawn.svg;
      svg.setAttribute("id", "tree-svg");
      svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
      tree.insertBefore(svg, info);
      zoomer.show(svg, keepView);
      markMatches(t, svg, matches);
      tree.setAttribute("data-visible-tips", drawn.tips);
      tree.setAttribute("data-visible-leaves", drawn.leaves);
      tree.setAttribute("data-drawn-nodes", drawn.nodes);
      tree.setAttribute("data-draw-ms", (performance.now() - started).toFixed(1));
      status.textContent = drawn.leaves === t.leaves
        ? t.leaves + " leaves"
        : "showing " + drawn.tips + " of " + t.leaves + " leaves: " + (drawn.tips - drawn.leaves) +
          " folded subtrees (click one to open it, click an open node to close it)";
      status.textContent += note;
    }

    function showMatches() {
      matches = matchLeaves(t, search.value);
      if (svg) markMatches(t, svg, matches);
      tree.setAttribute("data-hits", matches.total);
      count.textContent = matches.q ? matches.total + " of " + t.leaves + " leaves match" : "";
    }

    tree.addEventListener("click", (ev) => {
      if (zoomer.dragged()) return;  // a drag is not a click on where it began
      const target = ev.target.closest("[data-node]");
      if (!target) return;
      const v = Number(target.getAttribute("data-node"));
      if (t.kids[v].length === 0) return;
      if (open[v]) closeSubtree(t, open, v);
      else openTop(t, open, v, OPEN_STEP);
      draw(false);
    });
    tree.addEventListener("mouseover", (ev) => {
      const target = ev.target.closest("[data-node]");
      if (!target) return;
      const v = Number(target.getAttribute("data-node"));
      const leaf = t.kids[v].length === 0;
      const lines = [
        el("div", { class: "title" }, leaf ? "leaf " + leafName(t, v) : "node " + v),
        el("div", {}, "size: " + t.size[v] + (t.size[v] === 1 ? " leaf" : " leaves")),
        el("div", {}, "height: " + fmt(t.height[v]))];
      // The id 'dendro assign --stable-ids' answers for this cluster.
      if (t.stableIds) lines.push(el("div", { class: "stable-id" }, "stable id: " + t.stableIds[v]));
      if (!leaf) lines.push(el("div", {}, "top labels: " + topLabels(t, v).join(", ")));
      if (matches.q) lines.push(el("div", {}, "matches: " + matchesUnder(t, matches, v)));
      info.replaceChildren(...lines);
      info.setAttribute("data-node", v);
      info.setAttribute("data-size", t.size[v]);
      const r = tree.getBoundingClientRect();
      info.setAttribute("data-x", Math.round(ev.clientX - r.left));
      info.classList.remove("hidden");
      info.style.left = Math.min(ev.clientX - r.left + 14, r.width - 260) + "px";
      info.style.top = (ev.clientY - r.top + 14) + "px";
    });
    tree.addEventListener("mouseout", (ev) => {
      if (ev.target.closest("[data-node]")) info.classList.add("hidden");
    });
    fold.onclick = () => {
      open = new Uint8Array(t.n);
      openTop(t, open, t.root, tips);
      draw(false);
    };
    colorInput.onchange = () => {
      level = Math.max(0, Math.min(t.leaves, parseInt(colorInput.value, 10) || 0));
      recolour();
      draw(true);
    };
    search.oninput = showMatches;

    recolour();
    showMatches();
    draw(false);
    const startZoom = parseFloat(params.get("zoom") || "");
    if (startZoom > 0 && isFinite(startZoom)) zoomer.zoomBy(startZoom);
    // From the page's start to a drawn tree, for the test to print.
    tree.setAttribute("data-open-ms", performance.now().toFixed(0));
    tree.setAttribute("data-fetch-ms", fetched.toFixed(0));
    tree.setAttribute("data-rendered", "true");
    loaded("tree");
  }

  // --- pages -------------------------------------------------------------

  async function route() {
    const gen = ++generation;
    if (pollTimer) clearTimeout(pollTimer);
    takeKeyFromHash();
    const { parts, params } = parseHash();
    document.body.setAttribute("data-loaded", "false");
    try {
      if (parts.length === 0) {
        const [jobs, models, datasets] = await Promise.all([
          fetchAll("/api/v1/jobs", "jobs"), fetchAll("/api/v1/models", "models"),
          fetchAll("/api/v1/datasets", "datasets")]);
        if (gen !== generation) return;
        render("", el("h2", {}, "Jobs"), jobsSection(gen, jobs), el("h2", {}, "Models"),
               modelsTable(models), el("h2", {}, "Datasets"), datasetsTable(datasets));
        loaded("overview");
      } else if (parts[0] === "jobs" && parts.length === 1) {
        const jobs = await fetchAll("/api/v1/jobs", "jobs");
        if (gen !== generation) return;
        render("Jobs", el("h2", {}, "Jobs"), jobsSection(gen, jobs));
        loaded("jobs");
      } else if (parts[0] === "datasets" && parts.length === 1) {
        const datasets = await fetchAll("/api/v1/datasets", "datasets");
        if (gen !== generation) return;
        render("Datasets", el("h2", {}, "Datasets"), datasetsTable(datasets));
        loaded("datasets");
      } else if (parts[0] === "models" && parts.length === 1) {
        const models = await fetchAll("/api/v1/models", "models");
        if (gen !== generation) return;
        render("Models", el("h2", {}, "Models"), modelsTable(models));
        loaded("models");
      } else if (parts[0] === "models" && parts.length === 2) {
        const versions = await fetchAll("/api/v1/models?name=" + encodeURIComponent(parts[1]),
                                        "models");
        if (gen !== generation) return;
        if (versions.length === 0) throw new ApiError(404, "no model named '" + parts[1] + "'");
        versions.sort((a, b) => Number(a.version) - Number(b.version));
        render(parts[1], el("h2", {}, "Model " + parts[1]), versionsTable(parts[1], versions));
        loaded("model");
      } else if (parts[0] === "models" && parts.length === 4 && parts[2] === "versions") {
        await treePage(gen, parts[1], parts[3], params);
      } else if (parts[0] === "models" && parts.length === 5 && parts[2] === "diff") {
        await diffPage(gen, parts[1], parts[3], parts[4]);
      } else {
        throw new ApiError(404, "no such page: #/" + parts.join("/"));
      }
    } catch (err) {
      if (gen === generation) showError(err);
    }
  }

  document.getElementById("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("key-input");
    setApiKey(input.value.trim());
    input.value = "";
    route();
  });
  document.getElementById("key-forget").addEventListener("click", () => {
    setApiKey("");
    route();
  });
  window.addEventListener("hashchange", route);
  showKeyState();
  route();
})();
