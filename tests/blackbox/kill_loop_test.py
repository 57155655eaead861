#!/usr/bin/python3
"""Random kill -9 of a busy dendrod, restarted again and again.

Each cycle starts dendrod on the same data directory, runs clients that
upload, fit and delete concurrently, kills the process with SIGKILL after a
random delay, and restarts it. After every restart the state must be
consistent (the same checks as crash_points_test.py) and every object whose
creation the server acknowledged, and whose deletion it did not, must still
be there and answer:
  * an upload that returned a dataset id;
  * a model version reported by a job that was seen SUCCEEDED;
and nothing the server acknowledged deleting may come back.

Usage: kill_loop_test.py DENDROD_BINARY [CYCLES]   (default 15; the report in
docs/reliability.md used 100)
"""
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, hierarchical_logits  # noqa: E402
from crash_points_test import Dendrod, all_pages, upload  # noqa: E402

CYCLES = 15


class Ledger:
    """What the server acknowledged, across restarts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.datasets = set()          # acknowledged uploads
        self.deleted_datasets = set()  # acknowledged deletes
        self.deleting = set()          # deletes sent, not (yet) acknowledged: either outcome
        self.models = set()            # (name, version) seen SUCCEEDED (names m0..m3)


def client_loop(server, x, ledger, stop, rng):
    while not stop.is_set():
        try:
            op = rng.random()
            if op < 0.4:
                d = upload(server, x)
                with ledger.lock:
                    ledger.datasets.add(d.id)
            elif op < 0.8:
                with ledger.lock:
                    live = sorted(ledger.datasets - ledger.deleted_datasets - ledger.deleting)
                if not live:
                    continue
                name = f"m{rng.randrange(4)}"
                job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
                    dataset_id=rng.choice(live), model_name=name, l2h=pb.L2hParams())),
                    timeout=10)
                done = server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 10}),
                                           timeout=20)
                if done.state == pb.JOB_STATE_SUCCEEDED:
                    with ledger.lock:
                        ledger.models.add((done.model_name, done.model_version))
            elif op < 0.9:
                with ledger.lock:
                    live = sorted(ledger.datasets - ledger.deleted_datasets - ledger.deleting)
                if len(live) > 2:
                    victim = rng.choice(live)
                    with ledger.lock:
                        ledger.deleting.add(victim)
                    try:
                        server.datasets.DeleteDataset(pb.DeleteDatasetRequest(id=victim),
                                                      timeout=10)
                    except grpc.RpcError as e:
                        if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                            grpc.StatusCode.DEADLINE_EXCEEDED,
                                            grpc.StatusCode.UNKNOWN):
                            with ledger.lock:  # a definite refusal: it was not deleted
                                ledger.deleting.discard(victim)
                        raise
                    with ledger.lock:
                        ledger.deleted_datasets.add(victim)
            else:
                # Fit and delete a model only this thread uses, so no other
                # thread's acknowledged version can be deleted under it.
                with ledger.lock:
                    live = sorted(ledger.datasets - ledger.deleted_datasets - ledger.deleting)
                if not live:
                    continue
                name = f"scratch-{threading.get_ident()}"
                job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
                    dataset_id=rng.choice(live), model_name=name, l2h=pb.L2hParams())),
                    timeout=10)
                server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 10}),
                                    timeout=20)
                server.models.DeleteModel(pb.DeleteModelRequest(name=name), timeout=10)
        except grpc.RpcError:
            if stop.is_set():
                return
            time.sleep(0.01)  # refused (e.g. in use) or the server is going down


class KillLoopTest(unittest.TestCase):
    def test_random_kill9_cycles(self):
        work = tempfile.mkdtemp(prefix="dendro_killloop_")
        data = os.path.join(work, "data")
        os.makedirs(data)
        rng = random.Random(1234)
        x, _ = hierarchical_logits(400, 2, 3, seed=5)
        ledger = Ledger()
        try:
            for cycle in range(CYCLES):
                s = Dendrod(data)
                self.check(s, data, ledger, cycle)
                stop = threading.Event()
                threads = [threading.Thread(target=client_loop,
                                            args=(s, x, ledger, stop, random.Random(rng.random())))
                           for _ in range(3)]
                for t in threads:
                    t.start()
                time.sleep(rng.uniform(0.2, 1.0))
                s.proc.send_signal(signal.SIGKILL)
                s.proc.wait(timeout=30)
                stop.set()
                for t in threads:
                    t.join(timeout=60)
                s.channel.close()
                s.log.close()
            s = Dendrod(data)
            self.check(s, data, ledger, CYCLES)
            s.stop()
            print(f"{CYCLES} kill -9 cycles: {len(ledger.datasets)} uploads and "
                  f"{len(ledger.models)} model versions acknowledged, all present")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def check(self, s, data, ledger, cycle):
        # Jobs the kill interrupted run again after the restart; their model
        # files exist before their catalogue rows, so let them finish first.
        for job in all_pages(s.jobs.ListJobs, pb.ListJobsRequest(), "jobs"):
            if job.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING):
                done = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 60}),
                                      timeout=70)
                self.assertNotIn(done.state, (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING),
                                 f"cycle {cycle}: job {job.id} did not finish after the restart")
                if done.state == pb.JOB_STATE_SUCCEEDED and done.model_name.startswith("m"):
                    with ledger.lock:
                        ledger.models.add((done.model_name, done.model_version))
        datasets = {d.id for d in all_pages(s.datasets.ListDatasets, pb.ListDatasetsRequest(),
                                            "datasets")}
        with ledger.lock:
            expected = ledger.datasets - ledger.deleted_datasets - ledger.deleting
            self.assertEqual(expected - datasets, set(), f"cycle {cycle}: acknowledged uploads lost")
            self.assertFalse(datasets & ledger.deleted_datasets,
                             f"cycle {cycle}: deleted datasets came back")
            models = {(m.name, m.version) for m in all_pages(
                s.models.ListModels, pb.ListModelsRequest(), "models")}
            self.assertEqual(ledger.models - models, set(), f"cycle {cycle}: committed models lost")
        datasets_root = os.path.join(data, "datasets")
        on_disk = set(os.listdir(datasets_root)) if os.path.isdir(datasets_root) else set()
        self.assertEqual(on_disk, datasets, f"cycle {cycle}: dataset files vs catalogue")
        model_dirs = 0
        models_root = os.path.join(data, "models")
        if os.path.isdir(models_root):
            for name in os.listdir(models_root):
                model_dirs += len(os.listdir(os.path.join(models_root, name)))
        self.assertEqual(model_dirs, len(models), f"cycle {cycle}: model dirs vs catalogue")
        leftovers = [f for _, _, files in os.walk(data) for f in files if ".tmp." in f]
        self.assertEqual(leftovers, [], f"cycle {cycle}: temporary files left")
        for name, version in sorted(models)[:5]:
            s.models.GetTree(pb.GetTreeRequest(model=pb.ModelRef(name=name, version=version),
                                               format=pb.TREE_FORMAT_NEWICK), timeout=30)


if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    if len(sys.argv) > 1 and sys.argv[1].isdigit():
        CYCLES = int(sys.argv.pop(1))
    unittest.main(verbosity=2)
