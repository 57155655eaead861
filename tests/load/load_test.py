#!/usr/bin/python3
"""Bounded load and soak test of one real dendrod on loopback.

Starts dendrod with one worker, one thread per job and a short job queue,
prepares a clustering model ("base") and a classifier ("clf"), then runs 50
client threads, each on its own gRPC connection, for SECONDS. They mix
small uploads, slowly streamed uploads, l2h fits and a few longer gHHC fits,
WatchJob streams cancelled mid-way, CancelJob, Assign, GetTree, Predict,
PredictStream, listings and deletes of datasets, jobs and models. Afterwards it sends an oversized message, stalls an upload
mid-stream, opens 1,000 idle connections, and stops the server with SIGTERM.

Asserted:
  * dendrod is alive after the load and exits 0 after SIGTERM;
  * every call carries a deadline and none exceeds it (DEADLINE_EXCEEDED is
    a failure), and every status code is one expected for that call;
  * SubmitJob was refused with RESOURCE_EXHAUSTED (the queue filled);
  * answers are right under load: Assign on the l2h model gives each row's
    argmax as its leaf, Predict answers every row with a known label;
  * no job failed, and a single server never logs a lost lease;
  * dendrod's median RSS over the last third of the load exceeds that over
    the middle third by less than RSS_BOUND_MIB;
  * its open file descriptors return to the pre-load count (+ FD_SLACK)
    once the clients have closed, and again after the idle connections;
  * a message over --max_message_mb is refused with RESOURCE_EXHAUSTED
    and the server keeps serving;
  * an upload that stalls is cancelled by the server after
    --upload_idle_seconds and its temporary file is removed;
  * with 1,000 idle connections open, a new client is served.

Three server bugs this test found are fixed and now fail it if they come
back: a job accepted on a dataset being deleted (it failed when it started),
DATA_LOSS for a model deleted while it was being loaded (NOT_FOUND is
right), and "lease lost" logged for a job that had just succeeded.

With --replicas N (N >= 2) the same load runs against N dendrod replicas
that share one real PostgreSQL catalogue (pg_lib.py) and one data directory,
the clients spread over them round-robin. Then every check above holds for
each replica (RSS, file descriptors, the SIGTERM drain of each), the queue
is full over the replicas together, no replica logs a lost lease (the lease
is long enough that only a stalled replica would lose one), and at the end
every replica lists the same models and answers Assign on each of them.

Usage: load_test.py DENDROD_BINARY [SECONDS] [--replicas N]   (default 45, 1)
"""
import collections
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "blackbox"))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, rpc, hierarchical_logits  # noqa: E402
from grpc_blackbox_test import health_pb2, health_pb2_grpc  # noqa: E402
from pg_lib import Postgres  # noqa: E402

CLIENTS = 50
QUEUE_SIZE = 3
MAX_MESSAGE_MB = 2
IDLE_SECONDS = 2
DRAIN_SECONDS = 5
MODEL_CACHE_MB = 16
IDLE_CONNECTIONS = 1000
# The median RSS of the run's last third may exceed that of its middle third
# by at most this much. Medians, because a fit or a burst of uploads lifts
# RSS for a second or two (peaks of +50 MiB under ASan), which a leak does
# not. The model cache is capped at MODEL_CACHE_MB; the rest covers SQLite's
# page cache, malloc arenas of threads that come and go, and gRPC's
# per-connection buffers. A leak of about 1.6 KiB per call would exceed it in
# a 300 s run at 400 calls/s, one of about 11 KiB in the 45 s ctest run;
# under ASan, where CI runs it, LeakSanitizer reports any block leaked for
# good at exit. The summary prints the growth per call.
RSS_BOUND_MIB = 64
FD_SLACK = 4
# A replica renews its jobs' leases every third of this; only a replica that
# stalls for longer loses one, which the replicas run counts as a failure.
LEASE_SECONDS = 15
UNARY_DEADLINE = 20      # seconds; any unary call taking longer is a failure
DRAIN_QUEUE_WAIT = 300  # seconds the drain check waits for room in the queue
STREAM_DEADLINE = 60     # uploads and watch streams
FIT_NAMES = [f"load{i}" for i in range(6)]
SLOW_NAMES = [f"slow{i}" for i in range(3)]
CLIENT_CANCELLED = "CANCELLED(by client)"
CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


# --- the server ----------------------------------------------------------------

