#!/usr/bin/python3
"""Checksums of stored files, end to end.

A real dendrod stores two datasets and a model; it is stopped and bytes are
damaged on disk behind its back. Then:
  * `dendrod --verify` names exactly the damaged dataset and model and exits
    1 (0 on an intact directory, 2 when the catalogue cannot be opened);
  * a restarted dendrod refuses to serve them (DATA_LOSS naming the object,
    no server path in the message) while the intact dataset still fits.

Usage: verify_test.py DENDROD_BINARY
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, hierarchical_logits  # noqa: E402
from crash_points_test import Dendrod, upload, fit  # noqa: E402


def flip_byte(path, offset_from_end=1):
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        b = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))


class VerifyTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dendro_verify_")
        self.data = os.path.join(self.work, "data")
        os.makedirs(self.data)
        self.x, _ = hierarchical_logits(400, 2, 3, seed=5)
        s = Dendrod(self.data)
        try:
            self.damaged = upload(s, self.x).id
            self.intact = upload(s, self.x).id
            job = fit(s, self.damaged, "m")
            self.assertEqual(job.state, pb.JOB_STATE_SUCCEEDED, job)
            model = s.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="m")), timeout=30)
            # Recorded at commit, one per file, and given to clients.
            self.assertTrue(model.checksums, model)
            for name, digest in model.checksums.items():
                self.assertRegex(digest, r"^[0-9a-f]{16}$", name)
            d = s.datasets.GetDataset(pb.GetDatasetRequest(id=self.damaged), timeout=30)
            self.assertEqual(set(d.checksums), {"X.npy"})
        finally:
            s.stop()
        model_root = os.path.join(self.data, "models", "m")
        (version_dir,) = os.listdir(model_root)
        self.model_dir = os.path.join(model_root, version_dir)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def verify(self, *extra):
        r = subprocess.run([bb.DENDROD, "--verify", "--data_dir", self.data, *extra],
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout

    def test_an_intact_directory_verifies(self):
        rc, out = self.verify()
        self.assertEqual(rc, 0, out)
        self.assertIn("checked 2 dataset(s) and 1 model version(s): 0 damaged", out)
        self.assertNotIn("DAMAGED", out)

    def test_damage_is_named_by_verify_and_refused_by_the_server(self):
        flip_byte(os.path.join(self.data, "datasets", self.damaged, "X.npy"))
        files = sorted(os.listdir(self.model_dir),
                       key=lambda f: os.path.getsize(os.path.join(self.model_dir, f)))
        flip_byte(os.path.join(self.model_dir, files[-1]), offset_from_end=3)

        rc, out = self.verify()
        self.assertEqual(rc, 1, out)
        damaged = [line for line in out.splitlines() if line.startswith("DAMAGED ")]
        self.assertEqual(len(damaged), 2, out)
        self.assertTrue(any(f"dataset {self.damaged}" in line and "X.npy" in line
                            for line in damaged), out)
        self.assertTrue(any("model 'm' version 1" in line and files[-1] in line
                            for line in damaged), out)
        self.assertNotIn(self.intact, out)
        self.assertIn(": 2 damaged", out)

        s = Dendrod(self.data)
        try:
            rows = self.x[:3].astype("<f4")
            with self.assertRaises(grpc.RpcError) as err:
                s.models.Assign(pb.AssignRequest(model=pb.ModelRef(name="m"), rows=3,
                                                 cols=rows.shape[1], data=rows.tobytes()),
                                timeout=30)
            self.assertEqual(err.exception.code(), grpc.StatusCode.DATA_LOSS)
            self.assertIn("model 'm' version 1 is damaged", err.exception.details())
            self.assertNotIn(self.work, err.exception.details())

            job = fit(s, self.damaged, "again")
            self.assertEqual(job.state, pb.JOB_STATE_FAILED, job)
            self.assertIn(f"dataset {self.damaged} is damaged", job.error.message)
            self.assertNotIn(self.work, job.error.message)
            self.assertEqual(fit(s, self.intact, "fine").state, pb.JOB_STATE_SUCCEEDED)
        finally:
            s.stop()

    def test_a_missing_model_file_is_damage_too(self):
        files = os.listdir(self.model_dir)
        os.remove(os.path.join(self.model_dir, files[0]))
        rc, out = self.verify()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"{files[0]} is missing", out)

    def test_a_directory_without_a_catalogue_is_exit_2_and_stays_empty(self):
        empty = os.path.join(self.work, "not-a-data-dir")
        os.mkdir(empty)
        r = subprocess.run([bb.DENDROD, "--verify", "--data_dir", empty], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("no catalogue in", r.stdout)
        self.assertEqual(os.listdir(empty), [])

    def test_a_catalogue_that_cannot_be_opened_is_exit_2(self):
        rc, out = self.verify("--catalog", "mysql://nowhere/db")
        self.assertEqual(rc, 2, out)
        self.assertIn("dendrod --verify:", out)


if __name__ == "__main__":
    bb.DENDROD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
