#!/usr/bin/python3
"""docs/operations.md, "Backup and restore", performed as written.

The section's shell blocks are read from the document (each follows a
`<!-- backup_restore_test: NAME -->` marker) and run with bash, with DATA,
BACKUP and CATALOG set and a `dendrod` on PATH, so the document cannot drift
from what is tested. For each catalogue, SQLite and PostgreSQL:
  1. a running dendrod holds a dataset and model "m" (L2H) labelled
     "stable"; its datasets, models, tree and Assign output are recorded;
  2. a backup is taken while it runs: step 1 (catalogue), an upload that
     lands between the steps, step 2 (files), step 3 (check) passes;
  3. a second backup, with the late dataset deleted between steps 1 and 2,
     fails step 3 naming it; so does a copy of the good backup missing one
     model file;
  4. dendrod stops; the restore refuses the data directory while it is not
     empty; then the data directory is deleted (and the database dropped);
  5. the restore blocks run, their `dendrod --verify` passes, and a dendrod
     started on the restored state lists the same datasets and models and
     answers the same tree and Assign output; with SQLite the late upload's
     unlisted files are swept at start; a new fit of "m" is version 2.
The PostgreSQL half skips, saying why, only when the PostgreSQL 15 programs
are missing.

Usage: backup_restore_test.py DENDROD_BINARY
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, hierarchical_logits  # noqa: E402
import pg_lib  # noqa: E402

import numpy as np  # noqa: E402

DOC = os.path.join(bb.ROOT, "docs", "operations.md")
SECTION = "## Backup and restore"
GUARD = 120
# Blocks the test runs; "variables" is shown to operators and set here instead.
BLOCKS = {"variables", "sqlite.catalogue", "postgres.catalogue", "files", "sqlite.check",
          "postgres.check", "restore.files", "sqlite.restore", "postgres.restore"}


def doc_blocks():
    """{name: shell text} of the marked `sh` blocks of the section."""
    with open(DOC) as f:
        text = f.read()
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    fences = re.findall(r"^```sh\n", section, re.M)
    found = re.findall(r"^<!-- backup_restore_test: (\S+) -->\n```sh\n(.*?)^```\n",
                       section, re.M | re.S)
    if len(found) != len(fences):
        raise AssertionError(f"{DOC}: {len(fences)} sh blocks in '{SECTION}' but "
                             f"{len(found)} carry a backup_restore_test marker")
    blocks = {}
    for name, body in found:
        if name in blocks:
            raise AssertionError(f"{DOC}: two blocks are marked {name}")
        blocks[name] = body
    if set(blocks) != BLOCKS:
        raise AssertionError(f"{DOC}: marked blocks {sorted(blocks)}, expected {sorted(BLOCKS)}")
    return blocks


def Dendrod(data, work, catalog=None):
    """dendrod on the data directory; its port file and log stay outside it (in
    `work`), so a copy of the data directory holds only what dendrod keeps."""
    extra = ["--catalog", catalog, "--replica_id", "backup-test"] if catalog else []
    return bb.Server(data, ("--drain_seconds", "0", "--threads", "1", *extra), state_dir=work,
                     start_seconds=GUARD)


def upload(server, x):
    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(
            rows=x.shape[0], cols=x.shape[1], display_name="backup"))
        yield pb.UploadDatasetRequest(data=np.ascontiguousarray(x, dtype="<f4").tobytes())
    return server.datasets.UploadDataset(requests(), timeout=GUARD).id


def fit(server, dataset_id, name):
    job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
        dataset_id=dataset_id, model_name=name, l2h=pb.L2hParams())), timeout=30)
    return server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": GUARD}),
                               timeout=GUARD + 10)


class BackupRestore:
    """The procedure for one catalogue; subclasses say which."""
    kind = None  # "sqlite" or "postgres"

    @classmethod
    def setUpClass(cls):
        cls.blocks = doc_blocks()
        for var in ("DATA", "BACKUP", "CATALOG"):
            if not re.search(rf"^{var}=", cls.blocks["variables"], re.M):
                raise AssertionError(f"the variables block no longer sets {var}")

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix=f"dendro_backup_{self.kind}_")
        self.data = os.path.join(self.work, "data")
        bin_dir = os.path.join(self.work, "bin")
        os.makedirs(bin_dir)
        os.symlink(bb.DENDROD, os.path.join(bin_dir, "dendrod"))
        # Debian's programs only (python3 is /usr/bin/python3), PostgreSQL's own first.
        self.path = os.pathsep.join([bin_dir, pg_lib.BIN, "/usr/bin", "/bin"])
        self.catalog = ""
        self.server = None

    def tearDown(self):
        if self.server is not None and self.server.proc.poll() is None:
            self.server.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def run_block(self, name, backup):
        """The document's block `name`, with bash -e (stricter here: -u, pipefail)."""
        env = dict(os.environ, PATH=self.path, DATA=self.data, BACKUP=backup,
                   CATALOG=self.catalog)
        for var in ("PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGSERVICE"):
            env.pop(var, None)
        return subprocess.run(["bash", "-e", "-u", "-o", "pipefail", "-c", self.blocks[name]],
                              env=env, cwd=self.work, capture_output=True, text=True,
                              timeout=GUARD)

    def run_ok(self, name, backup):
        r = self.run_block(name, backup)
        self.assertEqual(r.returncode, 0,
                         f"block {name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def start(self):
        self.server = Dendrod(self.data, self.work, self.catalog or None)
        return self.server

    def stop(self):
        self.assertEqual(self.server.stop(), 0)
        self.server = None

    # Per catalogue: the blocks and how the original is lost.
    def catalogue_block(self):
        return f"{self.kind}.catalogue"

    def check_block(self):
        return f"{self.kind}.check"

    def restore_blocks(self):
        return ["restore.files", f"{self.kind}.restore"]

    def lose_catalogue(self):
        pass

    def state(self, s):
        """What a client sees of the registry: lists, tree, Assign output."""
        datasets = s.datasets.ListDatasets(pb.ListDatasetsRequest(page_size=100), timeout=30)
        models = s.models.ListModels(pb.ListModelsRequest(page_size=100), timeout=30)
        tree = s.models.GetTree(pb.GetTreeRequest(model=pb.ModelRef(name="m", label="stable"),
                                                  format=pb.TREE_FORMAT_JSON), timeout=30)
        rows = self.x[:25]
        assign = s.models.Assign(pb.AssignRequest(
            model=pb.ModelRef(name="m", label="stable"), rows=rows.shape[0], cols=rows.shape[1],
            data=np.ascontiguousarray(rows, dtype="<f4").tobytes(), level=2), timeout=30)
        return {"datasets": list(datasets.datasets), "models": list(models.models),
                "tree": tree.content, "assign": (list(assign.leaf), list(assign.cluster),
                                                 assign.model_version)}

    def verify_passes(self, out, datasets, models):
        self.assertIn(f"checked {datasets} dataset(s) and {models} model version(s): 0 damaged",
                      out)
        self.assertNotIn("DAMAGED", out)

    def test_backup_lose_restore(self):
        self.x, _ = hierarchical_logits(300, 2, 3, seed=7)
        s = self.start()
        ds = upload(s, self.x)
        job = fit(s, ds, "m")
        self.assertEqual(job.state, pb.JOB_STATE_SUCCEEDED, job)
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="m", label="stable", version=1),
                               timeout=30)
        before = self.state(s)
        self.assertEqual(len(before["datasets"]), 1)
        self.assertEqual([(m.name, m.version, list(m.labels)) for m in before["models"]],
                         [("m", 1, ["stable"])])

        # The backup, with an upload landing between the catalogue and the files.
        good = os.path.join(self.work, "backups", "good")
        os.makedirs(os.path.dirname(good))
        self.run_ok(self.catalogue_block(), good)
        late = upload(s, self.x[:50])
        self.run_ok("files", good)
        self.assertTrue(os.path.isdir(os.path.join(good, "data", "datasets", late)))
        r = self.run_ok(self.check_block(), good)
        self.verify_passes(r.stdout, 1, 1)  # the late upload is not listed, so not checked
        # Only the catalogue and the objects: no lock, log, reserve or trash.
        self.assertEqual(sorted(os.listdir(os.path.join(good, "data"))),
                         ["datasets", "metadata.db", "models"] if self.kind == "sqlite"
                         else ["datasets", "models"])
        print(f"[{self.kind}] backup check: {r.stdout.strip()}", flush=True)

        # A dataset deleted between the steps: the check names it.
        raced = os.path.join(self.work, "backups", "raced")
        self.run_ok(self.catalogue_block(), raced)
        s.datasets.DeleteDataset(pb.DeleteDatasetRequest(id=late), timeout=30)
        self.run_ok("files", raced)
        r = self.run_block(self.check_block(), raced)
        self.assertEqual(r.returncode, 1, f"{r.stdout}\n{r.stderr}")
        self.assertRegex(r.stdout, rf"DAMAGED dataset {late}: its files are missing")
        self.assertIn("1 damaged", r.stdout)

        # A backup missing one model file: the check names the file.
        holed = os.path.join(self.work, "backups", "holed")
        shutil.copytree(good, holed, symlinks=True)
        model_root = os.path.join(holed, "data", "models", "m")
        (version_dir,) = os.listdir(model_root)
        version_dir = os.path.join(model_root, version_dir)
        lost = sorted(f for f in os.listdir(version_dir)
                      if os.path.isfile(os.path.join(version_dir, f)))[0]
        os.remove(os.path.join(version_dir, lost))
        r = self.run_block(self.check_block(), holed)
        self.assertEqual(r.returncode, 1, f"{r.stdout}\n{r.stderr}")
        self.assertIn(f"DAMAGED model 'm' version 1 is damaged: its file {lost} is missing",
                      r.stdout)
        self.stop()

        # The restore refuses a data directory that still holds the registry.
        r = self.run_block("restore.files", good)
        self.assertEqual(r.returncode, 1, f"{r.stdout}\n{r.stderr}")
        self.assertIn("exists: empty the data directory first", r.stderr)

        # Everything lost, then restored as the document says.
        shutil.rmtree(self.data)
        self.lose_catalogue()
        for name in self.restore_blocks():
            r = self.run_ok(name, good)
        self.verify_passes(r.stdout, 1, 1)
        print(f"[{self.kind}] restored: {r.stdout.strip()}", flush=True)

        s = self.start()
        self.assertEqual(self.state(s), before)
        if self.kind == "sqlite":  # shared volumes keep unlisted files for an hour
            self.assertFalse(os.path.exists(os.path.join(self.data, "datasets", late)),
                             "the late upload's unlisted files were not swept at start")
        with self.assertRaises(grpc.RpcError) as err:
            s.datasets.GetDataset(pb.GetDatasetRequest(id=late), timeout=30)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        job = fit(s, ds, "m")
        self.assertEqual(job.state, pb.JOB_STATE_SUCCEEDED, job)
        self.assertEqual(job.model_version, 2)
        self.stop()