def channel_options():
    # A local subchannel pool gives each channel its own TCP connection
    # (grpcio otherwise shares one between channels with equal arguments).
    return [("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)]


class Stubs:
    def __init__(self, port):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=channel_options())
        grpc.channel_ready_future(self.channel).result(timeout=UNARY_DEADLINE)
        self.datasets = rpc.DatasetServiceStub(self.channel)
        self.jobs = rpc.JobServiceStub(self.channel)
        self.models = rpc.ModelServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def close(self):
        self.channel.close()


class Dendrod:
    """One dendrod; `catalog` and `name` make it a replica of a shared catalogue."""

    def __init__(self, binary, data_dir, name="dendrod", catalog=None):
        self.name = name
        self.data_dir = data_dir
        port_file = os.path.join(os.path.dirname(data_dir), f"{name}.port")
        self.log_path = os.path.join(os.path.dirname(data_dir), f"{name}.log")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.log = open(self.log_path, "ab")
        replica = [] if catalog is None else [
            "--catalog", catalog, "--replica_id", name,
            "--job_lease_seconds", str(LEASE_SECONDS)]
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--data_dir", data_dir, "--port_file", port_file,
             "--workers", "1", "--threads", "1", "--queue_size", str(QUEUE_SIZE),
             "--max_message_mb", str(MAX_MESSAGE_MB),
             "--upload_idle_seconds", str(IDLE_SECONDS),
             "--drain_seconds", str(DRAIN_SECONDS), "--job_stop_seconds", "5",
             "--model_cache_mb", str(MODEL_CACHE_MB)] + replica,
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dendrod did not start (see {self.log_path})")
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read().strip())

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def alive(self):
        return self.proc.poll() is None

    def temp_files(self):
        return [os.path.join(d, f) for d, _, files in os.walk(self.data_dir)
                for f in files if ".tmp." in f]


# --- bookkeeping ---------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []          # (rpc, code name, seconds)
        self.failures = []       # human-readable lines
        self.messages = collections.defaultdict(set)  # (rpc, code) -> a few details
        self.calls_at_steady = 0

    def record(self, name, code, seconds, detail=""):
        with self.lock:
            self.calls.append((name, code, seconds))
            if detail and len(self.messages[(name, code)]) < 3:
                self.messages[(name, code)].add(detail[:160])

    def fail(self, line):
        with self.lock:
            self.failures.append(line)


class Shared:
    """Objects the clients create and others use or delete."""

    def __init__(self):
        self.lock = threading.Lock()
        self.datasets = collections.deque()          # live dataset ids, oldest first
        self.jobs = collections.deque(maxlen=300)    # recent job ids
        self.ended = {}   # job id -> (state, error code, message) once seen finished
        self.submitted = {}   # job id -> (dataset id, call start, call end)
        self.deleted = {}     # dataset id -> (call start, call end) of the delete answered OK

    def observe(self, job):
        if job.state in (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED):
            with self.lock:
                self.ended[job.id] = (pb.JobState.Name(job.state),
                                      CODE_NAMES.get(job.error.code, str(job.error.code)),
                                      job.error.message)

    def pick_dataset(self, rng):
        with self.lock:
            return rng.choice(self.datasets) if self.datasets else None

    def pick_job(self, rng, recent=False):
        with self.lock:
            jobs = list(self.jobs)[-5:] if recent else self.jobs
            return rng.choice(jobs) if jobs else None


def call(stats, name, allowed, fn, slow=False):
    """Runs fn() (which makes one call with a deadline) and records its code.

    Returns the answer, or None on an error status. A code outside `allowed`
    is a failure, and so is DEADLINE_EXCEEDED unless the call is `slow`.
    """
    start = time.monotonic()
    try:
        out = fn()
        stats.record(name, "OK", time.monotonic() - start)
        return out
    except grpc.RpcError as e:
        elapsed = time.monotonic() - start
        code = e.code().name
        stats.record(name, code, elapsed, e.details() or "")
        if code not in allowed and not (slow and code == "DEADLINE_EXCEEDED"):
            stats.fail(f"{name}: {code} after {elapsed:.2f} s: {e.details()}")
        return None


def logits(rng, n):
    x, _ = hierarchical_logits(n, 3, 4, seed=int(rng.integers(1 << 30)))
    return x


def upload_requests(x, y=None, chunk=1 << 16, pause=None, rng=None, name="load"):
    yield pb.UploadDatasetRequest(header=pb.DatasetHeader(
        rows=x.shape[0], cols=x.shape[1], has_labels=y is not None, display_name=name))
    raw = np.ascontiguousarray(x, dtype="<f4").tobytes()
    for i in range(0, len(raw), chunk):
        if pause is not None and i > 0:
            time.sleep(rng.uniform(*pause))
        yield pb.UploadDatasetRequest(data=raw[i:i + chunk])
    if y is not None:
        yield pb.UploadDatasetRequest(labels=np.asarray(y, dtype="<i8").tobytes())


# --- the client mix ------------------------------------------------------------

