#!/usr/bin/python3
"""The web console (--http_listen) in a real browser: headless Chromium.

Starts a real dendrod with API keys, fits a model whose leaf names include
markup (labelled "prod") and one of 10,000 leaves, and keeps a third job
running; then Chromium loads the console's pages from dendrod and the test
reads the DOM Chromium rendered:
  * the overview lists both jobs (the running one with its progress bar),
    the model with its labels and the dataset, and the key given in the
    address is gone from the page;
  * the tree page draws the model's tree inline, with one edge per non-root
    node and one label per leaf; the leaf search (q=) marks exactly the
    leaves whose names match, and names with markup stay text; it shows the
    fit's parameters and data shape;
  * colouring cuts the tree as the server's CutToK does, and by default
    picks the most even cut (the rule re-implemented here);
  * driven over the DevTools protocol (chromium_cdp.py): hovering a node
    shows its size, height and top labels, each download link saves what
    the API serves, and the 10,000-leaf tree opens folded to a bounded
    number of tips that a click opens and closes (its open time printed);
  * without a key the page shows the 401 error.
Screenshots of the overview and the tree pages are written to OUT_DIR for a
person to look at.

Usage: http_console_test.py DENDROD_BINARY OUT_DIR
"""
import html.parser
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_lib as hl  # noqa: E402
from http_lib import pb, get_json, KEYS  # noqa: E402
from grpc_blackbox_test import hierarchical_logits  # noqa: E402
from chromium_cdp import Chromium  # noqa: E402
import numpy as np  # noqa: E402

OUT_DIR = None

# 12 leaves (3 groups of 4 classes); three contain "cat", one is markup.
LEAF_NAMES = ["cat", "wildcat", "Catfish", "dog", "<img src=x onerror=alert(1)>", "wolf",
              "fox & hound", "ant", "bee", "\"quoted\"", "moth", "wasp"]


# The console's defaults (server/transport/console/app.js).
TIPS_DEFAULT = 100
OPEN_STEP = 20
BIG_LEAVES = 10000
# The page has finished (drawn, or shown an error).
LOADED = "document.body !== null && ['true', 'error'].includes(document.body.dataset.loaded)"


class Tree:
    """The JSON tree of .../tree, with the console's rules re-done here."""

    def __init__(self, doc):
        self.doc = doc
        self.kids = {n["id"]: n["children"] for n in doc["nodes"]}
        self.parent = {n["id"]: n["parent"] for n in doc["nodes"]}
        self.height = {n["id"]: n["height"] for n in doc["nodes"]}
        self.root = next(v for v, p in self.parent.items() if p < 0)
        self.names = doc.get("leaf_names") or []
        self.size = {}
        for v in reversed(self.preorder()):
            self.size[v] = 1 if not self.kids[v] else sum(self.size[c] for c in self.kids[v])
        self.cut_order = sorted((v for v in self.kids if self.kids[v]),
                                key=lambda v: (self.height[v], v), reverse=True)

    def preorder(self, v=None):
        out, stack = [], [self.root if v is None else v]
        while stack:
            u = stack.pop()
            out.append(u)
            stack.extend(reversed(self.kids[u]))
        return out

    def name(self, leaf):
        return self.names[leaf] if leaf < len(self.names) else str(leaf)

    def leaf_names_under(self, v):
        return {self.name(u) for u in self.preorder(v) if not self.kids[u]}

    def auto_k(self):
        """The most even cut by Pielou's evenness, k in [2, 20], ties to the
        smaller k."""
        sizes, best, best_score = [self.size[self.root]], 0, -1.0
        total = self.size[self.root]
        for v in self.cut_order:
            sizes.remove(self.size[v])
            sizes.extend(self.size[c] for c in self.kids[v])
            k = len(sizes)
            if k > 20:
                break
            score = -sum(s / total * math.log(s / total) for s in sizes) / math.log(k)
            if score > best_score + 1e-9:
                best, best_score = k, score
        return best


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.text = [], []

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def all_text(self):
        return "".join(self.text) + "".join(c.all_text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag=None, cls=None, **attrs):
        for n in self.walk():
            if tag is not None and n.tag != tag:
                continue
            if cls is not None and cls not in n.classes():
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            yield n

    def find(self, *args, **kwargs):
        return next(self.find_all(*args, **kwargs), None)


