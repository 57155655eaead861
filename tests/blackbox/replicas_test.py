#!/usr/bin/python3
"""Three dendrod replicas over one PostgreSQL catalogue and one data directory.

Starts a real PostgreSQL 15 (pg_lib.py) and three dendrod processes on
loopback, each with its own --replica_id and a 3 s job lease, sharing
--catalog and --data_dir. Checks, in order:
  1. 30 jobs submitted round-robin all finish, each exactly once (one model
     version each), run on more than one replica, and every model is
     visible and assignable from every replica; one deleted through replica
     A is NOT_FOUND through A as soon as the delete is answered, and through
     B and C once A's notification reaches them (the lag is printed; the
     bound polled for is generous, for a loaded machine);
  2. a cancel sent to a replica other than the one running the job ends it
     CANCELLED;
  3. with --queue_size 3 the queue is full over the three replicas together:
     RESOURCE_EXHAUSTED from any of them;
  4. kill -9 of the replica running a job: after the lease expires another
     replica takes it, and it SUCCEEDS with attempts = 2 and one model
     version.

  5. the CLI given an "ipv4:a,b,c" target spreads one-shot fits (upload,
     submit, wait) over the replicas.

Usage: replicas_test.py DENDROD_BINARY [DENDRO_CLI_BINARY]
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, rpc, hierarchical_logits  # noqa: E402
from pg_lib import Postgres  # noqa: E402

import numpy as np  # noqa: E402

LEASE_SECONDS = 3
QUEUE_SIZE = 3
GUARD = 180
TERMINAL = {pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED}


class Replica:
    def __init__(self, name, catalog, data_dir, work, env=None):
        self.name = name
        self.port_file = os.path.join(work, f"{name}.port")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log_path = os.path.join(work, f"{name}.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [bb.DENDROD, "--listen", "127.0.0.1:0", "--port_file", self.port_file,
             "--data_dir", data_dir, "--catalog", catalog, "--replica_id", name,
             "--job_lease_seconds", str(LEASE_SECONDS), "--queue_size", str(QUEUE_SIZE),
             "--threads", "1", "--drain_seconds", "0", "--metrics_listen", "127.0.0.1:0"],
            stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 60
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"replica {name} did not start (see {self.log_path})")
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.port = int(f.read().strip())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.datasets = rpc.DatasetServiceStub(self.channel)
        self.jobs = rpc.JobServiceStub(self.channel)
        self.models = rpc.ModelServiceStub(self.channel)

    def ran(self, job_id):
        """True if this replica's log says it started `job_id`."""
        with open(self.log_path, "rb") as f:
            return re.search(rb"job " + job_id.encode() + rb": running", f.read()) is not None

    def metrics(self):
        """This replica's /metrics text."""
        with open(self.log_path, "rb") as f:
            port = int(re.findall(rb"metrics on port (\d+)", f.read())[-1])  # this process's
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()

    def rpcs(self, method):
        """How many calls of `method` this replica has handled (its /metrics)."""
        total = 0
        for line in self.metrics().splitlines():
            if line.startswith("grpc_server_handled_total{") and f'grpc_method="{method}"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def counter(self, name):
        """The value of an unlabelled counter in this replica's /metrics."""
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{self.name}: no {name} in /metrics")

    def log_lines(self, needle):
        with open(self.log_path, "rb") as f:
            return sum(1 for line in f if needle in line)

    def stop(self, sig=signal.SIGTERM):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=120)
        self.log.close()


def blobs(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=6.0, size=(6, d))
    y = rng.integers(0, 6, size=n)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32)


def upload(replica, x):
    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(rows=x.shape[0], cols=x.shape[1]))
        yield pb.UploadDatasetRequest(data=np.ascontiguousarray(x, dtype="<f4").tobytes())
    return replica.datasets.UploadDataset(requests(), timeout=60).id


def wait(replica, job_id):
    return replica.jobs.WaitJob(pb.WaitJobRequest(id=job_id, timeout={"seconds": GUARD}),
                                timeout=GUARD + 10)


def wait_running(replicas, job_id):
    """The replica whose log shows it running `job_id`, once it runs."""
    deadline = time.time() + GUARD
    while time.time() < deadline:
        job = replicas[0].jobs.GetJob(pb.GetJobRequest(id=job_id), timeout=10)
        if job.state in TERMINAL:
            raise AssertionError(f"job {job_id} ended before it was seen running: {job}")
        if job.state == pb.JOB_STATE_RUNNING:
            for r in replicas:
                if r.ran(job_id):
                    return r
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never started")


def long_ghhc(**extra):
    """A gHHC fit that runs for many seconds unless cancelled."""
    return pb.GhhcParams(internal_nodes=50, margin_every=1, margin_steps=1000000, seed=1, **extra)


class ReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = Postgres()
        why = cls.pg.why_missing()
        if why:
            raise unittest.SkipTest(why)
        cls.replicas = []
        cls.work = tempfile.mkdtemp(prefix="dendro_replicas_")
        try:
            cls.pg.start()
            cls.data = os.path.join(cls.work, "shared-data")
            os.makedirs(cls.data)
            cls.catalog = cls.pg.create_database("dendro")
            for i in range(3):
                cls.replicas.append(Replica(f"r{i}", cls.catalog, cls.data, cls.work))
        except BaseException:
            cls.tearDownClass()
            raise
        cls.logits = hierarchical_logits(300, 2, 3, seed=3)[0]
        cls.points = blobs(600, 8, 1)

    @classmethod
    def tearDownClass(cls):
        for r in cls.replicas:
            r.stop()
        cls.pg.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def submit(self, replica, spec):
        return replica.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=30)

    def test_1_thirty_jobs_round_robin_each_once_visible_everywhere(self):
        rs = self.replicas
        # Uploads go to one replica each; the jobs they feed run anywhere.
        datasets = [upload(r, self.logits) for r in rs]
        jobs = []
        for i in range(30):
            # Never more than the queue holds: wait for room when it is full.
            spec = pb.JobSpec(dataset_id=datasets[i % 3], model_name=f"rr-{i}",
                              l2h=pb.L2hParams())
            for _ in range(GUARD * 10):
                try:
                    jobs.append(self.submit(rs[i % 3], spec))
                    break
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                    time.sleep(0.1)
        self.assertEqual(len(jobs), 30)
        for i, job in enumerate(jobs):
            done = wait(rs[(i + 1) % 3], job.id)  # waited on through another replica
            self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
            self.assertEqual(done.attempts, 1)
            self.assertEqual(done.model_version, 1)
        runners = [sum(r.ran(j.id) for j in jobs) for r in rs]
        print(f"30 jobs ran per replica: {runners}", flush=True)
        self.assertEqual(sum(runners), 30, "each job ran exactly once")
        self.assertGreaterEqual(sum(1 for n in runners if n > 0), 2)

        x = self.logits[:20]
        for i in range(30):
            ref = pb.ModelRef(name=f"rr-{i}")
            answers = []
            for r in rs:
                versions = r.models.ListModels(pb.ListModelsRequest(name=f"rr-{i}"), timeout=30)
                self.assertEqual([m.version for m in versions.models], [1])
                out = r.models.Assign(pb.AssignRequest(
                    model=ref, rows=x.shape[0], cols=x.shape[1],
                    data=np.ascontiguousarray(x, dtype="<f4").tobytes(), level=2), timeout=30)
                answers.append(list(out.cluster))
            self.assertEqual(answers[0], answers[1])
            self.assertEqual(answers[0], answers[2])

        # Deleted through A: gone through A at once, and through B and C (which
        # hold it in their model tables now) when the notification arrives.
        def assign_rr0(r):
            r.models.Assign(pb.AssignRequest(
                model=pb.ModelRef(name="rr-0"), rows=x.shape[0], cols=x.shape[1],
                data=np.ascontiguousarray(x, dtype="<f4").tobytes()), timeout=30)

        rs[0].models.DeleteModel(pb.DeleteModelRequest(name="rr-0"), timeout=30)
        answered = time.monotonic()
        with self.assertRaises(grpc.RpcError) as e:
            assign_rr0(rs[0])
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        for r in rs[1:]:
            deadline = answered + 30
            while True:
                try:
                    assign_rr0(r)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
                    break
                self.assertLess(time.monotonic(), deadline,
                                f"{r.name} still serves rr-0 30 s after its delete")
                time.sleep(0.005)
            print(f"delete seen by {r.name} {1000 * (time.monotonic() - answered):.0f} ms "
                  "after it was answered", flush=True)

    def test_2_cancel_through_another_replica(self):
        rs = self.replicas
        ds = upload(rs[0], self.points)
        job = self.submit(rs[0], pb.JobSpec(dataset_id=ds, model_name="cancel-me",
                                            ghhc=long_ghhc()))
        runner = wait_running(rs, job.id)
        other = next(r for r in rs if r is not runner)
        t0 = time.time()
        other.jobs.CancelJob(pb.CancelJobRequest(id=job.id), timeout=10)
        done = wait(other, job.id)
        print(f"cancel through {other.name} of a job on {runner.name}: "
              f"{pb.JobState.Name(done.state)} after {time.time() - t0:.2f} s", flush=True)
        self.assertEqual(done.state, pb.JOB_STATE_CANCELLED, done)
        with self.assertRaises(grpc.RpcError) as e:
            rs[2].models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="cancel-me")),
                                  timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_3_the_queue_limit_is_global(self):
        rs = self.replicas
        ds = upload(rs[1], self.points)
        submitted = []
        # One running per replica, then QUEUE_SIZE waiting in the shared queue.
        for i in range(3):
            job = self.submit(rs[i], pb.JobSpec(dataset_id=ds, model_name=f"busy-{i}",
                                                ghhc=long_ghhc()))
            submitted.append(job)
            wait_running(rs, job.id)
        for i in range(QUEUE_SIZE):
            submitted.append(self.submit(rs[i % 3], pb.JobSpec(
                dataset_id=ds, model_name=f"waiting-{i}", ghhc=long_ghhc())))
        for r in rs:
            with self.assertRaises(grpc.RpcError) as e:
                self.submit(r, pb.JobSpec(dataset_id=ds, model_name="one-too-many",
                                          ghhc=long_ghhc()))
            self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn(f"capacity {QUEUE_SIZE}", e.exception.details())
        for job in submitted:
            rs[2].jobs.CancelJob(pb.CancelJobRequest(id=job.id), timeout=10)
        for job in submitted:
            self.assertEqual(wait(rs[0], job.id).state, pb.JOB_STATE_CANCELLED)

    def test_4_kill9_of_the_runner_hands_the_job_on(self):
        rs = self.replicas
        ds = upload(rs[2], self.points)
        # Long enough to be killed mid-run, short enough to finish on the
        # second replica.
        job = self.submit(rs[2], pb.JobSpec(dataset_id=ds, model_name="survivor",
                                            ghhc=pb.GhhcParams(internal_nodes=50,
                                                               triples=400000, seed=1)))
        runner = wait_running(rs, job.id)
        time.sleep(0.5)
        t0 = time.time()
        runner.proc.send_signal(signal.SIGKILL)
        runner.proc.wait(timeout=30)
        survivors = [r for r in rs if r is not runner]
        done = wait(survivors[0], job.id)
        print(f"kill -9 of {runner.name}: job {pb.JobState.Name(done.state)} "
              f"{time.time() - t0:.2f} s later, attempts {done.attempts}", flush=True)
        self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
        self.assertEqual(done.attempts, 2)
        self.assertTrue(any(r.ran(job.id) for r in survivors))
        # One replica re-queued it, and says so in its metrics; none lost a lease.
        self.assertEqual(sum(r.counter("dendro_job_lease_takeovers_total") for r in survivors), 1)
        self.assertEqual(sum(r.counter("dendro_job_leases_lost_total") for r in survivors), 0)
        versions = survivors[1].models.ListModels(pb.ListModelsRequest(name="survivor"),
                                                  timeout=30)
        self.assertEqual([m.version for m in versions.models], [1])
        # The killed replica comes back under its id and serves the model.
        runner.channel.close()
        runner.log.close()
        back = Replica(runner.name, self.catalog, self.data, self.work)
        self.replicas[self.replicas.index(runner)] = back
        got = back.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="survivor")),
                                   timeout=30)
        self.assertEqual(got.version, 1)

    def test_5_the_cli_spreads_calls_over_a_target_list(self):
        if not DENDRO_CLI:
            self.skipTest("no dendro CLI binary given")
        rs = self.replicas
        target = "ipv4:" + ",".join(f"127.0.0.1:{r.port}" for r in rs)
        logits = os.path.join(self.work, "logits.npy")
        np.save(logits, self.logits.astype(np.float32))
        methods = ("UploadDataset", "SubmitJob", "WaitJob", "GetJob", "WatchJob", "GetTree")
        before = [sum(r.rpcs(m) for m in methods) for r in rs]
        uploads_before = sum(r.rpcs("UploadDataset") for r in rs)
        for i in range(6):
            out = subprocess.run([DENDRO_CLI, "--server", target, "l2h", logits,
                                  "--name", f"cli-rr-{i}", "--json"],
                                 capture_output=True, text=True, timeout=GUARD)
            self.assertEqual(out.returncode, 0, out.stderr)
        # A fresh process sends its first call to the first replica it
        # reaches; the calls after it rotate over all of them.
        calls = [sum(r.rpcs(m) for m in methods) - b for r, b in zip(rs, before)]
        print(f"6 one-shot l2h runs, calls per replica: {calls}", flush=True)
        self.assertEqual(sum(r.rpcs("UploadDataset") for r in rs) - uploads_before, 6)
        self.assertEqual(sum(1 for n in calls if n > 0), 3)
        for i in range(6):
            got = rs[i % 3].models.GetModel(
                pb.GetModelRequest(model=pb.ModelRef(name=f"cli-rr-{i}")), timeout=30)
            self.assertEqual(got.version, 1)


DENDRO_CLI = None

if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        DENDRO_CLI = sys.argv.pop(1)
    unittest.main(verbosity=2)
