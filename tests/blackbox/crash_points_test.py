#!/usr/bin/python3
"""dendrod killed at every named crash point of its write paths.

For each point (core/common/crash_point.h), a data directory is prepared
with committed objects: dataset A (durable) and model "base" fitted on it,
plus a dataset and a model to delete. A dendrod started with
DENDRO_CRASH_AT=<point> is made to reach the point (an upload, a fit or a
delete) and dies there by SIGKILL. A plain dendrod is then started on the
same directory and must show a consistent state:
  * the committed objects are all there and answer (Assign, GetTree, a fit
    on A);
  * every listed dataset has its files and every listed model loads;
  * nothing half-written is listed, no file is left that nothing lists
    (orphan directories, temporary files);
  * an interrupted job is run again and ends with exactly one model version;
  * what the point says was committed is there, what was not is not.

Usage: crash_points_test.py DENDROD_BINARY
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, rpc, hierarchical_logits  # noqa: E402

import numpy as np  # noqa: E402

GUARD_SECONDS = 120

# point -> (action, what must hold after the restart)
POINTS = {
    "upload.data_received": ("upload", "no_new_dataset"),
    "file.before_rename:X.npy": ("upload", "no_new_dataset"),
    "upload.files_committed": ("upload", "no_new_dataset"),
    "upload.catalogued": ("upload", "new_dataset"),
    "job.started": ("fit", "one_new_version"),
    "file.before_rename:tree.json": ("fit", "one_new_version"),
    "model.files_written": ("fit", "one_new_version"),
    "model.committed": ("fit", "one_new_version"),
    "dataset_delete.row_removed": ("delete_dataset", "dataset_gone"),
    "artifact_remove.in_trash": ("delete_dataset", "dataset_gone"),
    "model_delete.rows_removed": ("delete_model", "model_gone"),
}


class Dendrod:
    """A dendrod process on a free port over `data_dir` (optionally armed)."""

    def __init__(self, data_dir, crash_at=None):
        self.port_file = os.path.join(data_dir, "port")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        env = dict(os.environ)
        env.pop("DENDRO_CRASH_AT", None)
        if crash_at:
            env["DENDRO_CRASH_AT"] = crash_at
        self.log_path = os.path.join(os.path.dirname(data_dir), f"dendrod-{crash_at or 'plain'}.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [bb.DENDROD, "--listen", "127.0.0.1:0", "--data_dir", data_dir,
             "--port_file", self.port_file, "--drain_seconds", "0", "--threads", "1"],
            stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 30
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dendrod did not start (see {self.log_path})")
            time.sleep(0.05)
        with open(self.port_file) as f:
            port = int(f.read().strip())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.datasets = rpc.DatasetServiceStub(self.channel)
        self.jobs = rpc.JobServiceStub(self.channel)
        self.models = rpc.ModelServiceStub(self.channel)

    def stop(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.log.close()

    def killed_by_crash_point(self, point, timeout=GUARD_SECONDS):
        """True once the process died by SIGKILL after naming `point`."""
        self.proc.wait(timeout=timeout)
        self.channel.close()
        self.log.close()
        with open(self.log_path, "rb") as f:
            said = f"crash point {point}".encode() in f.read()
        return self.proc.returncode == -signal.SIGKILL and said


def upload(server, x, transient=False):
    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(
            rows=x.shape[0], cols=x.shape[1], display_name="crash", transient=transient))
        yield pb.UploadDatasetRequest(data=np.ascontiguousarray(x, dtype="<f4").tobytes())
    return server.datasets.UploadDataset(requests(), timeout=60)


def fit(server, dataset_id, name, wait=True):
    job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
        dataset_id=dataset_id, model_name=name, l2h=pb.L2hParams())), timeout=30)
    if wait:
        job = server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": GUARD_SECONDS}),
                                  timeout=GUARD_SECONDS + 10)
    return job


def all_pages(call, request, field):
    out, token = [], ""
    while True:
        request.page_token = token
        resp = call(request, timeout=30)
        out.extend(getattr(resp, field))
        token = resp.next_page_token
        if not token:
            return out


class CrashPointsTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dendro_crash_")
        self.data = os.path.join(self.work, "data")
        os.makedirs(self.data)
        self.x, _ = hierarchical_logits(600, 2, 3, seed=11)
        s = Dendrod(self.data)
        try:
            self.a = upload(s, self.x).id
            self.doomed_dataset = upload(s, self.x).id
            self.assertEqual(fit(s, self.a, "base").state, pb.JOB_STATE_SUCCEEDED)
            self.assertEqual(fit(s, self.a, "doomed").state, pb.JOB_STATE_SUCCEEDED)
        finally:
            s.stop()

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def check_consistent(self, s):
        datasets = all_pages(s.datasets.ListDatasets, pb.ListDatasetsRequest(), "datasets")
        models = all_pages(s.models.ListModels, pb.ListModelsRequest(), "models")
        # Jobs left queued or running by the crash run again and finish.
        for job in all_pages(s.jobs.ListJobs, pb.ListJobsRequest(), "jobs"):
            if job.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING):
                done = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 60}),
                                      timeout=70)
                self.assertIn(done.state, (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED), done)
        models = all_pages(s.models.ListModels, pb.ListModelsRequest(), "models")
        ids = {d.id for d in datasets}
        # Committed objects survive and answer.
        self.assertIn(self.a, ids)
        rows = self.x[:4].astype("<f4")
        for m in models:
            ref = pb.ModelRef(name=m.name, version=m.version)
            s.models.GetTree(pb.GetTreeRequest(model=ref, format=pb.TREE_FORMAT_NEWICK), timeout=30)
            s.models.Assign(pb.AssignRequest(model=ref, rows=4, cols=rows.shape[1],
                                             data=rows.tobytes()), timeout=30)
        self.assertIn("base", {m.name for m in models})
        # Every listed dataset's files, and nothing else, are on disk.
        on_disk = set(os.listdir(os.path.join(self.data, "datasets")))
        self.assertEqual(on_disk, {d.id for d in datasets if not d.transient})
        for d in datasets:
            self.assertTrue(os.path.exists(os.path.join(self.data, "datasets", d.id, "X.npy")))
        model_dirs = {}
        for name in os.listdir(os.path.join(self.data, "models")):
            n = len(os.listdir(os.path.join(self.data, "models", name)))
            if n:
                model_dirs[name] = n
        listed = {}
        for m in models:
            listed[m.name] = listed.get(m.name, 0) + 1
        self.assertEqual(model_dirs, listed)
        leftovers = [os.path.join(root, f) for root, _, files in os.walk(self.data)
                     for f in files if ".tmp." in f]
        self.assertEqual(leftovers, [])
        # Files moved into the trash (a delete, or the start's sweep) are
        # deleted in the background; the start empties what a crash left.
        trash = os.path.join(self.data, "trash")
        deadline = time.time() + 30
        while os.path.isdir(trash) and os.listdir(trash) and time.time() < deadline:
            time.sleep(0.05)
        self.assertFalse(os.path.isdir(trash) and os.listdir(trash),
                         f"left in the trash: {os.listdir(trash) if os.path.isdir(trash) else ''}")
        return ids, models

    def run_point(self, point):
        action, expect = POINTS[point]
        armed = Dendrod(self.data, crash_at=point)
        try:
            if action == "upload":
                upload(armed, self.x)
            elif action == "fit":
                fit(armed, self.a, "after", wait=False)
            elif action == "delete_dataset":
                armed.datasets.DeleteDataset(pb.DeleteDatasetRequest(id=self.doomed_dataset),
                                             timeout=30)
            elif action == "delete_model":
                armed.models.DeleteModel(pb.DeleteModelRequest(name="doomed"), timeout=30)
        except grpc.RpcError:
            pass  # the server died under the call
        self.assertTrue(armed.killed_by_crash_point(point),
                        f"dendrod did not die at {point} (see {armed.log_path})")

        s = Dendrod(self.data)
        try:
            ids, models = self.check_consistent(s)
            versions = [m.version for m in models if m.name == "after"]
            if expect == "no_new_dataset":
                self.assertEqual(ids, {self.a, self.doomed_dataset})
            elif expect == "new_dataset":
                self.assertEqual(len(ids), 3)
            elif expect == "one_new_version":
                self.assertEqual(versions, [1])
            elif expect == "dataset_gone":
                self.assertEqual(ids, {self.a})
            elif expect == "model_gone":
                self.assertNotIn("doomed", {m.name for m in models})
            # A fit on the committed dataset still works.
            self.assertEqual(fit(s, self.a, "check").state, pb.JOB_STATE_SUCCEEDED)
        finally:
            s.stop()


def make_test(point):
    def test(self):
        self.run_point(point)
    return test


for _point in POINTS:
    setattr(CrashPointsTest, "test_" + _point.replace(".", "_").replace(":", "_"),
            make_test(_point))


if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    unittest.main(verbosity=2)
