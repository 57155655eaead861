#!/usr/bin/python3
"""Black-box test of dendrod from an independent client (Python grpcio).

Generates Python stubs from proto/ with protoc, starts the real dendrod
binary on a free loopback port, and checks health, reflection, the
upload -> job -> model -> tree -> assign path, a classifier's Predict,
PredictStream and GetClasses, clean errors, a graceful SIGTERM and a restart
on the same data directory.

Usage: grpc_blackbox_test.py DENDROD_BINARY
"""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
DENDROD = None
GEN = tempfile.mkdtemp(prefix="dendro_py_stubs_")
atexit.register(shutil.rmtree, GEN, ignore_errors=True)


def generate_stubs():
    args = [
        "protoc",
        f"--proto_path={ROOT}/proto",
        f"--proto_path={HERE}/protos",
        f"--python_out={GEN}",
        f"--grpc_python_out={GEN}",
        "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
        "dendro/v1/dendro.proto",
        "health/v1/health.proto",
        "reflection/v1alpha/reflection.proto",
    ]
    subprocess.run(args, check=True)
    sys.path.insert(0, GEN)


generate_stubs()
import grpc  # noqa: E402
from dendro.v1 import dendro_pb2 as pb  # noqa: E402
from dendro.v1 import dendro_pb2_grpc as rpc  # noqa: E402
# Stub modules are named after the .proto paths (health/, reflection/) so they
# do not collide with the grpc package; the services keep their real names.
from health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from reflection.v1alpha import reflection_pb2, reflection_pb2_grpc  # noqa: E402


