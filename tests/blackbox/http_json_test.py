#!/usr/bin/python3
"""dendrod's JSON endpoints (--http_listen) from a plain HTTP client.

Starts a real dendrod with API keys, gives it datasets, a clustering model,
a classifier and a running job over gRPC, then checks with urllib that
  * health is open, everything else needs a key (401 without, 200 with a
    reader's key), answering the same content as the gRPC calls;
  * infer answers what gRPC Assign and Predict answer, for flat and nested
    data, with the op chosen by the model when the request names none;
  * a bad request gets a 4xx and a JSON error naming what is wrong, and no
    answer ever names a server path;
  * jobs show live progress; ready turns 503 while the server drains;
  * without keys a non-loopback --http_listen is refused; with --tls_cert
    the listener speaks HTTPS, and with --tls_client_ca a client
    certificate's common name identifies the caller.

Usage: http_json_test.py DENDROD_BINARY
"""
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_lib as hl  # noqa: E402
from http_lib import pb, request, get_json, md  # noqa: E402
from grpc_blackbox_test import hierarchical_logits  # noqa: E402

import numpy as np  # noqa: E402


class JsonEndpointsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dendro_http_")
        cls.server = hl.HttpServer(cls.dir, ("--max_message_mb", "2", "--http_max_body_mb", "2"))
        cls.base = cls.server.base
        s = cls.server
        cls.x, _ = hierarchical_logits(600, 3, 4, seed=4)
        cls.ds = hl.upload(s, cls.x).id
        cls.jobs = []
        for name in ("tree", "tree"):  # two versions of one name
            job = hl.fit(s, pb.JobSpec(dataset_id=cls.ds, model_name=name, l2h=pb.L2hParams()))
            assert job.state == pb.JOB_STATE_SUCCEEDED, job
            cls.jobs.append(job.id)
        xc, yc = hl.classifier_data(1)
        cls.xc = xc
        cls.ds_clf = hl.upload(s, xc, yc, name="classes").id
        job = hl.fit(s, pb.JobSpec(dataset_id=cls.ds_clf, model_name="clf",
                                   hppca=pb.HppcaTrainParams(superclasses=3, q=4, r=4, seed=2)))
        assert job.state == pb.JOB_STATE_SUCCEEDED, job
        cls.jobs.append(job.id)

    @classmethod
    def tearDownClass(cls):
        if cls.server.proc.poll() is None:
            cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def url(self, path):
        return self.base + path

    def assert_error(self, status, body, expected_status, *fragments):
        """A JSON error naming `fragments`, with no server path in it."""
        self.assertEqual(status, expected_status, body)
        doc = json.loads(body)
        self.assertIsInstance(doc.get("error"), str)
        for f in fragments:
            self.assertIn(f, doc["error"])
        self.assertNotIn(self.dir, body.decode())
        self.assertNotIn(os.path.realpath(self.dir), body.decode())
        return doc

    def data_endpoints(self):
        return ["/api/v1/datasets", f"/api/v1/datasets/{self.ds}", "/api/v1/jobs",
                f"/api/v1/jobs/{self.jobs[0]}", "/api/v1/models", "/api/v1/models?name=tree",
                "/api/v1/models/tree/versions/1", "/api/v1/models/tree/versions/latest",
                "/api/v1/models/tree/versions/2/tree", "/api/v1/models/tree/versions/2/tree.svg",
                "/api/v1/models/clf/versions/1/classes", "/v2/models/tree",
                "/v2/models/tree/versions/1", "/v2/models/tree/ready",
                "/v2/models/tree/versions/2/ready"]

    def test_1_health_is_open(self):
        for path in ("/v2/health/live", "/v2/health/ready", "/v2"):
            status, headers, body = request(self.url(path))
            self.assertEqual(status, 200, path)
            self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(json.loads(request(self.url("/v2/health/ready"))[2]), {"ready": True})
        self.assertEqual(json.loads(request(self.url("/v2"))[2])["name"], "dendrod")

    def test_2_keys(self):
        for path in self.data_endpoints():
            with self.subTest(path=path):
                status, headers, body = request(self.url(path))
                self.assert_error(status, body, 401, "API key")
                self.assertIn("Bearer", headers["WWW-Authenticate"])
                status, _, body = request(self.url(path),
                                          headers={"Authorization": "Bearer not-a-key"})
                self.assert_error(status, body, 401)
                self.assertNotIn("not-a-key", body.decode())
                status, _, body = request(self.url(path), "reader")
                self.assertEqual(status, 200, body)
        # Infer too: refused without a key before the body is read.
        status, _, body = request(self.url("/v2/models/tree/infer"), method="POST", body="{}")
        self.assert_error(status, body, 401)

    def test_3_answers_match_grpc(self):
        s = self.server
        jobs = get_json(self.url("/api/v1/jobs"))["jobs"]
        grpc_jobs = s.jobs.ListJobs(pb.ListJobsRequest(), metadata=md("reader"), timeout=10).jobs
        self.assertEqual([j["id"] for j in jobs if j["id"] in self.jobs], self.jobs)
        by_id = {j.id: j for j in grpc_jobs}
        for j in jobs:
            g = by_id[j["id"]]
            self.assertEqual(j["state"], pb.JobState.Name(g.state))
            self.assertEqual(j["model_name"], g.model_name)
            self.assertEqual(int(j["model_version"]), g.model_version)
            self.assertEqual(j["owner"], "writer-user")

        ds = get_json(self.url(f"/api/v1/datasets/{self.ds}"))
        self.assertEqual((int(ds["rows"]), int(ds["cols"])), self.x.shape)
        self.assertEqual(ds["display_name"], "http")
        self.assertEqual({d["id"] for d in get_json(self.url("/api/v1/datasets"))["datasets"]},
                         {self.ds, self.ds_clf})

        latest = get_json(self.url("/api/v1/models/tree/versions/latest"))
        self.assertEqual(int(latest["version"]), 2)
        self.assertEqual(latest["method"], "l2h")
        versions = get_json(self.url("/api/v1/models?name=tree"))["models"]
        self.assertEqual([int(m["version"]) for m in versions], [1, 2])

        for fmt, grpc_fmt, media in (
                ("json", pb.TREE_FORMAT_JSON, "application/json"),
                ("newick", pb.TREE_FORMAT_NEWICK, "text/plain; charset=utf-8"),
                ("linkage", pb.TREE_FORMAT_LINKAGE_NPY, "application/octet-stream")):
            status, headers, body = request(
                self.url(f"/api/v1/models/tree/versions/1/tree?format={fmt}"), "reader")
            self.assertEqual(status, 200)
            self.assertEqual(headers["Content-Type"], media, fmt)
            tree = s.models.GetTree(pb.GetTreeRequest(model=pb.ModelRef(name="tree", version=1),
                                                      format=grpc_fmt),
                                    metadata=md("reader"), timeout=10)
            self.assertEqual(body, tree.content, fmt)
        # Browsers accept Brotli, which cpp-httplib writes at quality 11 (about
        # 1 MB/s); they get gzip instead, the same bytes once decoded.
        status, headers, body = request(
            self.url("/api/v1/models/tree/versions/1/tree"), "reader",
            headers={"Accept-Encoding": "gzip, deflate, br, zstd"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Encoding"], "gzip")
        self.assertEqual(gzip.decompress(body), request(
            self.url("/api/v1/models/tree/versions/1/tree"), "reader")[2])
        status, headers, _ = request(self.url("/api/v1/models/tree/versions/1/tree"), "reader",
                                     headers={"Accept-Encoding": "br"})
        self.assertEqual(status, 200)
        self.assertIsNone(headers.get("Content-Encoding"))
        # The JSON tree is written as it is sent (chunked), points included.
        status, headers, body = request(
            self.url("/api/v1/models/tree/versions/1/tree?include_points=true"), "reader")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Transfer-Encoding"], "chunked")
        with_points = s.models.GetTree(pb.GetTreeRequest(
            model=pb.ModelRef(name="tree", version=1), format=pb.TREE_FORMAT_JSON,
            include_points=True), metadata=md("reader"), timeout=10)
        self.assertEqual(body, with_points.content)
        self.assertEqual(len(json.loads(body)["point_leaf"]), self.x.shape[0])
        tree = json.loads(request(self.url("/api/v1/models/tree/versions/1/tree"), "reader")[2])
        status, headers, svg = request(
            self.url("/api/v1/models/tree/versions/1/tree.svg?color_level=3"), "reader")
        self.assertEqual(headers["Content-Type"], "image/svg+xml")
        svg = svg.decode()
        self.assertTrue(svg.startswith("<?xml"), svg[:80])
        self.assertEqual(svg.count('<path class="edge'), len(tree["nodes"]) - 1)
        self.assertEqual(svg.count('<text class="leaf'), tree["num_leaves"])
        self.assertEqual(len({c for c in ("cluster-0", "cluster-1", "cluster-2") if c in svg}), 3)

        classes = get_json(self.url("/api/v1/models/clf/versions/latest/classes"))
        g = s.models.GetClasses(pb.GetClassesRequest(model=pb.ModelRef(name="clf")),
                                metadata=md("reader"), timeout=10)
        self.assertEqual([int(v) for v in classes["labels"]], list(g.labels))
        self.assertEqual(classes["num_superclasses"], g.num_superclasses)

        meta = get_json(self.url("/v2/models/tree"))
        self.assertEqual(meta["versions"], ["1", "2"])
        self.assertEqual(meta["inputs"][0]["shape"], [-1, self.x.shape[1]])
        self.assertEqual(meta["model"]["version"], "2")
        self.assertEqual(get_json(self.url("/v2/models/tree/versions/1"))["model"]["version"],
                         "1")
        self.assertEqual(get_json(self.url("/v2/models/tree/versions/1/ready")),
                         {"name": "tree", "version": "1", "ready": True})

    def test_4_pages_and_tokens(self):
        first = get_json(self.url("/api/v1/jobs?page_size=2"))
        self.assertEqual(len(first["jobs"]), 2)
        self.assertTrue(first["next_page_token"])
        rest = get_json(self.url("/api/v1/jobs?page_size=2&page_token=" +
                                 urllib.parse.quote(first["next_page_token"])))
        self.assertEqual([j["id"] for j in first["jobs"] + rest["jobs"]][:3], self.jobs)
        # The tokens are the gRPC list's tokens.
        g = self.server.jobs.ListJobs(pb.ListJobsRequest(page_size=2,
                                                         page_token=first["next_page_token"]),
                                      metadata=md("reader"), timeout=10)
        self.assertEqual([j.id for j in g.jobs], [j["id"] for j in rest["jobs"]][:2])
        # Newest first and by state, as gRPC lists them; a token is bound to
        # its listing.
        newest = get_json(self.url("/api/v1/jobs?newest_first=true&page_size=2"))
        g = self.server.jobs.ListJobs(pb.ListJobsRequest(page_size=2, newest_first=True),
                                      metadata=md("reader"), timeout=10)
        self.assertEqual([j["id"] for j in newest["jobs"]], [j.id for j in g.jobs])
        every = get_json(self.url("/api/v1/jobs?page_size=1000"))["jobs"]
        self.assertEqual([j["id"] for j in newest["jobs"]],
                         [j["id"] for j in reversed(every)][:2])
        done = get_json(self.url("/api/v1/jobs?state=succeeded,JOB_STATE_FAILED"))["jobs"]
        self.assertEqual([j["id"] for j in done],
                         [j["id"] for j in every
                          if j["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED")])
        status, _, body = request(self.url("/api/v1/jobs?page_token=" +
                                           urllib.parse.quote(newest["next_page_token"])),
                                  "reader")
        self.assert_error(status, body, 400, "page_token")
        status, _, body = request(self.url("/api/v1/jobs?state=done"), "reader")
        self.assert_error(status, body, 400, "not a job state")
        status, _, body = request(self.url("/api/v1/models/tree/versions/1/tree?format=npz"),
                                  "reader")
        self.assert_error(status, body, 400, "json, newick or linkage, got 'npz'")
        status, _, body = request(
            self.url("/api/v1/models/tree/versions/1/tree?format=linkage&unrefined=true"),
            "reader")
        self.assert_error(status, body, 400, "format=linkage with unrefined")

    def infer(self, model, payload, role="reader"):
        status, _, body = request(self.url(f"/v2/models/{model}/infer"), role, "POST",
                                  json.dumps(payload),
                                  headers={"Content-Type": "application/json"})
        return status, body

    def test_5_infer_assign_matches_grpc(self):
        rows = self.x[:7]
        g = self.server.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="tree", version=1), rows=7, cols=rows.shape[1],
            data=rows.astype("<f4").tobytes(), level=3), metadata=md("reader"), timeout=10)
        flat = {"id": "q1", "inputs": [{"name": "input", "shape": list(rows.shape),
                                        "datatype": "FP32",
                                        "data": [float(v) for v in rows.ravel()]}],
                "parameters": {"level": 3}}
        nested = {"inputs": [{"name": "input", "shape": list(rows.shape), "datatype": "FP32",
                              "data": [[float(v) for v in r] for r in rows]}],
                  "parameters": {"op": "assign", "level": 3}}
        for payload in (flat, nested):
            with self.subTest(nested=payload is nested):
                status, body = self.infer("tree/versions/1", payload)
                self.assertEqual(status, 200, body)
                out = json.loads(body)
                tensors = {t["name"]: t for t in out["outputs"]}
                self.assertEqual(tensors["leaf"]["data"], list(g.leaf))
                self.assertEqual(tensors["cluster"]["data"], list(g.cluster))
                self.assertEqual(tensors["cluster"]["shape"], [7])
                self.assertEqual(out["model_version"], "1")
                self.assertEqual(out["parameters"]["op"], "assign")
        self.assertEqual(json.loads(self.infer("tree/versions/1", flat)[1])["id"], "q1")
        # Stable ids, as gRPC answers them.
        gs = self.server.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="tree", version=1), rows=7, cols=rows.shape[1],
            data=rows.astype("<f4").tobytes(), level=3, stable_ids=True), metadata=md("reader"),
            timeout=10)
        self.assertEqual(len(gs.stable_cluster), 7)
        status, body = self.infer("tree/versions/1", dict(flat, parameters={"level": 3,
                                                                          "stable_ids": True}))
        self.assertEqual(status, 200, body)
        out = json.loads(body)
        tensors = {t["name"]: t for t in out["outputs"]}
        self.assertEqual(tensors["stable_leaf"]["data"], list(gs.stable_leaf))
        self.assertEqual(tensors["stable_cluster"]["data"], list(gs.stable_cluster))
        self.assertEqual(tensors["stable_cluster"]["datatype"], "INT64")
        self.assertTrue(out["parameters"]["stable_ids"])
        status, body = self.infer("tree/versions/1", dict(flat, parameters={"stable_ids": 1}))
        self.assertEqual(status, 400, body)
        self.assertIn(b"parameters.stable_ids must be true or false", body)

    def test_6_infer_predict_matches_grpc(self):
        rows = self.xc[::37][:9]
        g = self.server.models.Predict(pb.PredictRequest(
            model=pb.ModelRef(name="clf"), rows=rows.shape[0], cols=rows.shape[1],
            data=rows.astype("<f4").tobytes(), top_k=3, top_t=2), metadata=md("reader"),
            timeout=10)
        # No op: a classifier predicts.
        status, body = self.infer("clf", {
            "inputs": [{"name": "x", "shape": list(rows.shape), "datatype": "FP32",
                        "data": [float(v) for v in rows.ravel()]}],
            "parameters": {"top_k": 3, "top_t": 2}})
        self.assertEqual(status, 200, body)
        out = json.loads(body)
        self.assertEqual(out["parameters"]["op"], "predict")
        t = {x["name"]: x for x in out["outputs"]}
        self.assertEqual(t["labels"]["shape"], [rows.shape[0], 3])
        self.assertEqual(t["labels"]["data"], list(g.labels))
        np.testing.assert_allclose(t["scores"]["data"], list(g.scores), rtol=1e-6)
        self.assertEqual(t["superclasses"]["data"], list(g.superclasses))
        self.assertEqual(t["classes_evaluated"]["data"], list(g.classes_evaluated))

    def test_7_bad_requests_name_the_problem(self):
        cols = self.x.shape[1]
        good = {"name": "input", "shape": [1, cols], "datatype": "FP32", "data": [0.5] * cols}
        cases = [
            ("tree", {"inputs": [dict(good, shape=[1, cols - 1], data=[0.5] * (cols - 1))]},
             400, f"expects {cols} columns, got {cols - 1}"),
            ("tree", {"inputs": [dict(good, shape=[2, cols])]}, 400, "inputs[0].data has"),
            ("tree", {"inputs": [dict(good, shape=[1])]}, 400, "shape must be [rows, cols]"),
            ("tree", {"inputs": [dict(good, data=["a"] * cols)]}, 400,
             "inputs[0].data[0] is not a number"),
            ("tree", {"inputs": [dict(good, data=[1e39] * cols)]}, 400, "not a finite float32"),
            ("tree", {"inputs": [dict(good, datatype="INT8")]}, 400, "datatype"),
            ("tree", {"inputs": []}, 400, "exactly one tensor"),
            ("tree", {"inputs": [good], "parameters": {"op": "explode"}}, 400, "parameters.op"),
            ("tree", {"inputs": [good], "parameters": {"level": 99}}, 400, "parameters.level"),
            ("tree", {"inputs": [good], "parameters": {"op": "predict"}}, 400, "classif"),
            ("nope", {"inputs": [good]}, 404, "'nope'"),
            ("tree/versions/0", {"inputs": [good]}, 400, "version"),
            ("tree/versions/9", {"inputs": [good]}, 404, "version 9"),
            ("Bad%20Name", {"inputs": [good]}, 400, "model name"),
        ]
        for model, payload, expected, fragment in cases:
            with self.subTest(model=model, fragment=fragment):
                status, body = self.infer(model, payload)
                self.assert_error(status, body, expected, fragment)
        status, _, body = request(self.url("/v2/models/tree/infer"), "reader", "POST", "{nope",
                                  headers={"Content-Type": "application/json"})
        self.assert_error(status, body, 400, "not valid JSON")
        # An oversized body (over --http_max_body_mb 2), refused before it is read.
        status, _, body = request(self.url("/v2/models/tree/infer"), "reader", "POST",
                                  "[" + "0," * (1 << 20) + "0]")
        self.assert_error(status, body, 413, "MiB")
        gets = [
            ("/api/v1/jobs?page_size=many", 400, "page_size"),
            ("/api/v1/jobs?page_token=garbage", 400, "page_token"),
            ("/api/v1/jobs/job-0000", 404, "job-0000"),
            ("/api/v1/datasets/ds-nope", 404, "ds-nope"),
            ("/api/v1/models/tree/versions/2/tree?format=npy", 400, "format"),
            ("/api/v1/models/tree/versions/2/tree.svg?color_level=-1", 400, "color_level"),
            ("/api/v1/models/tree/versions/2/tree.svg?layout=spiral", 400, "layout"),
            ("/api/v1/models/tree/versions/1/classes", 400, ""),
            ("/api/v1/models/tree/versions/no-such-label", 404, "no-such-label"),
            ("/api/v1/no/such/thing", 404, "no such endpoint"),
            ("/api/v1/models/%FFbad/versions/1", 400, "model name"),
        ]
        for path, expected, fragment in gets:
            with self.subTest(path=path):
                status, _, body = request(self.url(path), "reader")
                self.assert_error(status, body, expected, fragment)
        status, _, body = request(self.url("/api/v1/jobs"), "reader", "DELETE")
        self.assert_error(status, body, 404, "no such endpoint")

    def test_8_live_progress(self):
        s = self.server
        job = hl.fit(s, hl.long_job_spec(self.ds), wait=False)
        try:
            seen = []
            # Until the job runs and has reported a stage of its own.
            while True:
                j = get_json(self.url(f"/api/v1/jobs/{job.id}"))
                seen.append(float(j["progress"]))
                self.assertIn(j["state"], ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"))
                if j["state"] == "JOB_STATE_RUNNING" and j["stage"] not in ("", "queued"):
                    break
                time.sleep(0.2)
            listed = [x for x in get_json(self.url("/api/v1/jobs"))["jobs"] if x["id"] == job.id]
            self.assertEqual(listed[0]["state"], "JOB_STATE_RUNNING")
            self.assertNotIn(listed[0]["stage"], ("", "queued"))  # the live record, not the row
            seen.append(float(listed[0]["progress"]))
            self.assertEqual(seen, sorted(seen), "progress went backwards")
            g = s.jobs.GetJob(pb.GetJobRequest(id=job.id), metadata=md("reader"), timeout=10)
            self.assertGreaterEqual(g.progress, seen[-1])
        finally:
            s.jobs.CancelJob(pb.CancelJobRequest(id=job.id), metadata=md("writer"), timeout=10)
        while True:
            j = get_json(self.url(f"/api/v1/jobs/{job.id}"))
            if j["state"] != "JOB_STATE_RUNNING":
                break
            time.sleep(0.2)
        self.assertEqual(j["state"], "JOB_STATE_CANCELLED")

    def test_9_ready_turns_503_while_draining(self):
        s = self.server
        job = hl.fit(s, hl.long_job_spec(self.ds, "drain"), wait=False)
        while get_json(self.url(f"/api/v1/jobs/{job.id}"))["state"] != "JOB_STATE_RUNNING":
            time.sleep(0.1)
        s.proc.send_signal(signal.SIGTERM)
        # The running job holds the drain open (--drain_seconds 5) while
        # readiness has already turned.
        while True:
            status, _, body = request(self.url("/v2/health/ready"))
            if status != 200:
                break
            time.sleep(0.05)
        self.assert_error(status, body, 503, "draining")
        self.assertEqual(s.proc.wait(), 0)


class ListenerSetupTest(unittest.TestCase):
    def test_non_loopback_without_keys_is_refused(self):
        work = tempfile.mkdtemp(prefix="dendro_http_open_")
        try:
            out = subprocess.run(
                [hl.bb.DENDROD, "--listen", "127.0.0.1:0", "--data_dir", work,
                 "--http_listen", f"0.0.0.0:{hl.free_port()}"], capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("refusing to serve the console", out.stderr)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_https_with_the_grpc_certificate(self):
        if shutil.which("openssl") is None:
            self.skipTest("the openssl binary is not installed (Debian package openssl)")
        work = tempfile.mkdtemp(prefix="dendro_https_")
        try:
            cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-days", "2", "-subj", "/CN=localhost", "-addext",
                            "subjectAltName=IP:127.0.0.1,DNS:localhost",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
            data = os.path.join(work, "data")
            os.makedirs(data)
            port = hl.free_port()
            keys = os.path.join(work, "keys")
            hl.write_keys(keys)
            proc = subprocess.Popen(
                [hl.bb.DENDROD, "--listen", "127.0.0.1:0", "--data_dir", data,
                 "--port_file", os.path.join(work, "port"), "--auth_keys", keys,
                 "--tls_cert", cert, "--tls_key", key, "--http_listen", f"127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while not os.path.exists(os.path.join(work, "port")):
                    self.assertIsNone(proc.poll(), "dendrod exited")
                    time.sleep(0.05)
                ctx = hl.tls_context(cert)
                base = f"https://127.0.0.1:{port}"
                self.assertEqual(get_json(base + "/api/v1/jobs", context=ctx), {
                    "jobs": [], "next_page_token": ""})
                status, _, body = request(base + "/api/v1/jobs", context=ctx)
                self.assertEqual(status, 401, body)
                # Plain HTTP gets no answer from a TLS listener.
                with self.assertRaises(Exception):
                    request(f"http://127.0.0.1:{port}/v2/health/live")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_client_certificates_identify_callers(self):
        if shutil.which("openssl") is None:
            self.skipTest("the openssl binary is not installed (Debian package openssl)")
        work = tempfile.mkdtemp(prefix="dendro_https_mtls_")
        p = lambda name: os.path.join(work, name)  # noqa: E731

        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True)
        try:
            for ca in ("ca", "other_ca"):
                openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", f"/CN={ca}", "-keyout", p(f"{ca}.key"), "-out", p(f"{ca}.pem"))
            with open(p("san.ext"), "w") as f:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            for name, ca, extra in (("server", "ca", ("-extfile", p("san.ext"))),
                                    ("alice", "ca", ()), ("mallory", "other_ca", ())):
                openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                        "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"))
                openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p(f"{ca}.pem"),
                        "-CAkey", p(f"{ca}.key"), "-CAcreateserial", "-days", "2",
                        "-out", p(f"{name}.pem"), *extra)
            with open(p("keys"), "w") as f:
                f.write("cn:alice  alice  reader\n")
            os.makedirs(p("data"))
            port = hl.free_port()
            proc = subprocess.Popen(
                [hl.bb.DENDROD, "--listen", "127.0.0.1:0", "--data_dir", p("data"),
                 "--port_file", p("port"), "--auth_keys", p("keys"), "--tls_cert",
                 p("server.pem"), "--tls_key", p("server.key"), "--tls_client_ca", p("ca.pem"),
                 "--http_listen", f"127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while not os.path.exists(p("port")):
                    self.assertIsNone(proc.poll(), "dendrod exited")
                    time.sleep(0.05)
                url = f"https://127.0.0.1:{port}/api/v1/datasets"
                alice = hl.tls_context(p("ca.pem"))
                alice.load_cert_chain(p("alice.pem"), p("alice.key"))
                self.assertEqual(get_json(url, role=None, context=alice)["datasets"], [])
                # A certificate from another CA, or none, is refused in the
                # handshake.
                for cert in ("mallory", None):
                    ctx = hl.tls_context(p("ca.pem"))
                    if cert:
                        ctx.load_cert_chain(p(f"{cert}.pem"), p(f"{cert}.key"))
                    with self.subTest(cert=cert), self.assertRaises(Exception):
                        request(url, context=ctx)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    hl.set_dendrod(sys.argv.pop(1))
    unittest.main(verbosity=2)