class Client(threading.Thread):
    def __init__(self, index, port, stats, shared, stop, fixtures):
        super().__init__(name=f"client-{index}", daemon=True)
        self.port, self.stats, self.shared, self.stop = port, stats, shared, stop
        self.fx = fixtures
        self.rng = np.random.default_rng(1000 + index)
        self.pyrng = random.Random(1000 + index)
        self.ops = [(self.upload, 10), (self.slow_upload, 2), (self.fit, 14), (self.slow_fit, 1),
                    (self.watch, 6), (self.cancel, 3), (self.assign_base, 14),
                    (self.assign_fitted, 6), (self.get_tree, 10), (self.predict, 10),
                    (self.predict_stream, 3), (self.list_or_get, 5),
                    (self.delete_model, 2), (self.delete_job, 2)]

    def run(self):
        self.s = Stubs(self.port)
        funcs = [f for f, _ in self.ops]
        weights = [w for _, w in self.ops]
        try:
            while not self.stop.is_set():
                self.pyrng.choices(funcs, weights)[0]()
                time.sleep(self.pyrng.uniform(0, 0.05))
        except Exception as e:  # a bug in the test itself
            self.stats.fail(f"{self.name}: {type(e).__name__}: {e}")
        finally:
            self.s.close()

    # uploads: small ones, and some sent slowly (pauses below the idle timeout)
    def upload(self):
        x = logits(self.rng, int(self.rng.integers(100, 400)))
        self._upload("UploadDataset", x, None)

    def slow_upload(self):
        x = logits(self.rng, 600)
        self._upload("UploadDataset(slow)", x, (0.2, IDLE_SECONDS * 0.4), chunk=6000)

    def _upload(self, name, x, pause, chunk=1 << 16):
        ds = call(self.stats, name, {"RESOURCE_EXHAUSTED"}, lambda: self.s.datasets.UploadDataset(
            upload_requests(x, chunk=chunk, pause=pause, rng=self.pyrng), timeout=STREAM_DEADLINE),
            slow=pause is not None)
        if ds is None:
            return
        if (ds.rows, ds.cols) != x.shape:
            self.stats.fail(f"{name}: answered {ds.rows} x {ds.cols} for {x.shape}")
        # The pool keeps about 30 datasets: up to two of the oldest go per
        # upload, so refused deletes do not let it grow.
        with self.shared.lock:
            self.shared.datasets.append(ds.id)
            old = [self.shared.datasets.popleft()
                   for _ in range(min(2, len(self.shared.datasets) - 30))]
        for victim in old:
            # Refused (FAILED_PRECONDITION) while a queued or running job uses
            # it: then it goes back to the pool, to be deleted later.
            start = time.monotonic()
            done = call(self.stats, "DeleteDataset", {"FAILED_PRECONDITION"},
                        lambda: self.s.datasets.DeleteDataset(pb.DeleteDatasetRequest(id=victim),
                                                              timeout=UNARY_DEADLINE))
            with self.shared.lock:
                if done is None:
                    self.shared.datasets.append(victim)
                else:
                    self.shared.deleted[victim] = (start, time.monotonic())

    def fit(self):
        self._submit("SubmitJob", lambda ds: pb.JobSpec(
            dataset_id=ds, model_name=self.pyrng.choice(FIT_NAMES), l2h=pb.L2hParams()))

    def slow_fit(self):
        """A gHHC fit of a few seconds: holds the one worker, so jobs queue."""
        self._submit("SubmitJob(ghhc)", lambda ds: pb.JobSpec(
            dataset_id=ds, model_name=self.pyrng.choice(SLOW_NAMES),
            ghhc=pb.GhhcParams(internal_nodes=20,
                               triples=int(self.rng.integers(300_000, 1_500_000)))))

    def _submit(self, name, make_spec):
        """Submits make_spec(dataset) on a pool dataset; records when, for the race check."""
        ds = self.shared.pick_dataset(self.pyrng)
        if ds is None:
            return
        spec = make_spec(ds)
        start = time.monotonic()
        job = call(self.stats, name, {"RESOURCE_EXHAUSTED", "NOT_FOUND"},
                   lambda: self.s.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec),
                                                 timeout=UNARY_DEADLINE))
        if job is not None:
            with self.shared.lock:
                self.shared.jobs.append(job.id)
                self.shared.submitted[job.id] = (ds, start, time.monotonic())

    def watch(self):
        # Mostly recent jobs, which are likely still queued or running.
        job = self.shared.pick_job(self.pyrng, recent=self.pyrng.random() < 0.8)
        if job is None:
            return
        stream = self.s.jobs.WatchJob(pb.WatchJobRequest(id=job), timeout=STREAM_DEADLINE)
        cancelled = threading.Event()

        def cancel():
            cancelled.set()
            stream.cancel()
        timer = threading.Timer(self.pyrng.uniform(0.1, 2.0), cancel)
        timer.start()
        start = time.monotonic()
        try:
            for update in stream:
                if update.id != job:
                    self.stats.fail(f"WatchJob {job}: update for {update.id}")
                self.shared.observe(update)
            self.stats.record("WatchJob", "OK", time.monotonic() - start)
        except grpc.RpcError as e:
            elapsed = time.monotonic() - start
            code = e.code().name
            if code == "CANCELLED" and cancelled.is_set():
                code = CLIENT_CANCELLED
            self.stats.record("WatchJob", code, elapsed, e.details() or "")
            if code not in {CLIENT_CANCELLED, "RESOURCE_EXHAUSTED", "NOT_FOUND"}:
                self.stats.fail(f"WatchJob: {code} after {elapsed:.2f} s: {e.details()}")
        finally:
            timer.cancel()

    def cancel(self):
        job = self.shared.pick_job(self.pyrng)
        if job is not None:
            got = call(self.stats, "CancelJob", {"NOT_FOUND"}, lambda: self.s.jobs.CancelJob(
                pb.CancelJobRequest(id=job), timeout=UNARY_DEADLINE))
            if got is not None:
                self.shared.observe(got)

    def assign_base(self):
        n = int(self.rng.integers(1, 200))
        x, _ = hierarchical_logits(n, 4, 5, seed=int(self.rng.integers(1 << 30)))
        resp = call(self.stats, "Assign", set(), lambda: self.s.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="base"), rows=n, cols=x.shape[1], data=x.tobytes(), level=4),
            timeout=UNARY_DEADLINE))
        if resp is not None and list(resp.leaf) != list(np.argmax(x, axis=1)):
            self.stats.fail("Assign on base: leaves differ from the rows' argmax")

    def assign_fitted(self):
        x = logits(self.rng, int(self.rng.integers(1, 50)))
        call(self.stats, "Assign(fitted)", {"NOT_FOUND"}, lambda: self.s.models.Assign(
            pb.AssignRequest(model=pb.ModelRef(name=self.pyrng.choice(FIT_NAMES)), rows=len(x),
                             cols=x.shape[1], data=x.tobytes(), level=2), timeout=UNARY_DEADLINE),
)

    def get_tree(self):
        name = self.pyrng.choice(["base"] + FIT_NAMES)
        fmt = self.pyrng.choice([pb.TREE_FORMAT_JSON, pb.TREE_FORMAT_NEWICK,
                                 pb.TREE_FORMAT_LINKAGE_NPY])
        resp = call(self.stats, "GetTree" if name == "base" else "GetTree(fitted)",
                    {"NOT_FOUND"} if name != "base" else set(),
                    lambda: self.s.models.GetTree(pb.GetTreeRequest(
                        model=pb.ModelRef(name=name), format=fmt), timeout=UNARY_DEADLINE))
        if resp is not None and not resp.content:
            self.stats.fail(f"GetTree {name}: empty content")

    def _predict_request(self, n):
        x = self.fx["clf_x"][self.rng.integers(0, len(self.fx["clf_x"]), n)]
        return pb.PredictRequest(model=pb.ModelRef(name="clf"), rows=n, cols=x.shape[1],
                                 data=x.tobytes(), top_k=2, top_t=int(self.rng.integers(1, 4)))

    def _check_prediction(self, name, req, resp):
        if resp.rows != req.rows or len(resp.labels) != 2 * req.rows or \
                not set(resp.labels) <= self.fx["clf_labels"]:
            self.stats.fail(f"{name}: {resp.rows} rows, labels {set(resp.labels)}")

    def predict(self):
        req = self._predict_request(int(self.rng.integers(1, 100)))
        resp = call(self.stats, "Predict", set(), lambda: self.s.models.Predict(
            req, timeout=UNARY_DEADLINE))
        if resp is not None:
            self._check_prediction("Predict", req, resp)

    def predict_stream(self):
        reqs = [self._predict_request(int(self.rng.integers(1, 20))) for _ in range(4)]
        answers = call(self.stats, "PredictStream", {"RESOURCE_EXHAUSTED"}, lambda: list(
            self.s.models.PredictStream(iter(reqs), timeout=STREAM_DEADLINE)))
        if answers is not None:
            if len(answers) != len(reqs):
                self.stats.fail(f"PredictStream: {len(answers)} answers to {len(reqs)}")
            for req, resp in zip(reqs, answers):
                self._check_prediction("PredictStream", req, resp)

    def list_or_get(self):
        which = self.pyrng.randrange(3)
        if which == 0:
            call(self.stats, "ListModels", set(), lambda: self.s.models.ListModels(
                pb.ListModelsRequest(page_size=20), timeout=UNARY_DEADLINE))
        elif which == 1:
            call(self.stats, "ListJobs", set(), lambda: self.s.jobs.ListJobs(
                pb.ListJobsRequest(page_size=20), timeout=UNARY_DEADLINE))
        else:
            job = self.shared.pick_job(self.pyrng)
            if job is not None:
                got = call(self.stats, "GetJob", {"NOT_FOUND"}, lambda: self.s.jobs.GetJob(
                    pb.GetJobRequest(id=job), timeout=UNARY_DEADLINE))
                if got is not None:
                    self.shared.observe(got)

    def delete_model(self):
        name = self.pyrng.choice(FIT_NAMES + SLOW_NAMES)
        call(self.stats, "DeleteModel", {"NOT_FOUND"}, lambda: self.s.models.DeleteModel(
            pb.DeleteModelRequest(name=name, version=0), timeout=UNARY_DEADLINE))

    def delete_job(self):
        job = self.shared.pick_job(self.pyrng)
        if job is not None:
            # Its outcome first, so that deleting jobs hides no failure (one
            # that ends between the two calls is the exception).
            got = call(self.stats, "GetJob", {"NOT_FOUND"}, lambda: self.s.jobs.GetJob(
                pb.GetJobRequest(id=job), timeout=UNARY_DEADLINE))
            if got is not None:
                self.shared.observe(got)
            # Refused (FAILED_PRECONDITION) while the job is queued or running.
            call(self.stats, "DeleteJob", {"NOT_FOUND", "FAILED_PRECONDITION"},
                 lambda: self.s.jobs.DeleteJob(pb.DeleteJobRequest(id=job),
                                               timeout=UNARY_DEADLINE))