def hierarchical_logits(n, groups, per, seed):
    rng = np.random.default_rng(seed)
    k = groups * per
    y = rng.integers(0, k, size=n)
    x = rng.normal(size=(n, k))
    same = (np.arange(k)[None, :] // per) == (y[:, None] // per)
    x += 2.5 * same
    x[np.arange(n), y] += 3.0
    return x.astype(np.float32), y.astype(np.int64)


class Server:
    """dendrod on a free loopback port. Its port file and log go to `state_dir`
    (default: the data directory; elsewhere when a test copies the data
    directory and wants only dendrod's own files in it)."""

    def __init__(self, data_dir, extra_args=("--drain_seconds", "5"), state_dir=None,
                 start_seconds=30):
        self.data_dir = data_dir
        state_dir = state_dir or data_dir
        port_file = os.path.join(state_dir, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.log_path = os.path.join(state_dir, "dendrod.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [DENDROD, "--listen", "127.0.0.1:0", "--data_dir", data_dir,
             "--port_file", port_file, *extra_args],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + start_seconds
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dendrod did not start (see {self.log_path})")
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read().strip())
        opts = [("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=opts)
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.datasets = rpc.DatasetServiceStub(self.channel)
        self.jobs = rpc.JobServiceStub(self.channel)
        self.models = rpc.ModelServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def stop(self, timeout=60):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self.log.close()
        return code


def upload(server, x, y=None, chunk=1 << 20):
    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(
            rows=x.shape[0], cols=x.shape[1], has_labels=y is not None,
            display_name="blackbox"))
        raw = np.ascontiguousarray(x, dtype="<f4").tobytes()
        for i in range(0, len(raw), chunk):
            yield pb.UploadDatasetRequest(data=raw[i:i + chunk])
        if y is not None:
            yield pb.UploadDatasetRequest(labels=np.asarray(y, dtype="<i8").tobytes())
    return server.datasets.UploadDataset(requests(), timeout=60)


class BlackBoxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dendro_blackbox_")
        cls.server = Server(cls.dir)

    @classmethod
    def tearDownClass(cls):
        if cls.server.proc.poll() is None:
            cls.server.stop()

    def test_1_health_and_reflection(self):
        s = self.server
        for name in ["", "dendro.v1.DatasetService", "dendro.v1.JobService",
                     "dendro.v1.ModelService"]:
            resp = s.health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING, name)
        with self.assertRaises(grpc.RpcError) as err:
            s.health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

        refl = reflection_pb2_grpc.ServerReflectionStub(s.channel)
        responses = refl.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        names = {svc.name for r in responses for svc in r.list_services_response.service}
        self.assertTrue({"dendro.v1.DatasetService", "dendro.v1.JobService",
                         "dendro.v1.ModelService"} <= names, names)

    def test_2_upload_fit_tree_assign(self):
        from scipy.cluster.hierarchy import fcluster, is_valid_linkage
        import json
        s = self.server
        x, y = hierarchical_logits(5000, 4, 5, seed=11)
        ds = upload(s, x, y, chunk=65537)
        self.assertEqual((ds.rows, ds.cols, ds.has_labels), (5000, 20, True))

        job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=ds.id, model_name="bb", l2h=pb.L2hParams())), timeout=10)
        updates = list(s.jobs.WatchJob(pb.WatchJobRequest(id=job.id), timeout=120))
        self.assertEqual(updates[-1].state, pb.JOB_STATE_SUCCEEDED)
        progress = [u.progress for u in updates]
        self.assertEqual(progress, sorted(progress))
        self.assertEqual(updates[-1].model_version, 1)

        tree = s.models.GetTree(pb.GetTreeRequest(
            model=pb.ModelRef(name="bb"), format=pb.TREE_FORMAT_LINKAGE_NPY), timeout=10)
        path = os.path.join(self.dir, "linkage.npy")
        with open(path, "wb") as f:
            f.write(tree.content)
        z = np.load(path)
        self.assertEqual(z.shape, (19, 4))
        self.assertTrue(is_valid_linkage(z, throw=True))

        doc = json.loads(s.models.GetTree(pb.GetTreeRequest(
            model=pb.ModelRef(name="bb", version=1), format=pb.TREE_FORMAT_JSON,
            include_points=True), timeout=10).content)
        self.assertEqual(doc["num_leaves"], 20)
        self.assertEqual(doc["point_leaf"], list(np.argmax(x, axis=1)))

        # Four super-clusters: the cut at level 4 should match the generating
        # super-classes on the leaves (a clean synthetic hierarchy).
        resp = s.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="bb"), rows=x.shape[0], cols=x.shape[1],
            data=x.tobytes(), level=4), timeout=10)
        self.assertEqual(list(resp.leaf), list(np.argmax(x, axis=1)))
        leaf_to_cluster = {}
        for leaf, cluster in zip(resp.leaf, resp.cluster):
            leaf_to_cluster.setdefault(leaf, cluster)
            self.assertEqual(leaf_to_cluster[leaf], cluster)
        self.assertEqual(len(set(resp.cluster)), 4)
        for g in range(4):
            self.assertEqual(len({leaf_to_cluster[c] for c in range(g * 5, g * 5 + 5)}), 1)
        # SciPy agrees with the server's cut.
        scipy_cut = fcluster(z, 4, criterion="maxclust")
        for a in range(20):
            for b in range(20):
                self.assertEqual(scipy_cut[a] == scipy_cut[b],
                                 leaf_to_cluster[a] == leaf_to_cluster[b])

    def test_2c_classifier_predict_stream_and_classes(self):
        s = self.server
        # 3 groups of 4 classes in 12 dimensions; labels 50 + 10 k.
        rng = np.random.default_rng(5)
        groups, per, d = 3, 4, 12
        k = groups * per
        means = np.repeat(rng.normal(0, 3.0, (groups, d)), per, axis=0) + rng.normal(0, 0.8, (k, d))
        labels = 50 + 10 * np.arange(k)

        def sample(n, seed):
            r = np.random.default_rng(seed)
            c = np.repeat(np.arange(k), n)
            return (means[c] + r.normal(0, 0.9, (len(c), d))).astype(np.float32), labels[c]

        x, y = sample(60, 1)
        xt, yt = sample(20, 2)
        ds = upload(s, x, y)
        job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=ds.id, model_name="clf",
            hppca=pb.HppcaTrainParams(superclasses=3, q=4, r=4, seed=2))), timeout=10)
        job = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id), timeout=120)
        self.assertEqual(job.state, pb.JOB_STATE_SUCCEEDED, job.error.message)

        classes = s.models.GetClasses(pb.GetClassesRequest(model=pb.ModelRef(name="clf")),
                                      timeout=10)
        self.assertEqual(list(classes.labels), list(labels))
        self.assertEqual(classes.num_superclasses, 3)
        self.assertEqual(list(classes.train_counts), [60] * k)
        super_of = dict(zip(classes.labels, classes.superclasses))

        def predict(rows, **kw):
            return pb.PredictRequest(model=pb.ModelRef(name="clf"), rows=rows.shape[0],
                                     cols=d, data=rows.tobytes(), **kw)

        flat = s.models.Predict(predict(xt, top_k=3, flat=True), timeout=10)
        self.assertEqual((flat.rows, flat.top_k, flat.top_t), (len(xt), 3, 0))
        top1 = np.array(flat.labels).reshape(-1, 3)[:, 0]
        self.assertGreater((top1 == yt).mean(), 0.8)
        scores = np.array(flat.scores).reshape(-1, 3)
        self.assertTrue((np.diff(scores, axis=1) >= 0).all())  # best (smallest) first
        every = s.models.Predict(predict(xt, top_k=3, top_t=3), timeout=10)
        self.assertEqual(list(every.labels), list(flat.labels))  # T = S is flat
        one = s.models.Predict(predict(xt, top_t=1), timeout=10)
        opened = np.array(one.superclasses)
        self.assertEqual(len(opened), len(xt))
        # A predicted class always lies in an opened super-class.
        for label, sc in zip(one.labels, opened):
            self.assertEqual(super_of[label], sc)
        self.assertLess(np.mean(one.classes_evaluated), k)

        # Streaming: answers come back one per request, in order, equal to
        # the unary answers; a bad request ends the stream with its error.
        sizes = [1, 7, 30, 2, 200]
        starts = np.cumsum([0] + sizes)
        reqs = [predict(xt[a:b], top_k=2, top_t=2) for a, b in zip(starts, starts[1:])]
        answers = list(s.models.PredictStream(iter(reqs), timeout=30))
        self.assertEqual([a.rows for a in answers], sizes)
        unary = s.models.Predict(predict(xt[:starts[-1]], top_k=2, top_t=2), timeout=10)
        self.assertEqual([l for a in answers for l in a.labels], list(unary.labels))
        bad = xt[:3].copy()
        bad[1, 2] = np.inf
        with self.assertRaises(grpc.RpcError) as err:
            list(s.models.PredictStream(iter([reqs[0], predict(bad), reqs[1]]), timeout=30))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

        # Clustering models have no class table and do not predict.
        for call in (lambda: s.models.GetClasses(
                         pb.GetClassesRequest(model=pb.ModelRef(name="bb")), timeout=10),
                     lambda: s.models.Predict(pb.PredictRequest(
                         model=pb.ModelRef(name="bb"), rows=1, cols=20,
                         data=np.zeros(20, np.float32).tobytes()), timeout=10)):
            with self.assertRaises(grpc.RpcError) as err:
                call()
            self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(grpc.RpcError) as err:
            s.models.Predict(pb.PredictRequest(model=pb.ModelRef(name="clf"), rows=2, cols=d - 1,
                                               data=np.zeros(2 * (d - 1), np.float32).tobytes()),
                             timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_3_bad_input_keeps_server_serving(self):
        s = self.server
        x, _ = hierarchical_logits(100, 2, 3, seed=1)
        x[17, 4] = np.nan
        with self.assertRaises(grpc.RpcError) as err:
            upload(s, x)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("row 17, column 4", err.exception.details())

        with self.assertRaises(grpc.RpcError) as err:
            s.models.Assign(pb.AssignRequest(model=pb.ModelRef(name="missing"), rows=1, cols=6,
                                             data=b"\0" * 24), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

        with self.assertRaises(grpc.RpcError) as err:
            s.jobs.GetJob(pb.GetJobRequest(id="job-nope"), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

        resp = s.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)

    def test_4_sigterm_then_restart_keeps_models(self):
        code = self.server.stop()
        self.assertEqual(code, 0)
        BlackBoxTest.server = Server(self.dir)
        model = self.server.models.GetModel(
            pb.GetModelRequest(model=pb.ModelRef(name="bb")), timeout=5)
        self.assertEqual((model.version, model.num_leaves, model.method), (1, 20, "l2h"))


if __name__ == "__main__":
    DENDROD = sys.argv.pop(1)
    unittest.main(verbosity=2)
