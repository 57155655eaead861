#!/usr/bin/python3
"""deploy/monitoring: the alert rules and the Grafana dashboard, for real.

  RulesTest             `promtool check rules` on every *rules*.yml, and
                        `promtool test rules` on the *.test.yml beside them;
                        every alert has a case where it fires and one where
                        it must not.
  DashboardFileTest     the dashboard JSON: ids, grid, targets, variables.
  LivePrometheusTest    starts dendrod (--metrics_listen) and a real
                        Prometheus scraping it with the rules loaded, runs a
                        small fit through the gRPC API, then evaluates every
                        dashboard panel's PromQL (template variables
                        substituted) through /api/v1/query: each must answer
                        without error and with at least one series. The rules
                        must evaluate without error and none may fire.

A test skips (with its reason printed) only when promtool or prometheus is
not installed (Debian package prometheus).

Usage: monitoring_test.py DENDROD_BINARY|- [unittest names...]
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MONITORING = os.path.join(ROOT, "deploy", "monitoring")
DENDROD = None
GUARD_SECONDS = 120

# What the test puts in place of each template variable (Grafana's own and
# the dashboard's), as Grafana would for the scrape job "dendrod".
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "10m",
    "${job}": "dendrod",
    "$job": "dendrod",
    "${instance}": ".+",
    "$instance": ".+",
}


def rule_files():
    return sorted(f for f in glob.glob(os.path.join(MONITORING, "*rules*.yml"))
                  if not f.endswith(".test.yml"))


def rule_test_files():
    return sorted(glob.glob(os.path.join(MONITORING, "*.test.yml")))


def dashboards():
    return sorted(glob.glob(os.path.join(MONITORING, "*.json")))


def alerts(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def panels(dashboard):
    """Every panel, rows' nested panels included."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def substitute(expr):
    for var in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(var, SUBSTITUTIONS[var])
    return expr


def need(binary):
    path = shutil.which(binary)
    if path is None:
        reason = f"{binary} is not installed (Debian package prometheus)"
        print(f"SKIP: {reason}", file=sys.stderr)
        raise unittest.SkipTest(reason)
    return path


class RulesTest(unittest.TestCase):
    def test_there_are_rules_and_tests(self):
        self.assertTrue(rule_files(), "no *rules*.yml in deploy/monitoring")
        self.assertTrue(rule_test_files(), "no *.test.yml in deploy/monitoring")

    def test_promtool_check_rules(self):
        promtool = need("promtool")
        for path in rule_files():
            with self.subTest(os.path.basename(path)):
                run = subprocess.run([promtool, "check", "rules", path],
                                     capture_output=True, text=True)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertIn("SUCCESS", run.stdout + run.stderr)

    def test_promtool_test_rules(self):
        promtool = need("promtool")
        for path in rule_test_files():
            with self.subTest(os.path.basename(path)):
                # rule_files are relative to the test file.
                run = subprocess.run([promtool, "test", "rules", os.path.basename(path)],
                                     cwd=os.path.dirname(path), capture_output=True, text=True)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_every_rule_file_is_tested_and_every_alert_fires_and_holds(self):
        tested = {}  # rule file -> {alertname: (fires, stays quiet)}
        for path in rule_test_files():
            with open(path) as f:
                doc = yaml.safe_load(f)
            for rf in doc["rule_files"]:
                cases = tested.setdefault(os.path.normpath(
                    os.path.join(os.path.dirname(path), rf)), {})
                for test in doc["tests"]:
                    for case in test.get("alert_rule_test", []):
                        fires, quiet = cases.get(case["alertname"], (False, False))
                        if case.get("exp_alerts"):
                            fires = True
                        else:
                            quiet = True
                        cases[case["alertname"]] = (fires, quiet)
        for path in rule_files():
            self.assertIn(path, tested, f"{path} is named in no test file's rule_files")
            names = [a["alert"] for a in alerts(path)]
            self.assertEqual(len(names), len(set(names)), "alert names repeat")
            for name in names:
                with self.subTest(name):
                    self.assertEqual(tested[path].get(name), (True, True),
                                     f"{name}: needs a case that fires and one that does not")
            for a in alerts(path):
                self.assertIn(a["labels"]["severity"], ("warning", "critical"), a["alert"])
                self.assertIn("summary", a["annotations"], a["alert"])
                self.assertIn("description", a["annotations"], a["alert"])


