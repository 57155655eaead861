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
// page), color=K (colour the tree's K clusters) and zoom=F (start the tree
// enlarged F times about its centre).
//
// Every value from the server reaches the page through textContent or an
// attribute set by the DOM API, never as markup; the tree's SVG (drawn by
// the server) is parsed as XML and stripped of scripts and event handlers.
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

  async function fetchText(path) {
    const headers = {};
    const key = currentKey();
    if (key) headers["Authorization"] = "Bearer " + key;
    const res = await fetch(path, { headers, cache: "no-store" });
    const text = await res.text();
    if (!res.ok) {
      let message = "HTTP " + res.status;
      try {
        const body = JSON.parse(text);
        if (body && typeof body.error === "string") message = body.error;
      } catch (e) {
        // not JSON: keep the status line
      }
      throw new ApiError(res.status, message);
    }
    return text;
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
               k === "for" || k === "step") node.setAttribute(k, String(v));
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
        el("td", {}, latest.method),
        el("td", { class: "num" }, latest.num_leaves),
        el("td", { class: "num" }, latest.input_dim),
        el("td", {}, when(latest.create_time))));
    }
    return table(["Model", { label: "Versions", num: true }, "Latest", "Method",
                  { label: "Leaves", num: true }, { label: "Inputs", num: true }, "Created"],
      rows, { id: "models" });
  }

  function versionsTable(name, versions) {
    return table([{ label: "Version", num: true }, "Labels", "Method", { label: "Leaves", num: true },
                  { label: "Inputs", num: true }, "Dataset", "Job", "Created", "Owner", ""],
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
                          encodeURIComponent(m.version), "tree")))), { id: "versions" });
  }

  // --- the tree ----------------------------------------------------------

  // Parses the server's SVG as XML and keeps only drawing: no scripts,
  // no event handlers, no external references.
  function importSvg(text) {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const root = doc.documentElement;
    if (!root || root.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length > 0) {
      throw new Error("the tree picture could not be read");
    }
    for (const bad of root.querySelectorAll("script, foreignObject, a, use, image")) bad.remove();
    for (const node of [root, ...root.querySelectorAll("*")]) {
      for (const attr of [...node.attributes]) {
        const n = attr.name.toLowerCase();
        if (n.startsWith("on") || n === "href" || n === "xlink:href") node.removeAttribute(attr.name);
      }
    }
    const svg = document.importNode(root, true);
    svg.setAttribute("id", "tree-svg");
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    return svg;
  }

  // Zoom and pan by rewriting the viewBox.
  function makeZoomable(container, svg) {
    const base = svg.getAttribute("viewBox").split(/[\s,]+/).map(Number);
    let box = base.slice();
    const apply = () => svg.setAttribute("viewBox", box.map((v) => v.toFixed(2)).join(" "));
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
    container.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = container.getBoundingClientRect();
      zoom(ev.deltaY < 0 ? 1.2 : 1 / 1.2, (ev.clientX - r.left) / r.width,
           (ev.clientY - r.top) / r.height);
    }, { passive: false });
    let drag = null;
    container.addEventListener("mousedown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, box: box.slice() };
      container.classList.add("dragging");
    });
    window.addEventListener("mouseup", () => {
      drag = null;
      container.classList.remove("dragging");
    });
    container.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      const r = container.getBoundingClientRect();
      const scale = Math.max(drag.box[2] / r.width, drag.box[3] / r.height);
      box = [drag.box[0] - (ev.clientX - drag.x) * scale,
             drag.box[1] - (ev.clientY - drag.y) * scale, drag.box[2], drag.box[3]];
      apply();
    });
    return { zoomIn: () => zoom(1.25, 0.5, 0.5), zoomOut: () => zoom(0.8, 0.5, 0.5), reset,
             zoomBy: (factor) => zoom(factor, 0.5, 0.5) };
  }

  // Marks the leaf labels containing `query` (case-insensitive) and dims
  // the rest; an empty query clears the marks. Returns the match count.
  function searchLeaves(svg, query) {
    const q = query.trim().toLowerCase();
    let hits = 0;
    for (const t of svg.querySelectorAll("text.leaf")) {
      const match = q !== "" && t.textContent.toLowerCase().includes(q);
      t.classList.toggle("hit", match);
      t.classList.toggle("dim", q !== "" && !match);
      if (match) hits++;
    }
    return hits;
  }

  async function treePage(gen, name, version, params) {
    const model = await fetchJson(modelPath(name, version));
    if (gen !== generation) return;
    const color = parseInt(params.get("color") || "0", 10) || 0;
    const facts = el("dl", { class: "facts", id: "model-facts" },
      el("dt", {}, "Model"), el("dd", {}, link("#/models/" + encodeURIComponent(model.name),
                                               model.name)),
      el("dt", {}, "Version"), el("dd", { id: "model-version" }, model.version, " ", labels(model)),
      el("dt", {}, "Method"), el("dd", {}, model.method),
      el("dt", {}, "Leaf clusters"), el("dd", { id: "num-leaves" }, model.num_leaves),
      el("dt", {}, "Input columns"), el("dd", {}, model.input_dim),
      el("dt", {}, "Trained on"), el("dd", { class: "id" }, model.dataset_id),
      el("dt", {}, "Created"), el("dd", {}, when(model.create_time)));
    const search = el("input", { type: "search", id: "leaf-search", placeholder: "search leaves",
                                 value: params.get("q") || "" });
    const count = el("span", { id: "match-count" });
    const colorInput = el("input", { type: "number", id: "color-level", min: 0,
                                     max: model.num_leaves, value: color });
    const zoomIn = el("button", { type: "button", id: "zoom-in", title: "zoom in" }, "+");
    const zoomOut = el("button", { type: "button", id: "zoom-out", title: "zoom out" }, "\u2212");
    const zoomReset = el("button", { type: "button", id: "zoom-reset" }, "reset");
    const tree = el("div", { id: "tree" }, el("p", { class: "status" }, "Drawing the tree\u2026"));
    render(model.name + " v" + model.version,
      el("h2", {}, "Model " + model.name + " v" + model.version), facts,
      el("div", { class: "toolbar" }, zoomIn, zoomOut, zoomReset,
         el("label", { for: "color-level" }, "clusters"), colorInput,
         el("label", { for: "leaf-search" }, "find"), search, count),
      tree);

    async function draw(level) {
      const svgText = await fetchText(modelPath(name, model.version) + "/tree.svg" +
                                      (level > 0 ? "?color_level=" + level : ""));
      if (gen !== generation) return;
      const svg = importSvg(svgText);
      tree.replaceChildren(svg);
      const zoomer = makeZoomable(tree, svg);
      zoomIn.onclick = zoomer.zoomIn;
      zoomOut.onclick = zoomer.zoomOut;
      zoomReset.onclick = zoomer.reset;
      const startZoom = parseFloat(params.get("zoom") || "");
      if (startZoom > 0 && isFinite(startZoom)) zoomer.zoomBy(startZoom);
      const update = () => {
        const hits = searchLeaves(svg, search.value);
        const total = svg.querySelectorAll("text.leaf").length;
        tree.setAttribute("data-hits", hits);
        count.textContent = search.value.trim() ? hits + " of " + total + " leaves match" : "";
      };
      search.oninput = update;
      update();
    }
    colorInput.onchange = () => {
      const level = Math.max(0, parseInt(colorInput.value, 10) || 0);
      draw(level).catch(showError);
    };
    await draw(color);
    if (gen === generation) loaded("tree");
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
