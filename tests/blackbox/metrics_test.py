#!/usr/bin/python3
"""dendrod's Prometheus endpoint, read by a real Prometheus server.

Starts dendrod with --metrics_listen, runs jobs and RPCs over gRPC, then
  * parses /metrics with prometheus_client's parser (Debian's
    python3-prometheus-client) and checks the counts it must show;
  * starts the real `prometheus` binary scraping dendrod every second and
    asks its HTTP API (PromQL) for the number of finished jobs.

Usage: metrics_test.py DENDROD_BINARY
"""
import json
import os
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


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, Server, hierarchical_logits, upload  # noqa: E402

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

GUARD_SECONDS = 90


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} for every sample in the exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(all_samples, name, **labels):
    return all_samples.get((name, frozenset(labels.items())))


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dendro_metrics_")
        cls.metrics_port = free_port()
        cls.http_port = free_port()
        cls.server = Server(cls.dir, ("--metrics_listen", f"127.0.0.1:{cls.metrics_port}",
                                      "--http_listen", f"127.0.0.1:{cls.http_port}",
                                      "--threads", "1"))
        cls.url = f"http://127.0.0.1:{cls.metrics_port}/metrics"
        x, _ = hierarchical_logits(800, 3, 4, seed=2)
        cls.uploaded_bytes = x.size * 4
        cls.ds = upload(cls.server, x).id
        cls.jobs = []
        for i in range(3):
            spec = pb.JobSpec(dataset_id=cls.ds, model_name=f"m{i}", l2h=pb.L2hParams())
            job = cls.server.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=10)
            cls.jobs.append(job.id)
        for job_id in cls.jobs:
            done = cls.server.jobs.WaitJob(pb.WaitJobRequest(
                id=job_id, timeout={"seconds": GUARD_SECONDS}), timeout=GUARD_SECONDS + 10)
            assert done.state == pb.JOB_STATE_SUCCEEDED, done
        # Two refused calls.
        for _ in range(2):
            try:
                cls.server.models.GetModel(pb.GetModelRequest(
                    model=pb.ModelRef(name="nope")), timeout=5)
            except grpc.RpcError:
                pass
        # HTTP: three answered jobs, two unknown ones, one path no endpoint serves.
        http = f"http://127.0.0.1:{cls.http_port}"
        for job_id in cls.jobs:
            fetch(f"{http}/api/v1/jobs/{job_id}")
        for path in ("/api/v1/jobs/job-nope", "/api/v1/jobs/job-nope2", "/no/such/endpoint"):
            try:
                fetch(http + path)
                raise AssertionError(f"{path} answered 200")
            except urllib.error.HTTPError as e:
                assert e.code == 404, (path, e.code)

    @classmethod
    def tearDownClass(cls):
        if cls.server.proc.poll() is None:
            cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_exposition_counts_rpcs_jobs_and_bytes(self):
        s = samples(fetch(self.url))
        rpc = "grpc_server_handled"  # the parser strips _total from counter samples
        self.assertEqual(value(s, rpc + "_total", grpc_service="dendro.v1.JobService",
                               grpc_method="SubmitJob", grpc_code="OK"), 3)
        self.assertEqual(value(s, rpc + "_total", grpc_service="dendro.v1.ModelService",
                               grpc_method="GetModel", grpc_code="NOT_FOUND"), 2)
        self.assertEqual(value(s, rpc + "_total", grpc_service="dendro.v1.DatasetService",
                               grpc_method="UploadDataset", grpc_code="OK"), 1)
        self.assertEqual(value(s, "grpc_server_handling_seconds_count",
                               grpc_service="dendro.v1.JobService", grpc_method="SubmitJob"), 3)
        self.assertEqual(value(s, "dendro_jobs_finished_total", method="l2h",
                               state="succeeded"), 3)
        self.assertEqual(value(s, "dendro_job_duration_seconds_count", method="l2h"), 3)
        self.assertEqual(value(s, "dendro_upload_bytes_total"), self.uploaded_bytes)
        self.assertEqual(value(s, "dendro_catalogue_seconds_count", op="enqueue_job"), 3)
        self.assertGreaterEqual(value(s, "dendro_catalogue_seconds_count", op="claim_job"), 3)
        self.assertGreaterEqual(value(s, "dendro_catalogue_seconds_count", op="commit_model"), 3)
        self.assertEqual(value(s, "dendro_job_queue_depth"), 0)
        self.assertEqual(value(s, "dendro_job_threads"), 1)
        self.assertEqual(value(s, "dendro_jobs_running"), 0)
        self.assertGreater(value(s, "process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(value(s, "process_open_fds"), 3)
        self.assertGreater(value(s, "process_start_time_seconds"), time.time() - 3600)
        self.assertLessEqual(value(s, "process_start_time_seconds"), time.time() + 1)

    def test_http_requests_are_counted_by_route_not_path(self):
        s = samples(fetch(self.url))
        http = "http_server_requests"
        self.assertEqual(value(s, http + "_total", method="GET", route="/api/v1/jobs/{id}",
                               code="200"), 3)
        self.assertEqual(value(s, http + "_total", method="GET", route="/api/v1/jobs/{id}",
                               code="404"), 2)
        self.assertEqual(value(s, http + "_total", method="GET", route="other", code="404"), 1)
        self.assertEqual(value(s, "http_server_request_duration_seconds_count",
                               route="/api/v1/jobs/{id}"), 5)
        routes = {dict(labels).get("route") for (name, labels) in s
                  if name.startswith("http_server_")}
        self.assertFalse([r for r in routes if r and "job-" in r], routes)

    def test_queue_wait_build_disk_and_lease_series(self):
        s = samples(fetch(self.url))
        self.assertEqual(value(s, "dendro_job_queue_wait_seconds_count", method="l2h"), 3)
        self.assertGreaterEqual(value(s, "dendro_job_queue_wait_seconds_sum", method="l2h"), 0)
        info = [(dict(labels), v) for (name, labels), v in s.items()
                if name == "dendro_build_info"]
        self.assertEqual(len(info), 1, info)
        labels, v = info[0]
        self.assertEqual(v, 1)
        version = subprocess.run([bb.DENDROD, "--version"], capture_output=True, text=True,
                                 check=True).stdout
        self.assertIn(labels["version"], version)
        self.assertIn(labels["revision"], version)
        # The volume's numbers agree with what statvfs says of the data directory.
        st = os.statvfs(self.dir)
        size = st.f_blocks * st.f_frsize
        self.assertEqual(value(s, "dendro_data_volume_size_bytes"), size)
        free = value(s, "dendro_data_volume_free_bytes")
        self.assertGreater(free, 0)
        self.assertLessEqual(free, size)
        self.assertGreaterEqual(value(s, "dendro_data_volume_min_free_bytes"), 64 << 20)
        self.assertEqual(value(s, "dendro_job_lease_takeovers_total"), 0)
        self.assertEqual(value(s, "dendro_job_leases_lost_total"), 0)

    def test_every_family_is_in_the_operations_table_and_back(self):
        """docs/operations.md's metrics table names every family with its type and labels."""
        doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                           "operations.md")
        documented = {}
        in_table = False
        with open(doc) as f:
            for line in f:
                if line.startswith("### Metrics"):
                    in_table = True
                elif line.startswith("#"):
                    in_table = False
                elif in_table and line.startswith("| `"):
                    cells = [c.strip() for c in line.strip().strip("|").split("|")]
                    name = cells[0].strip("`")
                    labels = {x.strip().strip("`") for x in cells[2].split(",") if x.strip()}
                    documented[name] = (cells[1], labels)
        self.assertGreater(len(documented), 30)
        exported = {}
        for family in text_string_to_metric_families(fetch(self.url)):
            name = family.name + ("_total" if family.type == "counter" else "")
            labels = set()
            for sample in family.samples:
                labels |= set(sample.labels) - {"le", "quantile"}
            exported[name] = (family.type, labels)
        self.assertEqual(sorted(set(exported) - set(documented)), [],
                         "exported but not in docs/operations.md's table")
        self.assertEqual(sorted(set(documented) - set(exported)), [],
                         "in docs/operations.md's table but not exported")
        for name, (kind, labels) in exported.items():
            self.assertEqual(documented[name], (kind, labels), name)

    def test_a_real_prometheus_scrapes_it(self):
        prom = shutil.which("prometheus")
        if prom is None:
            self.skipTest("the prometheus binary is not installed (Debian package prometheus)")
        work = tempfile.mkdtemp(prefix="dendro_prom_")
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: dendro\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{self.metrics_port}']\n")
        web_port = free_port()
        log = open(os.path.join(work, "prometheus.log"), "wb")
        proc = subprocess.Popen(
            [prom, f"--config.file={config}", f"--storage.tsdb.path={work}/data",
             f"--web.listen-address=127.0.0.1:{web_port}"],
            stdout=log, stderr=log)
        try:
            query = urllib.parse.quote('sum(dendro_jobs_finished_total{state="succeeded"})')
            url = f"http://127.0.0.1:{web_port}/api/v1/query?query={query}"
            got = None
            deadline = time.time() + GUARD_SECONDS
            while time.time() < deadline:
                try:
                    body = json.loads(fetch(url))
                    result = body["data"]["result"]
                    if result:
                        got = float(result[0]["value"][1])
                        if got == 3:
                            break
                except OSError:
                    pass  # not listening yet
                time.sleep(0.5)
            self.assertEqual(got, 3, "PromQL never saw the 3 finished jobs")
            # The scrape itself is healthy.
            up = json.loads(fetch(
                f"http://127.0.0.1:{web_port}/api/v1/query?query=up%7Bjob%3D%22dendro%22%7D"))
            self.assertEqual(up["data"]["result"][0]["value"][1], "1")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
            shutil.rmtree(work, ignore_errors=True)


class ModelCacheTest(unittest.TestCase):
    """--model_cache_mb bounds the loaded models; evicted ones reload on use."""

    def test_cache_is_bounded_and_evicted_models_still_answer(self):
        work = tempfile.mkdtemp(prefix="dendro_cache_")
        port = free_port()
        server = Server(work, ("--metrics_listen", f"127.0.0.1:{port}", "--threads", "1",
                               "--model_cache_mb", "1"))
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            # 150,000 training rows: each model's saved tree (with its
            # point -> leaf assignment) is well over half a MiB, so two do
            # not fit in the 1 MiB cache.
            x, _ = hierarchical_logits(150000, 3, 4, seed=5)
            ds = upload(server, x).id
            for name in ("a", "b"):
                spec = pb.JobSpec(dataset_id=ds, model_name=name, l2h=pb.L2hParams())
                job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=10)
                done = server.jobs.WaitJob(pb.WaitJobRequest(
                    id=job.id, timeout={"seconds": GUARD_SECONDS}), timeout=GUARD_SECONDS + 10)
                self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
            rows = x[:5]

            def assign(name):
                return server.models.Assign(pb.AssignRequest(
                    model=pb.ModelRef(name=name), rows=rows.shape[0], cols=rows.shape[1],
                    data=rows.astype("<f4").tobytes(), level=2), timeout=30)

            first = assign("a")
            s = samples(fetch(url))
            self.assertEqual(value(s, "dendro_model_cache_capacity_bytes"), 1 << 20)
            self.assertEqual(value(s, "dendro_model_cache_entries"), 1)
            charged = value(s, "dendro_model_cache_bytes")
            self.assertGreater(charged, 1 << 19)
            self.assertLessEqual(charged, 1 << 20)
            assign("a")
            s = samples(fetch(url))
            self.assertEqual(value(s, "dendro_model_cache_hits_total"), 1)
            self.assertEqual(value(s, "dendro_model_cache_misses_total"), 1)
            assign("b")  # pushes "a" out
            again = assign("a")  # reloaded from disk, pushing "b" out
            s = samples(fetch(url))
            self.assertEqual(value(s, "dendro_model_cache_evictions_total"), 2)
            self.assertEqual(value(s, "dendro_model_cache_misses_total"), 3)
            self.assertEqual(value(s, "dendro_model_cache_entries"), 1)
            self.assertLessEqual(value(s, "dendro_model_cache_bytes"), 1 << 20)
            self.assertEqual(list(first.cluster), list(again.cluster))
            self.assertEqual(list(first.leaf), list(again.leaf))
            # A deleted model is gone from the cache at once.
            server.models.DeleteModel(pb.DeleteModelRequest(name="a"),
                                      timeout=10)
            s = samples(fetch(url))
            self.assertEqual(value(s, "dendro_model_cache_entries"), 0)
            self.assertEqual(value(s, "dendro_model_cache_bytes"), 0)
        finally:
            if server.proc.poll() is None:
                server.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    unittest.main(verbosity=2)
