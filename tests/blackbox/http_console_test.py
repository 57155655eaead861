#!/usr/bin/python3
"""The web console (--http_listen) in a real browser: headless Chromium.

Starts a real dendrod with API keys, fits a model whose leaf names include
markup, and keeps a second job running; then Chromium loads the console's
pages from dendrod and the test reads the DOM Chromium rendered:
  * the overview lists both jobs (the running one with its progress bar),
    the model and the dataset, and the key given in the address is gone
    from the page;
  * the tree page holds the model's SVG inline, with one edge per non-root
    node and one label per leaf; the leaf search (q=) marks exactly the
    leaves whose names match, and names with markup stay text;
  * without a key the page shows the 401 error.
Screenshots of the overview and the tree page are written to OUT_DIR for a
person to look at.

Usage: http_console_test.py DENDROD_BINARY OUT_DIR
"""
import html.parser
import json
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

OUT_DIR = None

# 12 leaves (3 groups of 4 classes); three contain "cat", one is markup.
LEAF_NAMES = ["cat", "wildcat", "Catfish", "dog", "<img src=x onerror=alert(1)>", "wolf",
              "fox & hound", "ant", "bee", "\"quoted\"", "moth", "wasp"]


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
        for button in ("zoom-in", "zoom-out", "zoom-reset"):
            self.assertIsNotNone(root.find("button", id=button), button)
        self.screenshot(f"/models/demo/versions/1?q=cat&color=3&key={key}", "console-tree.png")

    def test_coloured_and_zoomed_tree(self):
        key = urllib.parse.quote(KEYS["reader"])
        status, _, raw = hl.request(
            f"{self.server.base}/api/v1/models/demo/versions/1/tree.svg?color_level=3", "reader")
        self.assertEqual(status, 200)
        drawn = Dom(raw.decode()).root.find("svg")
        x0, y0, w0, h0 = map(float, drawn.attrs["viewbox"].split())
        root = self.dom(f"/models/demo/versions/1?color=3&zoom=2&key={key}")
        svg = root.find("svg", id="tree-svg")
        self.assertIsNotNone(svg)
        # zoom=2 halves the viewBox about its centre.
        x, y, w, h = map(float, svg.attrs["viewbox"].split())
        self.assertAlmostEqual(w, w0 / 2, places=1)
        self.assertAlmostEqual(h, h0 / 2, places=1)
        self.assertAlmostEqual(x + w / 2, x0 + w0 / 2, places=1)
        self.assertAlmostEqual(y + h / 2, y0 + h0 / 2, places=1)
        clusters = {c for t in svg.find_all("text", cls="leaf") for c in t.classes()
                    if c.startswith("cluster-")}
        self.assertEqual(clusters, {"cluster-0", "cluster-1", "cluster-2"})

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