class SqliteBackupRestoreTest(BackupRestore, unittest.TestCase):
    kind = "sqlite"


class PostgresBackupRestoreTest(BackupRestore, unittest.TestCase):
    kind = "postgres"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg = pg_lib.Postgres()
        why = cls.pg.why_missing()
        for b in ("pg_dump", "pg_restore"):
            if not why and not os.path.exists(os.path.join(pg_lib.BIN, b)):
                why = f"{pg_lib.BIN}/{b} is missing (install postgresql-15)"
        if why:
            print(f"skipping the PostgreSQL half: {why}", flush=True)
            raise unittest.SkipTest(why)
        try:
            cls.pg.start()
        except BaseException:
            cls.pg.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.pg.stop()

    def setUp(self):
        super().setUp()
        self.catalog = self.pg.create_database("dendro")
        self.addCleanup(self.drop_database, "dendro")

    def psql(self, sql):
        subprocess.run([os.path.join(pg_lib.BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                        "-h", "127.0.0.1", "-p", str(self.pg.port), "-U", "dendro",
                        "-d", "postgres", "-c", sql], check=True, timeout=GUARD)

    def drop_database(self, name):
        self.psql(f"DROP DATABASE IF EXISTS {name}")

    def lose_catalogue(self):
        self.drop_database("dendro")


if __name__ == "__main__":
    bb.DENDROD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
