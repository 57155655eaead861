#!/usr/bin/python3
"""A rolling upgrade of dendrod replicas over one PostgreSQL catalogue, across
one schema migration, with old and new binaries serving side by side.

The new release's binary is played by dendrod with DENDRO_TEST_EXTRA_MIGRATION
set: it knows one schema step more than the binary under test (here an
additive one: a nullable column older binaries never read), exactly as the
next release with such a step would. The procedure is docs/operations.md's
"Upgrades":
  1. two old replicas serve; a long fit runs on one of them;
  2. a new replica starts: it migrates the schema once, and old and new
     replicas serve the same registry, each taking jobs submitted through
     any of them;
  3. the old replicas are replaced one at a time (drained, restarted as
     new); nothing migrates again, the long fit ends SUCCEEDED with one
     model version, and every model answers through every replica;
  4. an old binary started on the upgraded schema (a rollback) runs, and
     says it runs on a newer compatible schema;
  5. on another database, after a step marked incompatible with older
     binaries, an old binary is refused at start, naming the version it
     needs.

Usage: rolling_upgrade_test.py DENDROD_BINARY
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import pb, hierarchical_logits  # noqa: E402
from pg_lib import Postgres  # noqa: E402
import replicas_test as rt  # noqa: E402

SCHEMA = 3  # kPostgresSchemaVersion of the binary under test
ADDITIVE = f"{SCHEMA};ALTER TABLE jobs ADD COLUMN upgrade_note TEXT"
BREAKING = f"{SCHEMA + 1};ALTER TABLE jobs ADD COLUMN upgrade_note TEXT"


def new_binary_env(step):
    env = dict(os.environ)
    env["DENDRO_TEST_EXTRA_MIGRATION"] = step
    return env


def old_binary_env():
    return {k: v for k, v in os.environ.items() if k != "DENDRO_TEST_EXTRA_MIGRATION"}


class RollingUpgradeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = Postgres()
        why = cls.pg.why_missing()
        if why:
            raise unittest.SkipTest(why)
        cls.work = tempfile.mkdtemp(prefix="dendro_upgrade_")
        cls.replicas = []
        try:
            cls.pg.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for r in cls.replicas:
            try:
                r.stop(signal.SIGKILL)
            except Exception:
                pass
        cls.pg.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def start(self, name, catalog, data, env):
        r = rt.Replica(name, catalog, data, self.work, env=env)
        self.replicas.append(r)
        return r

    def migrations_logged(self, names=("a", "b", "c")):
        """How many times the logs of these replicas say they migrated to SCHEMA + 1."""
        n = 0
        for name in names:
            path = os.path.join(self.work, f"{name}.log")
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    n += fh.read().count(
                        f"migrating the PostgreSQL schema to version {SCHEMA + 1}".encode())
        return n

    def fit(self, replica, ds, name):
        job = replica.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=ds, model_name=name, l2h=pb.L2hParams())), timeout=30)
        done = rt.wait(replica, job.id)
        self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
        return done

    def test_old_and_new_replicas_serve_side_by_side_across_one_migration(self):
        catalog = self.pg.create_database("rolling")
        data = os.path.join(self.work, "shared-data")
        os.makedirs(data)
        # 1. The old release, two replicas; a long fit on one of them.
        a = self.start("a", catalog, data, old_binary_env())
        b = self.start("b", catalog, data, old_binary_env())
        logits = hierarchical_logits(300, 2, 3, seed=3)[0]
        ds = rt.upload(a, logits)
        points_ds = rt.upload(a, rt.blobs(600, 8, 1))
        long_job = a.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=points_ds, model_name="long",
            ghhc=pb.GhhcParams(internal_nodes=50, triples=400000, seed=1))), timeout=30)
        rt.wait_running([a, b], long_job.id)
        self.fit(b, ds, "before")

        # 2. The first new replica migrates; old and new serve together.
        c = self.start("c", catalog, data, new_binary_env(ADDITIVE))
        self.assertEqual(self.migrations_logged(), 1)
        for i, r in enumerate((a, b, c)):
            self.fit(r, ds, f"during-{i}")
        for r in (a, b, c):
            names = {m.name for m in r.models.ListModels(pb.ListModelsRequest(),
                                                         timeout=30).models}
            self.assertLessEqual({"before", "during-0", "during-1", "during-2"}, names, r.name)

        # 3. Replace the old replicas one at a time (a drains; its long fit
        # goes back to the queue and another replica finishes it).
        for old in (a, b):
            old.stop(signal.SIGTERM)
            self.replicas.remove(old)
            new = self.start(old.name, catalog, data, new_binary_env(ADDITIVE))
            self.fit(new, ds, f"after-{old.name}")
        self.assertEqual(self.migrations_logged(), 1, "the schema migrated more than once")
        a2, b2 = self.replicas[-2], self.replicas[-1]
        done = rt.wait(c, long_job.id)
        self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
        print(f"the long fit ended after {done.attempts} start(s)", flush=True)
        versions = c.models.ListModels(pb.ListModelsRequest(name="long"), timeout=30).models
        self.assertEqual([m.version for m in versions], [1])
        for r in (a2, b2, c):
            for name in ("before", "during-0", "during-2", "after-a", "after-b", "long"):
                got = r.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name=name)),
                                        timeout=30)
                self.assertEqual(got.name, name)

        # 4. A rollback: the old binary on the upgraded, compatible schema.
        old_again = self.start("rollback", catalog, data, old_binary_env())
        self.fit(old_again, ds, "rolled-back")
        with open(old_again.log_path, "rb") as f:
            self.assertIn(f"newer than this dendrod's ({SCHEMA}) and compatible".encode(), f.read())

    def test_an_old_binary_is_refused_after_an_incompatible_step(self):
        catalog = self.pg.create_database("breaking")
        data = os.path.join(self.work, "breaking-data")
        os.makedirs(data)
        self.start("n", catalog, data, new_binary_env(BREAKING))
        port_file = os.path.join(self.work, "refused.port")
        done = subprocess.run(
            [bb.DENDROD, "--listen", "127.0.0.1:0", "--port_file", port_file, "--data_dir", data,
             "--catalog", catalog, "--replica_id", "refused"],
            env=old_binary_env(), capture_output=True, text=True, timeout=120)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(f"needs a dendrod of schema version {SCHEMA + 1} or later", done.stderr)
        self.assertFalse(os.path.exists(port_file))


if __name__ == "__main__":
    bb.DENDROD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