# --- phases --------------------------------------------------------------------

def prepare(s):
    """The l2h model 'base' (20 leaves) and the hppca classifier 'clf'."""
    x, y = hierarchical_logits(2000, 4, 5, seed=3)
    ds = s.datasets.UploadDataset(upload_requests(x, y), timeout=STREAM_DEADLINE)
    job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
        dataset_id=ds.id, model_name="base", l2h=pb.L2hParams())), timeout=UNARY_DEADLINE)
    job = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 60}), timeout=70)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job

    rng = np.random.default_rng(5)
    groups, per, d = 3, 4, 12
    k = groups * per
    means = np.repeat(rng.normal(0, 3.0, (groups, d)), per, axis=0) + rng.normal(0, 0.8, (k, d))
    labels = 50 + 10 * np.arange(k)
    c = np.repeat(np.arange(k), 60)
    cx = (means[c] + rng.normal(0, 0.9, (len(c), d))).astype(np.float32)
    ds = s.datasets.UploadDataset(upload_requests(cx, labels[c]), timeout=STREAM_DEADLINE)
    job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
        dataset_id=ds.id, model_name="clf",
        hppca=pb.HppcaTrainParams(superclasses=3, q=4, r=4, seed=2))), timeout=UNARY_DEADLINE)
    job = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 60}), timeout=70)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job
    return {"clf_x": cx, "clf_labels": set(int(v) for v in labels)}