class DashboardFileTest(unittest.TestCase):
    def test_dashboards_are_well_formed(self):
        self.assertTrue(dashboards(), "no dashboard JSON in deploy/monitoring")
        for path in dashboards():
            with self.subTest(os.path.basename(path)):
                with open(path) as f:
                    d = json.load(f)
                self.assertTrue(d["title"])
                self.assertTrue(d["uid"])
                variables = {v["name"]: v for v in d["templating"]["list"]}
                self.assertEqual(variables["datasource"]["type"], "datasource")
                self.assertEqual(variables["datasource"]["query"], "prometheus")
                ids = [p["id"] for p in panels(d)]
                self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
                cells = {}
                for p in panels(d):
                    g = p["gridPos"]
                    self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
                    for x in range(g["x"], g["x"] + g["w"]):
                        for y in range(g["y"], g["y"] + g["h"]):
                            self.assertNotIn((x, y), cells,
                                             f"{p['title']} overlaps {cells.get((x, y))}")
                            cells[(x, y)] = p["title"]
                    if p["type"] == "row":
                        continue
                    self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
                    self.assertTrue(p["targets"], p["title"])
                    for t in p["targets"]:
                        self.assertTrue(t["expr"].strip(), p["title"])
                        # Every variable used is one the test knows how to fill.
                        left = substitute(t["expr"])
                        self.assertNotIn("$", left, f"{p['title']}: unknown variable in {left}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


class LivePrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prom = None
        cls.server = None
        prometheus = need("prometheus")
        if DENDROD in (None, "-"):
            raise AssertionError("LivePrometheusTest needs the dendrod binary as argument")
        cls.work = tempfile.mkdtemp(prefix="dendro_monitoring_")
        try:
            cls.start(prometheus)
        except BaseException:
            # unittest skips tearDownClass when setUpClass fails: stop what started.
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls, prometheus):
        sys.path.insert(0, HERE)
        global bb
        import grpc_blackbox_test as bb  # noqa: F401  (generates the stubs)
        bb.DENDROD = DENDROD
        pb = bb.pb

        data = os.path.join(cls.work, "dendrod")
        os.mkdir(data)
        metrics_port = free_port()
        http_port = free_port()
        cls.server = bb.Server(data, ("--metrics_listen", f"127.0.0.1:{metrics_port}",
                                      "--http_listen", f"127.0.0.1:{http_port}",
                                      "--threads", "1", "--drain_seconds", "5"))
        config = os.path.join(cls.work, "prometheus.yml")
        with open(config, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": rule_files(),
                "scrape_configs": [{
                    "job_name": "dendrod",
                    "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                }],
            }, f)
        cls.web = f"http://127.0.0.1:{free_port()}"
        cls.prom_log = open(os.path.join(cls.work, "prometheus.log"), "wb")
        cls.prom = subprocess.Popen(
            [prometheus, f"--config.file={config}",
             f"--storage.tsdb.path={cls.work}/tsdb",
             f"--web.listen-address={cls.web[len('http://'):]}"],
            stdout=cls.prom_log, stderr=cls.prom_log)

        # A small fit, a served Assign, and a refused call (NOT_FOUND), so
        # that every family the dashboard reads has series.
        x, _ = bb.hierarchical_logits(600, 3, 4, seed=4)
        ds = bb.upload(cls.server, x).id
        job = cls.server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=ds, model_name="mon", l2h=pb.L2hParams())), timeout=10)
        done = cls.server.jobs.WaitJob(pb.WaitJobRequest(
            id=job.id, timeout={"seconds": GUARD_SECONDS}), timeout=GUARD_SECONDS + 10)
        assert done.state == pb.JOB_STATE_SUCCEEDED, done
        rows = x[:8]
        cls.server.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="mon"), rows=rows.shape[0], cols=rows.shape[1],
            data=rows.astype("<f4").tobytes(), level=2), timeout=30)
        try:
            cls.server.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="nope")),
                                       timeout=5)
        except bb.grpc.RpcError:
            pass
        # The HTTP panels: an answered request and a refused one.
        get_json(f"http://127.0.0.1:{http_port}/api/v1/jobs/{job.id}")
        try:
            get_json(f"http://127.0.0.1:{http_port}/api/v1/jobs/job-nope")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e.code

        # Wait until Prometheus has scraped the finished job, then a few
        # scrapes more (rates need two samples after the change).
        deadline = time.time() + GUARD_SECONDS
        seen = None
        while time.time() < deadline:
            try:
                r = cls.query('sum(dendro_jobs_finished_total{job="dendrod",state="succeeded"})')
                if r["data"]["result"] and float(r["data"]["result"][0]["value"][1]) >= 1:
                    seen = time.time()
                    break
            except OSError:
                pass  # not listening yet
            time.sleep(0.5)
        if seen is None:
            raise AssertionError("Prometheus never saw the finished job")
        time.sleep(5)

    @classmethod
    def tearDownClass(cls):
        if cls.prom is not None:
            cls.prom.terminate()
            cls.prom.wait(timeout=30)
            cls.prom_log.close()
        if cls.server is not None and cls.server.proc.poll() is None:
            cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    @classmethod
    def query(cls, expr):
        return get_json(f"{cls.web}/api/v1/query?query={urllib.parse.quote(expr)}")

    def test_every_panel_query_answers_with_series(self):
        count = 0
        for path in dashboards():
            with open(path) as f:
                d = json.load(f)
            for p in panels(d):
                for t in p.get("targets", []):
                    expr = substitute(t["expr"])
                    count += 1
                    with self.subTest(panel=p["title"], ref=t["refId"]):
                        try:
                            body = self.query(expr)
                        except urllib.error.HTTPError as e:
                            self.fail(f"{expr}: HTTP {e.code}: {e.read().decode()}")
                        self.assertEqual(body["status"], "success", body)
                        self.assertTrue(body["data"]["result"], f"no series: {expr}")
        self.assertGreater(count, 10)

    def test_template_variables_list_the_scraped_job_and_replica(self):
        for path in dashboards():
            with open(path) as f:
                d = json.load(f)
            for v in d["templating"]["list"]:
                if v["type"] != "query":
                    continue
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
                self.assertIsNotNone(m, q)
                selector, label = substitute(m.group(1)), m.group(2)
                url = (f"{self.web}/api/v1/label/{label}/values?"
                       + urllib.parse.urlencode({"match[]": selector}))
                values = get_json(url)["data"]
                with self.subTest(variable=v["name"]):
                    self.assertTrue(values, f"{q} lists nothing")
                    if v["name"] == "job":
                        self.assertIn("dendrod", values)

    def test_rules_load_evaluate_and_stay_quiet(self):
        groups = get_json(f"{self.web}/api/v1/rules")["data"]["groups"]
        loaded = {r["name"] for g in groups for r in g["rules"]}
        expected = {a["alert"] for path in rule_files() for a in alerts(path)}
        self.assertEqual(loaded, expected)
        for g in groups:
            for r in g["rules"]:
                with self.subTest(r["name"]):
                    self.assertEqual(r["health"], "ok", r.get("lastError"))
                    # Pending is allowed (a slow call under a loaded sanitizer
                    # build may start a 10-minute latency clock); firing is not.
                    self.assertNotEqual(r["state"], "firing", r)


if __name__ == "__main__":
    DENDROD = sys.argv.pop(1)
    unittest.main(verbosity=2)