class Dom(html.parser.HTMLParser):
    """The dumped DOM as a tree of Nodes (void elements closed at once)."""
    VOID = {"meta", "link", "input", "br", "img", "hr", "area", "base", "col", "embed", "source",
            "track", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


class ConsoleBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.browser = chromium()
        if cls.browser is None:
            print("SKIP: no chromium binary (Debian package chromium)", flush=True)
            raise unittest.SkipTest("no chromium binary (Debian package chromium)")
        cls.dir = tempfile.mkdtemp(prefix="dendro_console_")
        cls.profile = tempfile.mkdtemp(prefix="dendro_chromium_")
        cls.server = hl.HttpServer(cls.dir)
        s = cls.server
        x, _ = hierarchical_logits(600, 3, 4, seed=6)
        cls.ds = hl.upload(s, x, name="console-demo").id
        done = hl.fit(s, pb.JobSpec(dataset_id=cls.ds, model_name="demo", l2h=pb.L2hParams(),
                                    leaf_names=LEAF_NAMES))
        assert done.state == pb.JOB_STATE_SUCCEEDED, done
        cls.done = done
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="demo", label="prod", version=1),
                               metadata=hl.md("writer"), timeout=10)
        # 10,000 classes, most of them never predicted: an L2H tree with
        # that many leaves from little data.
        big = np.random.default_rng(7).normal(size=(200, BIG_LEAVES)).astype(np.float32)
        big_done = hl.fit(s, pb.JobSpec(dataset_id=hl.upload(s, big, name="big").id,
                                        model_name="big", l2h=pb.L2hParams()))
        assert big_done.state == pb.JOB_STATE_SUCCEEDED, big_done
        # Two versions of one model, for the diff page: the second fitted on
        # more rows.
        for rows in (400, 600):
            evolved = hl.fit(s, pb.JobSpec(dataset_id=hl.upload(s, x[:rows], name="evolve").id,
                                           model_name="evolve", l2h=pb.L2hParams(),
                                           leaf_names=LEAF_NAMES))
            assert evolved.state == pb.JOB_STATE_SUCCEEDED, evolved
        # A t-NEB tree that is degenerate at k = 2 by the documented rule: a
        # blob of 570 rows and one of 30 far away, cut into two clusters.
        rng = np.random.default_rng(8)
        lop = np.vstack([rng.normal(size=(570, 2)), rng.normal(size=(30, 2)) + 20])
        lopsided = hl.fit(s, pb.JobSpec(
            dataset_id=hl.upload(s, lop.astype(np.float32), name="lopsided").id,
            model_name="lopsided",
            tneb=pb.TnebParams(components=4, restarts=2, seed=1, path_points=20, path_steps=20,
                               eval_points=64, diagnose_k=2)))
        assert lopsided.state == pb.JOB_STATE_SUCCEEDED, lopsided
        # (Started last: one job runs at a time.)
        cls.running = hl.fit(s, hl.long_job_spec(cls.ds, "endless"), wait=False)
        # The console shows jobs as the server has them: wait until this
        # one runs.
        while get_json(f"{s.base}/api/v1/jobs/{cls.running.id}")["state"] != "JOB_STATE_RUNNING":
            time.sleep(0.1)
        os.makedirs(OUT_DIR, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        s = cls.server
        try:
            s.jobs.CancelJob(pb.CancelJobRequest(id=cls.running.id), metadata=hl.md("writer"),
                             timeout=10)
        finally:
            if s.proc.poll() is None:
                s.stop()
            shutil.rmtree(cls.dir, ignore_errors=True)
            shutil.rmtree(cls.profile, ignore_errors=True)

    def chromium(self, url, *mode):
        """Runs headless Chromium on `url`; returns its stdout. The virtual
        time budget lets the page's fetches and its first polls finish
        before the DOM is dumped or the picture taken."""
        out = subprocess.run(
            [self.browser, "--headless", "--disable-gpu", "--no-sandbox",
             "--no-first-run", "--disable-extensions", f"--user-data-dir={self.profile}",
             "--virtual-time-budget=8000", "--window-size=1400,1000", *mode, url],
            capture_output=True, text=True, cwd=self.profile)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        return out.stdout

    def driven(self):
        """A Chromium to drive, closed at the end of the test."""
        profile = tempfile.mkdtemp(prefix="dendro_cdp_")
        browser = Chromium(self.browser, profile)

        def close():
            browser.close()
            shutil.rmtree(profile, ignore_errors=True)
        self.addCleanup(close)
        return browser

    def tree(self, name):
        return Tree(get_json(f"{self.server.base}/api/v1/models/{name}/versions/1/tree"))

    def server_clusters(self, k):
        """Leaf name -> cluster of the server's own SVG at color_level=k."""
        status, _, raw = hl.request(
            f"{self.server.base}/api/v1/models/demo/versions/1/tree.svg?color_level={k}",
            "reader")
        self.assertEqual(status, 200)
        return {t.all_text(): [c for c in t.classes() if c.startswith("cluster-")]
                for t in Dom(raw.decode()).root.find_all("text", cls="leaf")}

    def page(self, fragment):
        return self.server.base + "/#" + fragment

    def dom(self, fragment):
        return Dom(self.chromium(self.page(fragment), "--dump-dom")).root

    def screenshot(self, fragment, name):
        path = os.path.join(OUT_DIR, name)
        if os.path.exists(path):
            os.remove(path)
        self.chromium(self.page(fragment), f"--screenshot={path}")
        with open(path, "rb") as f:
            head = f.read(8)
        self.assertEqual(head, b"\x89PNG\r\n\x1a\n", path)
        self.assertGreater(os.path.getsize(path), 10000, path)  # more than a blank page
        print(f"screenshot: {path}", flush=True)

    def test_overview_lists_jobs_models_datasets(self):
        key = urllib.parse.quote(KEYS["reader"])
        root = self.dom(f"/?key={key}")
        body = root.find("body")
        self.assertEqual(body.attrs.get("data-loaded"), "true", root.all_text()[:2000])
        self.assertEqual(body.attrs.get("data-view"), "overview")

        done = root.find("tr", cls="job", data_job_id=self.done.id)
        self.assertIsNotNone(done, "no row for the finished job")
        self.assertEqual(done.attrs["data-state"], "succeeded")
        self.assertIn("100%", done.all_text())
        self.assertIn("demo v1", done.all_text())

        running = root.find("tr", cls="job", data_job_id=self.running.id)
        self.assertIsNotNone(running, "no row for the running job")
        self.assertEqual(running.attrs["data-state"], "running")
        bar = running.find("progress", cls="job-progress")
        self.assertIsNotNone(bar)
        live = get_json(f"{self.server.base}/api/v1/jobs/{self.running.id}")
        self.assertLessEqual(float(bar.attrs["value"]), float(live["progress"]))
        self.assertGreaterEqual(float(bar.attrs["value"]), 0.0)
        # The latest job first, as `dendro jobs list` shows them.
        order = [r.attrs.get("data-job-id") for r in root.find_all("tr", cls="job")]
        self.assertLess(order.index(self.running.id), order.index(self.done.id), order)
        self.assertIn("endless", running.all_text())
        self.assertIn("ghhc", running.all_text())

        model = root.find("tr", cls="model", data_model="demo")
        self.assertIsNotNone(model)
        self.assertIn("l2h", model.all_text())
        # The labels column: the registry's label and the version it names.
        label = model.find("td", cls="labels").find("span", cls="label")
        self.assertIsNotNone(label, model.all_text())
        self.assertEqual((label.attrs.get("data-label"), label.attrs.get("data-version")),
                         ("prod", "1"))
        self.assertIn("prod", label.all_text())
        self.assertIsNone(root.find("tr", cls="model", data_model="big").find("span", cls="label"))
        self.assertIsNotNone(root.find("tr", cls="dataset", data_dataset_id=self.ds))
        # The key went from the address into session storage, not the page.
        self.assertNotIn(KEYS["reader"], self.chromium(self.page(f"/?key={key}"), "--dump-dom"))
        self.screenshot(f"/?key={key}", "console-overview.png")

    def test_tree_page_draws_and_searches(self):
        key = urllib.parse.quote(KEYS["reader"])
        tree = get_json(f"{self.server.base}/api/v1/models/demo/versions/1/tree")
        root = self.dom(f"/models/demo/versions/1?q=cat&key={key}")
        body = root.find("body")
        self.assertEqual(body.attrs.get("data-loaded"), "true", root.all_text()[:2000])
        self.assertEqual(body.attrs.get("data-view"), "tree")
        svg = root.find("svg", id="tree-svg")
        self.assertIsNotNone(svg, "the tree's SVG is not in the page")
        self.assertEqual(len(list(svg.find_all("path", cls="edge"))), len(tree["nodes"]) - 1)
        leaves = list(svg.find_all("text", cls="leaf"))
        self.assertEqual(sorted(t.all_text() for t in leaves), sorted(LEAF_NAMES))
        # The search marks exactly the names containing "cat", any case.
        want = sorted(n for n in LEAF_NAMES if "cat" in n.lower())
        hits = sorted(t.all_text() for t in leaves if "hit" in t.classes())
        self.assertEqual(hits, want)
        self.assertEqual(root.find("div", id="tree").attrs.get("data-hits"), str(len(want)))
        self.assertIn(f"{len(want)} of {len(LEAF_NAMES)} leaves match",
                      root.find("span", id="match-count").all_text())
        # Markup in a name stayed text: no element was made of it.
        self.assertIsNone(root.find("img"))
        for button in ("zoom-in", "zoom-out", "zoom-reset", "tree-fold"):
            self.assertIsNotNone(root.find("button", id=button), button)
        # The fit: its data's shape, its job's parameters, its metadata.
        self.assertIn("600 rows \u00d7 12 columns", root.find("dd", id="model-shape").all_text())
        params = root.find("table", id="model-params")
        self.assertIsNotNone(params, root.all_text()[:2000])
        self.assertIsNotNone(params.find("tr", cls="param", data_name="aggregation"))
        self.assertIn("(l2h)", params.all_text())
        meta = root.find("table", id="model-metadata")
        self.assertIn("l2h", meta.find("tr", cls="meta", data_name="method").all_text())
        self.assertIn("600", meta.find("tr", cls="meta", data_name="dataset_rows").all_text())
        self.screenshot(f"/models/demo/versions/1?q=cat&color=3&key={key}", "console-tree.png")

    def test_a_degenerate_cut_is_a_warning_above_the_facts(self):
        key = urllib.parse.quote(KEYS["reader"])
        root = self.dom(f"/models/lopsided/versions/1?key={key}")
        warning = root.find("p", id="model-warning")
        self.assertIsNotNone(warning, root.all_text()[:2000])
        self.assertIn("at k = 2 the largest cluster holds", warning.all_text())
        meta = root.find("table", id="model-metadata")
        self.assertIn("2", meta.find("tr", cls="meta", data_name="diag_k").all_text())
        self.assertIn("true", meta.find("tr", cls="meta", data_name="diag_degenerate").all_text())
        # A fit that flags nothing shows no warning.
        self.assertIsNone(self.dom(f"/models/demo/versions/1?key={key}").find(
            "p", id="model-warning"))

    def test_coloured_and_zoomed_tree(self):
        key = urllib.parse.quote(KEYS["reader"])
        root = self.dom(f"/models/demo/versions/1?color=3&zoom=2&key={key}")
        svg = root.find("svg", id="tree-svg")
        self.assertIsNotNone(svg)
        # zoom=2 halves the viewBox about its centre.
        x0, y0, w0, h0 = map(float, svg.attrs["data-viewbox"].split())
        x, y, w, h = map(float, svg.attrs["viewbox"].split())
        self.assertAlmostEqual(w, w0 / 2, places=1)
        self.assertAlmostEqual(h, h0 / 2, places=1)
        self.assertAlmostEqual(x + w / 2, x0 + w0 / 2, places=1)
        self.assertAlmostEqual(y + h / 2, y0 + h0 / 2, places=1)
        # The page cuts as the server does (CutToK): leaf by leaf the same
        # cluster as in the server's SVG.
        page = {t.all_text(): [c for c in t.classes() if c.startswith("cluster-")]
                for t in svg.find_all("text", cls="leaf")}
        self.assertEqual(page, self.server_clusters(3))
        self.assertEqual({c for cs in page.values() for c in cs},
                         {"cluster-0", "cluster-1", "cluster-2"})

    def test_default_colouring_is_the_most_even_cut(self):
        key = urllib.parse.quote(KEYS["reader"])
        tree = self.tree("demo")
        k = tree.auto_k()
        self.assertGreaterEqual(k, 2)
        root = self.dom(f"/models/demo/versions/1?key={key}")
        self.assertEqual(root.find("div", id="tree").attrs.get("data-color-level"), str(k))
        self.assertEqual(root.find("input", id="color-level").attrs.get("value"), str(k))
        page = {t.all_text(): [c for c in t.classes() if c.startswith("cluster-")]
                for t in root.find("svg", id="tree-svg").find_all("text", cls="leaf")}
        self.assertEqual(page, self.server_clusters(k))
        # As many colours as the cut has clusters.
        sizes = {}
        for cs in page.values():
            sizes[cs[0]] = sizes.get(cs[0], 0) + 1
        self.assertEqual(len(sizes), k)
        print(f"default colouring: k={k}, cluster sizes {sorted(sizes.values())}", flush=True)
        # color=0 still means one colour.
        root = self.dom(f"/models/demo/versions/1?color=0&key={key}")
        self.assertEqual(root.find("div", id="tree").attrs.get("data-color-level"), "0")
        self.assertFalse(any(c.startswith("cluster-") for t in root.find_all("text", cls="leaf")
                             for c in t.classes()))

    def test_hover_and_downloads(self):
        key = urllib.parse.quote(KEYS["reader"])
        tree = self.tree("demo")
        b = self.driven()
        downloads = tempfile.mkdtemp(prefix="dendro_downloads_")
        self.addCleanup(shutil.rmtree, downloads, True)
        b.allow_downloads(downloads)
        b.open(self.page(f"/models/demo/versions/1?key={key}"))
        b.wait_for(LOADED)
        self.assertEqual(b.eval("document.body.getAttribute('data-view')"), "tree")

        # Hover: an inner node (not the root) and then a leaf.
        node = b.eval(f"[...document.querySelectorAll('#tree-svg circle.node')]"
                      f".map(c => Number(c.getAttribute('data-node')))"
                      f".find(v => v !== {tree.root})")
        self.assertIsNotNone(node)
        b.hover(f'#tree-svg circle.node[data-node="{node}"]')
        b.wait_for("!document.getElementById('node-info').classList.contains('hidden')", 10)
        info = b.eval("(() => { const i = document.getElementById('node-info'); return {"
                      "node: i.getAttribute('data-node'), text: i.innerText}; })()")
        self.assertEqual(info["node"], str(node))
        self.assertIn(f"size: {tree.size[node]} leaves", info["text"])
        self.assertIn("height: ", info["text"])
        # The node's stable id, as the served tree gives it (demo is a first
        # version: its ids are its node ids).
        ids = get_json(f"{self.server.base}/api/v1/models/demo/versions/1/tree")["stable_ids"]
        self.assertIn(f"stable id: {ids[node]}", info["text"])
        line = next(x for x in info["text"].split("\n") if x.startswith("top labels: "))
        shown = line[len("top labels: "):].split(", ")
        self.assertEqual(len(shown), min(5, tree.size[node]), line)
        under = tree.leaf_names_under(node)
        for name in shown:
            self.assertIn(name, under, line)
        b.hover('#tree-svg text.leaf[data-node="0"]')
        b.wait_for("document.getElementById('node-info').getAttribute('data-node') === '0'", 10)
        self.assertIn(f"leaf {LEAF_NAMES[0]}", b.eval("document.getElementById('node-info')"
                                                      ".innerText"))

        # Each link saves what the API serves for it.
        base = f"{self.server.base}/api/v1/models/demo/versions/1"
        level = b.eval("document.getElementById('tree').getAttribute('data-color-level')")
        for link, name, path in (
                ("download-newick", "demo-v1.nwk", "/tree?format=newick"),
                ("download-linkage", "demo-v1.npy", "/tree?format=linkage"),
                ("download-json", "demo-v1.json", "/tree?include_points=true"),
                ("download-svg", "demo-v1.svg", f"/tree.svg?color_level={level}")):
            b.eval(f"document.getElementById('{link}').click()")
            target = os.path.join(downloads, name)
            b.wait_for(f"document.getElementById('{link}').hasAttribute('data-downloaded')", 30)
            deadline = time.monotonic() + 30
            while not os.path.exists(target) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(os.path.exists(target), (name, os.listdir(downloads)))
            status, _, want = hl.request(base + path, "reader")
            self.assertEqual(status, 200, path)
            with open(target, "rb") as f:
                self.assertEqual(f.read(), want, name)
        with open(os.path.join(downloads, "demo-v1.npy"), "rb") as f:
            linkage = np.load(f)
        self.assertEqual(linkage.shape, (len(LEAF_NAMES) - 1, 4))
        self.assertEqual(linkage[-1, 3], len(LEAF_NAMES))
        with open(os.path.join(downloads, "demo-v1.json"), "rb") as f:
            self.assertEqual(len(json.load(f)["point_leaf"]), 600)

    def test_large_tree_opens_folded(self):
        key = urllib.parse.quote(KEYS["reader"])
        tree = self.tree("big")
        self.assertEqual(tree.size[tree.root], BIG_LEAVES)
        b = self.driven()
        b.open(self.page(f"/models/big/versions/1?key={key}"))
        b.wait_for(LOADED, 120)
        state = b.eval("(() => { const t = document.getElementById('tree'); return {"
                       "loaded: document.body.getAttribute('data-loaded'),"
                       "rendered: t.getAttribute('data-rendered'),"
                       "tips: Number(t.getAttribute('data-visible-tips')),"
                       "leaves: Number(t.getAttribute('data-visible-leaves')),"
                       "nodes: Number(t.getAttribute('data-drawn-nodes')),"
                       "open_ms: t.getAttribute('data-open-ms'),"
                       "draw_ms: t.getAttribute('data-draw-ms'),"
                       "fetch_ms: t.getAttribute('data-fetch-ms'),"
                       "k: Number(t.getAttribute('data-color-level')),"
                       "edges: document.querySelectorAll('#tree-svg path.edge').length,"
                       "leafText: document.querySelectorAll('#tree-svg text.leaf').length,"
                       "wedges: document.querySelectorAll('#tree-svg path.collapsed').length,"
                       "status: document.getElementById('tree-status').textContent}; })()")
        print(f"{BIG_LEAVES}-leaf tree: opened at {state['open_ms']} ms after the page started "
              f"(fetching the model and tree {state['fetch_ms']} ms, drawing "
              f"{state['draw_ms']} ms), {state['tips']} tips, {state['nodes']} nodes drawn",
              flush=True)
        self.assertEqual((state["loaded"], state["rendered"]), ("true", "true"), state)
        # Folded: at most TIPS_DEFAULT tips, and a binary tree opened by its
        # highest merges shows exactly that many, one shape each.
        self.assertEqual(state["tips"], TIPS_DEFAULT)
        self.assertLessEqual(state["leaves"], TIPS_DEFAULT)
        self.assertEqual(state["nodes"], 2 * state["tips"] - 1)
        self.assertEqual(state["edges"], state["nodes"] - 1)
        self.assertEqual(state["leafText"] + state["wedges"], state["tips"])
        self.assertGreater(state["wedges"], 0)
        self.assertIn(f"showing {TIPS_DEFAULT} of {BIG_LEAVES} leaves", state["status"])
        self.assertEqual(state["k"], tree.auto_k())
        path = os.path.join(OUT_DIR, "console-tree-10000.png")
        b.eval("document.getElementById('tree-status').scrollIntoView()")
        b.screenshot(path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(path), 10000, path)
        print(f"screenshot: {path}", flush=True)

        # The largest wedge: hover tells its size, a click opens at most
        # OPEN_STEP of its tips, a click on it once open folds it again.
        wedge = max((int(v) for v in b.eval(
            "[...document.querySelectorAll('#tree-svg path.collapsed')]"
            ".map(p => p.getAttribute('data-node'))")), key=lambda v: tree.size[v])
        selector = f'#tree-svg path.collapsed[data-node="{wedge}"]'
        b.hover(selector)
        b.wait_for(f"document.getElementById('node-info').getAttribute('data-node') === "
                   f"'{wedge}'", 10)
        self.assertIn(f"size: {tree.size[wedge]} leaves",
                      b.eval("document.getElementById('node-info').innerText"))
        self.assertIn(f"{tree.size[wedge]} leaves", b.eval(
            f"document.querySelector('#tree-svg text.collapsed-label[data-node=\"{wedge}\"]')"
            ".textContent"))
        b.click(selector)
        b.wait_for(f"document.querySelector('#tree-svg circle.node[data-node=\"{wedge}\"]') "
                   "!== null", 10)
        opened = b.eval("Number(document.getElementById('tree').getAttribute("
                        "'data-visible-tips'))")
        self.assertEqual(opened - state["tips"], min(OPEN_STEP, tree.size[wedge]) - 1)
        b.click(f'#tree-svg circle.node[data-node="{wedge}"]')
        b.wait_for(f"document.querySelector('{selector}') !== null", 10)
        self.assertEqual(b.eval("Number(document.getElementById('tree').getAttribute("
                                "'data-visible-tips'))"), state["tips"])

    def test_diff_page_compares_two_versions(self):
        key = urllib.parse.quote(KEYS["reader"])
        versions = self.dom(f"/models/evolve?key={key}")
        links = [a.attrs.get("href") for a in versions.find_all("a", cls="diff-link")]
        self.assertEqual(links, ["#/models/evolve/diff/1/2"])  # version 1 has none before it
        root = self.dom(f"/models/evolve/diff/1/2?key={key}")
        body = root.find("body")
        self.assertEqual(body.attrs.get("data-loaded"), "true", root.all_text()[:2000])
        self.assertEqual(body.attrs.get("data-view"), "diff")
        doc = get_json(f"{self.server.base}/api/v1/models/evolve/versions/2/diff?from=1")
        self.assertEqual((doc["a"]["version"], doc["b"]["version"]), ("1", "2"))
        report = doc["report"]
        self.assertEqual(report["format"], "dendro.diff")
        summary = root.find("table", id="diff-summary").all_text()
        self.assertIn("Robinson", summary)
        self.assertIn(f"{report['robinson_foulds']['distance']} "
                      f"({report['robinson_foulds']['normalized']:.3f})", summary)
        changed = [e for e in report["events"]["list"] if e["type"] != "stayed"]
        rows = list(root.find_all("tr", cls="diff-event"))
        self.assertEqual(len(rows), min(50, len(changed)))
        self.assertEqual([r.attrs["data-type"] for r in rows], [e["type"] for e in changed[:50]])
        picture = root.find("img", id="diff-tanglegram")
        self.assertIsNotNone(picture)
        self.assertEqual(picture.attrs.get("data-drawn"), "true")
        self.assertTrue(picture.attrs.get("src", "").startswith("data:image/svg+xml"))
        status, _, raw = hl.request(
            f"{self.server.base}/api/v1/models/evolve/versions/2/diff.svg?from=1", "reader")
        self.assertEqual(status, 200)
        self.assertIn(b"<svg", raw[:400])
        status, _, raw = hl.request(
            f"{self.server.base}/api/v1/models/evolve/versions/2/diff", "reader")
        self.assertEqual(status, 400)
        self.assertIn(b"query parameter from", raw)
        self.screenshot(f"/models/evolve/diff/1/2?key={key}", "console-diff.png")

    def test_without_a_key_the_page_says_401(self):
        root = self.dom("/")
        error = root.find("p", id="error")
        self.assertIsNotNone(error, root.all_text()[:2000])
        self.assertEqual(error.attrs.get("data-status"), "401")
        self.assertIn("API key", error.all_text())
        self.assertIsNone(root.find("tr", cls="job"))


if __name__ == "__main__":
    hl.set_dendrod(sys.argv.pop(1))
    OUT_DIR = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