def wait_for(predicate, seconds, step=0.2):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q)) * 1000 if values else float("nan")


def run_load(servers, duration, fixtures, stats, samples):
    """Runs the clients, round-robin over `servers`, for `duration` seconds.

    samples[name] collects (t, RSS KiB, fds) of each server every second.
    Returns the elapsed time, each server's sample at the start of the
    steady third, and the clients' shared state.
    """
    shared = Shared()
    stop = threading.Event()
    clients = [Client(i, servers[i % len(servers)].port, stats, shared, stop, fixtures)
               for i in range(CLIENTS)]
    start = shared.start = time.monotonic()
    for c in clients:
        c.start()
    steady_at = duration / 3
    steady = {}
    while time.monotonic() - start < duration:
        t = time.monotonic() - start
        dead = [sv for sv in servers if not sv.alive()]
        for sv in dead:
            stats.fail(f"{sv.name} exited during the load (code {sv.proc.returncode})")
        if dead:
            break
        for sv in servers:
            samples[sv.name].append((t, sv.rss_kib(), sv.fds()))
        if not steady and t >= steady_at:
            steady = {sv.name: samples[sv.name][-1] for sv in servers}
            with stats.lock:
                stats.calls_at_steady = len(stats.calls)
        time.sleep(1.0)
    stop.set()
    for c in clients:
        c.join(timeout=STREAM_DEADLINE + 10)
        if c.is_alive():
            stats.fail(f"{c.name} did not return")
    elapsed = time.monotonic() - start
    return elapsed, steady or {sv.name: samples[sv.name][-1] for sv in servers}, shared


def check_oversized(server, s, results):
    """A message over --max_message_mb: refused, and the server serves on."""
    rows = (MAX_MESSAGE_MB << 20) // (4 * 20) + 1000
    x = np.zeros((rows, 20), np.float32)
    try:
        s.models.Assign(pb.AssignRequest(model=pb.ModelRef(name="base"), rows=rows, cols=20,
                                         data=x.tobytes()), timeout=UNARY_DEADLINE)
        code = "OK"
    except grpc.RpcError as e:
        code = e.code().name
    results.append(("oversized Assign (%.1f MiB)" % (x.nbytes / 2**20), code,
                    code == "RESOURCE_EXHAUSTED"))
    try:
        s.datasets.UploadDataset(upload_requests(x, chunk=x.nbytes), timeout=STREAM_DEADLINE)
        code = "OK"
    except grpc.RpcError as e:
        code = e.code().name
    results.append(("oversized upload chunk", code, code == "RESOURCE_EXHAUSTED"))
    gone = wait_for(lambda: not server.temp_files(), 5)
    results.append(("no temporary file after it", "clean" if gone else server.temp_files(), gone))
    ok = s.health.Check(health_pb2.HealthCheckRequest(), timeout=UNARY_DEADLINE).status
    results.append(("health after", health_pb2.HealthCheckResponse.ServingStatus.Name(ok),
                    ok == health_pb2.HealthCheckResponse.SERVING))


def check_stalled_upload(server, s, results):
    """An upload that stops sending is cancelled and its temp file removed."""
    x = logits(np.random.default_rng(9), 2000)
    release = threading.Event()

    def requests():
        gen = upload_requests(x, chunk=8000)
        yield next(gen)   # header
        yield next(gen)   # one chunk, then nothing
        release.wait(STREAM_DEADLINE + 5)

    temps_before = set(server.temp_files())
    start = time.monotonic()
    fut = s.datasets.UploadDataset.future(requests(), timeout=STREAM_DEADLINE)
    had_temp = wait_for(lambda: set(server.temp_files()) - temps_before or fut.done(), 10, 0.02)
    had_temp = bool(set(server.temp_files()) - temps_before) if had_temp else False
    try:
        fut.result()
        code, detail = "OK", ""
    except grpc.RpcError as e:
        code, detail = e.code().name, e.details()
    elapsed = time.monotonic() - start
    release.set()
    # The client hears CANCELLED before the server's handler has finished
    # cleaning up; give it a moment, bounded.
    wait_for(lambda: not set(server.temp_files()) - temps_before, 10, 0.05)
    left = set(server.temp_files()) - temps_before
    results.append(("stalled upload: temp file while open", had_temp, had_temp))
    # The server cancels it (CANCELLED); the client's own deadline would be
    # DEADLINE_EXCEEDED, which means the server never dropped it.
    results.append((f"stalled upload: ended after {elapsed:.1f} s", f"{code} {detail}",
                    code == "CANCELLED"))
    results.append(("stalled upload: temp file removed", sorted(left) or "removed", not left))


def check_idle_connections(server, port, baseline_fds, results):
    """1,000 connections that do nothing; half send only the HTTP/2 preface."""
    socks = []
    try:
        for i in range(IDLE_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i % 2:
                sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            socks.append(sock)
        held = wait_for(lambda: server.fds() >= baseline_fds + IDLE_CONNECTIONS * 0.9, 30)
        results.append((f"{IDLE_CONNECTIONS} idle connections held by dendrod",
                        f"{server.fds()} fds", held))
        s = Stubs(port)
        try:
            ok = s.health.Check(health_pb2.HealthCheckRequest(), timeout=UNARY_DEADLINE).status
            x, _ = hierarchical_logits(50, 4, 5, seed=8)
            resp = s.models.Assign(pb.AssignRequest(model=pb.ModelRef(name="base"), rows=50,
                                                    cols=20, data=x.tobytes()),
                                   timeout=UNARY_DEADLINE)
            ds = s.datasets.UploadDataset(upload_requests(logits(np.random.default_rng(1), 100)),
                                          timeout=STREAM_DEADLINE)
            served = (ok == health_pb2.HealthCheckResponse.SERVING and
                      list(resp.leaf) == list(np.argmax(x, axis=1)) and ds.rows == 100)
            results.append(("a new client served meanwhile (health, Assign, upload)",
                            "served" if served else "wrong answers", served))
        except grpc.RpcError as e:
            results.append(("a new client served meanwhile", e.code().name, False))
        finally:
            s.close()
    finally:
        for sock in socks:
            sock.close()
    back = wait_for(lambda: server.fds() <= baseline_fds + FD_SLACK, 30)
    results.append((f"fds after they close (baseline {baseline_fds} + {FD_SLACK})",
                    server.fds(), back))


# --- report --------------------------------------------------------------------

def rss_growth_mib(own, steady_t):
    """Median RSS of the last third minus that of the middle third, in MiB.

    `own` holds (t, rss KiB, fds) samples; the middle third starts at
    `steady_t` (the end of the first third), the last third halfway from
    there to the last sample. Returns (growth, middle median, last median).
    """
    end_t = own[-1][0]
    split = steady_t + (end_t - steady_t) / 2
    middle = sorted(r for t, r, _ in own if steady_t <= t < split)
    last = sorted(r for t, r, _ in own if t >= split)
    if not middle or not last:
        return 0.0, 0.0, 0.0
    m, l = middle[len(middle) // 2] / 1024, last[len(last) // 2] / 1024
    return l - m, m, l


def summary(stats, elapsed, servers, samples, steady, fd_base, fd_end):
    by_rpc = collections.defaultdict(list)
    codes = collections.defaultdict(collections.Counter)
    for name, code, secs in stats.calls:
        by_rpc[name].append(secs)
        codes[name][code] += 1
    all_codes = sorted({c for cnt in codes.values() for c in cnt})
    print(f"\n{CLIENTS} clients, {elapsed:.0f} s, {len(stats.calls)} RPCs, "
          f"{len(stats.calls) / elapsed:.1f} RPC/s")
    header = f"{'rpc':<22}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}  " + "  ".join(all_codes)
    print(header)
    for name in sorted(by_rpc):
        print(f"{name:<22}{len(by_rpc[name]):>7}{percentile(by_rpc[name], 50):>9.1f}"
              f"{percentile(by_rpc[name], 99):>9.1f}  " +
              "  ".join(f"{codes[name][c]:>{len(c)}}" for c in all_codes))
    for (name, code), details in sorted(stats.messages.items()):
        if code not in ("OK", CLIENT_CANCELLED):
            print(f"  {name} {code}: {' | '.join(sorted(details))}")
    for sv in servers:
        own, st = samples[sv.name], steady[sv.name]
        stride = max(1, len(own) // 30)
        print(f"{sv.name}:")
        print("  RSS MiB every %d s: %s" % (stride, " ".join(
            f"{r / 1024:.0f}" for _, r, _ in own[::stride])))
        print("  fds every %d s: %s" % (stride, " ".join(str(f) for _, _, f in own[::stride])))
        print(f"  RSS start {own[0][1] / 1024:.1f} MiB, steady (t={st[0]:.0f} s) "
              f"{st[1] / 1024:.1f} MiB, end {own[-1][1] / 1024:.1f} MiB, "
              f"max after steady {max(r for t, r, _ in own if t >= st[0]) / 1024:.1f} MiB")
        print(f"  fds before load {fd_base[sv.name]}, steady {st[2]}, "
              f"after clients closed {fd_end[sv.name]}")
    return codes


def paged(call, request_type, field, page_size):
    """Every item of a paginated List RPC, page after page."""
    token = ""
    while True:
        page = call(request_type(page_size=page_size, page_token=token), timeout=UNARY_DEADLINE)
        yield from getattr(page, field)
        token = page.next_page_token
        if not token:
            return


def list_model_versions(stubs):
    return {(m.name, m.version)
            for m in paged(stubs.models.ListModels, pb.ListModelsRequest, "models", 100)}


def list_jobs(stubs):
    return list(paged(stubs.jobs.ListJobs, pb.ListJobsRequest, "jobs", 1000))


def jobs_in_flight(stubs):
    return sum(1 for j in list_jobs(stubs)
               if j.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING))


def check_replicas_agree(servers, results):
    """Every replica lists the same models and answers Assign on each.

    The clients leave jobs queued and running when they stop, and each one
    that succeeds adds a model version; the listings are compared once none
    is left, so that a job ending between two listings is not a disagreement.
    """
    setup = Stubs(servers[0].port)
    try:
        settled = wait_for(lambda: jobs_in_flight(setup) == 0, DRAIN_QUEUE_WAIT, step=0.5)
    finally:
        setup.close()
    results.append(("jobs queued or running before the listings compare", "none" if settled
                    else "still some", settled))
    listings = {}
    for sv in servers:
        s = Stubs(sv.port)
        try:
            listings[sv.name] = list_model_versions(s)
        finally:
            s.close()
    for sv in servers:
        s = Stubs(sv.port)
        try:
            names = listings[sv.name]
            # "base" was fitted on 4 x 5 logits, the clients' models on 3 x 4;
            # "clf" is a classifier (Predict, not Assign).
            base_x, _ = hierarchical_logits(30, 4, 5, seed=11)
            client_x = logits(np.random.default_rng(12), 30)
            clustering = sorted({n for n, _ in names} - {"clf"})
            answered = []
            for name in clustering:
                x = base_x if name == "base" else client_x
                try:
                    resp = s.models.Assign(pb.AssignRequest(
                        model=pb.ModelRef(name=name), rows=len(x), cols=x.shape[1],
                        data=x.tobytes()), timeout=UNARY_DEADLINE)
                    if len(resp.leaf) == len(x):
                        answered.append(name)
                except grpc.RpcError as e:
                    print(f"  {sv.name}: Assign on {name}: {e.code().name} {e.details()}")
            results.append((f"{sv.name}: Assign on every listed clustering model",
                            f"{len(answered)} of {len(clustering)}",
                            len(answered) == len(clustering)))
        finally:
            s.close()
    first = listings[servers[0].name]
    same = all(v == first for v in listings.values())
    results.append((f"the {len(servers)} replicas list the same models",
                    f"{len(first)} model versions" if same else
                    {k: len(v) for k, v in listings.items()}, same))


def main():
    args = sys.argv[1:]
    replicas = 1
    if "--replicas" in args:
        at = args.index("--replicas")
        replicas = int(args[at + 1])
        del args[at:at + 2]
    binary = args[0]
    duration = float(args[1]) if len(args) > 1 else 45
    top = tempfile.mkdtemp(prefix="dendro_load_")
    data_dir = os.path.join(top, "data")
    pg = None
    if replicas > 1:
        pg = Postgres()
        why = pg.why_missing()
        if why:
            print(f"SKIP: {why}")
            return 0
        catalog = pg.start().create_database("dendro_load")
        os.makedirs(data_dir)
        servers = [Dendrod(binary, data_dir, f"replica{i}", catalog) for i in range(replicas)]
    else:
        servers = [Dendrod(binary, data_dir)]
    server = servers[0]
    stats = Stats()
    checks = []   # (what, observed, passed)
    exit_codes = {}
    try:
        setup = Stubs(server.port)
        fixtures = prepare(setup)
        fd_base = {sv.name: sv.fds() for sv in servers}
        samples = {sv.name: [] for sv in servers}
        elapsed, steady, shared = run_load(servers, duration, fixtures, stats, samples)
        for sv in servers:
            checks.append((f"{sv.name} alive after the load", sv.alive(), sv.alive()))
        fd_end_ok = {sv.name: wait_for(lambda: sv.fds() <= fd_base[sv.name] + FD_SLACK, 30)
                     for sv in servers}
        fd_end = {sv.name: sv.fds() for sv in servers}
        codes = summary(stats, elapsed, servers, samples, steady, fd_base, fd_end)

        deadline_misses = sum(c["DEADLINE_EXCEEDED"] for n, c in codes.items() if "slow" not in n)
        checks.append(("DEADLINE_EXCEEDED (not deliberately slow)", deadline_misses,
                       deadline_misses == 0))
        full = codes["SubmitJob"]["RESOURCE_EXHAUSTED"]
        queue_msgs = stats.messages.get(("SubmitJob", "RESOURCE_EXHAUSTED"), set())
        checks.append(("SubmitJob RESOURCE_EXHAUSTED (queue full)", full,
                       full > 0 and all("queue" in m for m in queue_msgs)))
        fitted = codes["SubmitJob"]["OK"]
        checks.append(("jobs accepted", fitted, fitted > 0))
        watch_cut = codes["WatchJob"][CLIENT_CANCELLED]
        checks.append(("watch streams cancelled mid-way", watch_cut, watch_cut > 0))
        steady_calls = len(stats.calls) - stats.calls_at_steady
        for sv in servers:
            growth, middle, last = rss_growth_mib(samples[sv.name], steady[sv.name][0])
            checks.append((f"{sv.name}: median RSS, last third over middle third "
                           f"(bound {RSS_BOUND_MIB} MiB)",
                           f"{growth:+.1f} MiB ({middle:.1f} -> {last:.1f}); "
                           f"{steady_calls} calls of all clients after the first third",
                           growth < RSS_BOUND_MIB))
            checks.append((f"{sv.name}: fds after clients closed "
                           f"(before load {fd_base[sv.name]} + {FD_SLACK})",
                           fd_end[sv.name], fd_end_ok[sv.name]))

        # Jobs: the outcome of every one seen finished (by a watch, GetJob,
        # CancelJob, before a DeleteJob, or listed now). None may fail.
        for j in list_jobs(setup):
            shared.observe(j)
        states, errors = collections.Counter(), collections.Counter()
        failed_jobs = []
        for job_id, (state, code, message) in sorted(shared.ended.items()):
            states[state] += 1
            if state != "JOB_STATE_FAILED":
                continue
            line = f"{job_id} {code}: {message}"
            # The race only if the SubmitJob and the DeleteDataset of its
            # dataset, both answered OK, ran at the same time.
            ds, s0, s1 = shared.submitted.get(job_id, ("?", None, None))
            d0, d1 = shared.deleted.get(ds, (None, None))
            overlap = s0 is not None and d0 is not None and d0 < s1 and s0 < d1
            if s0 is not None and d0 is not None:
                line += (f" [SubmitJob OK {s0 - shared.start:.3f}-{s1 - shared.start:.3f} s, "
                         f"DeleteDataset OK {d0 - shared.start:.3f}-{d1 - shared.start:.3f} s]")
            if overlap:
                line += " (submitted while its dataset was being deleted)"
            errors[code] += 1
            failed_jobs.append(line)
        print(f"datasets in the clients' pool at the end: {len(shared.datasets)}")
        print(f"job outcomes seen: {dict(states)} of {len(shared.ended)} jobs; "
              f"failed by code: {dict(errors)}")
        for line in failed_jobs[:10]:
            print(f"  {line}")
        checks.append(("failed jobs", dict(errors) or 0, not errors))
        for sv in servers:
            with open(sv.log_path, errors="replace") as f:
                lease_lines = [line for line in f if "lease lost" in line]
            for line in lease_lines[:3]:
                print(f"  {line.strip()[:220]}")
            checks.append((f"'lease lost' lines logged by {sv.name}", len(lease_lines),
                           not lease_lines))
        if len(servers) > 1:
            check_replicas_agree(servers, checks)

        check_oversized(server, setup, checks)
        check_stalled_upload(server, setup, checks)
        fd_before_idle = server.fds()
        check_idle_connections(server, server.port, fd_before_idle, checks)

        # A clean drain: a gHHC job running and its watch open at SIGTERM
        # (to every replica at once).
        # The clients filled the queue; it empties as the last of their jobs
        # run (slowly under the sanitizers), so a full queue is retried.
        ds = shared.pick_dataset(random.Random(0))
        give_up = time.monotonic() + DRAIN_QUEUE_WAIT
        while True:
            try:
                job = setup.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
                    dataset_id=ds, model_name="drain",
                    ghhc=pb.GhhcParams(internal_nodes=20, triples=500_000))),
                    timeout=UNARY_DEADLINE)
                break
            except grpc.RpcError as e:
                if (e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
                        or time.monotonic() > give_up):
                    raise
                time.sleep(0.5)
        watch = setup.jobs.WatchJob(pb.WatchJobRequest(id=job.id), timeout=STREAM_DEADLINE)
        last = next(watch)
        while last.state == pb.JOB_STATE_QUEUED:
            last = next(watch)
        for sv in servers:
            sv.proc.send_signal(signal.SIGTERM)
        try:
            for last in watch:
                pass
            watch_end = "ended"
        except grpc.RpcError as e:
            watch_end = e.code().name
        setup.close()
        margin = 30  # gRPC's 5 s shutdown deadline, --job_stop_seconds, a busy machine
        for sv in servers:
            try:
                exit_codes[sv.name] = sv.proc.wait(timeout=DRAIN_SECONDS + margin)
            except subprocess.TimeoutExpired:
                exit_codes[sv.name] = "still running"
        # Within the drain the job finishes; past it, it is handed back QUEUED.
        print(f"drain: the job's watch {watch_end} with {pb.JobState.Name(last.state)}")
        for sv in servers:
            checks.append((f"SIGTERM drain of {sv.name}: exit code "
                           f"(within {DRAIN_SECONDS} + {margin} s)",
                           exit_codes[sv.name], exit_codes[sv.name] == 0))
    finally:
        for sv in servers:
            if sv.proc.poll() is None:
                sv.proc.kill()
                sv.proc.wait()
            sv.log.close()
        if pg is not None:
            pg.stop()

    print()
    for what, observed, passed in checks:
        print(f"{'ok  ' if passed else 'FAIL'} {what}: {observed}")
    for line in stats.failures[:30]:
        print(f"FAIL {line}")
    if len(stats.failures) > 30:
        print(f"FAIL ... and {len(stats.failures) - 30} more")
    failed = [c for c in checks if not c[2]] or stats.failures
    logs = ", ".join(sv.log_path for sv in servers)
    print(f"\n{'FAILED' if failed else 'PASSED'} (dendrod logs: {logs})")
    return 1 if failed else 0


if __name__ == "__main__":
    bb.DENDROD = sys.argv[1] if len(sys.argv) > 1 else None
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    sys.exit(main())
