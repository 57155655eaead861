#!/usr/bin/python3
"""API keys, roles, ownership, key reload and mutual TLS on the real dendrod.

Every RPC of the dendro.v1 services (enumerated from the proto's
descriptors, so a new RPC is covered without editing this file) is called
with no key, an unknown key, and each role's key; the expected code comes
from the server's own rule table (`dendrod --auth_rules`). Calls are made
as raw byte streams with empty request messages, so the same code calls
unary and streaming methods alike; an authorised call then fails (or
succeeds) on its empty arguments, never with UNAUTHENTICATED or
PERMISSION_DENIED.

Usage: auth_test.py DENDROD_BINARY
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, rpc, Server, hierarchical_logits, upload  # noqa: E402

import hashlib  # noqa: E402

KEYS = {"reader": "reader-key-0123456789", "writer": "writer-key-0123456789",
        "writer2": "second-writer-key-0123", "importer": "importer-key-012345678",
        "admin": "admin-key-0123456789abc"}
ROLES = {"reader": "reader", "writer": "writer", "writer2": "writer", "importer": "importer",
         "admin": "admin"}
RANK = {"reader": 1, "writer": 2, "importer": 3, "admin": 4}
GUARD_SECONDS = 60


def keys_file(path, names):
    with open(path, "w") as f:
        f.write("# test keys\n\n")
        for name in names:
            digest = hashlib.sha256(KEYS[name].encode()).hexdigest()
            f.write(f"{digest}  {name}  {ROLES[name]}\n")


def md(name):
    return (("authorization", f"Bearer {KEYS[name]}"),)


def rules():
    out = subprocess.run([bb.DENDROD, "--auth_rules"], check=True, capture_output=True,
                         text=True).stdout
    return dict(line.split() for line in out.splitlines())


def proto_methods():
    out = []
    for service in pb.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            out.append(f"/{service.full_name}/{m.name}")
    return out


def upload_as(server, name, seed):
    """Uploads 600 x 6 logits with `name`'s key; returns the dataset."""
    x, _ = hierarchical_logits(600, 2, 3, seed=seed)

    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(rows=600, cols=6))
        yield pb.UploadDatasetRequest(data=x.astype("<f4").tobytes())
    return server.datasets.UploadDataset(requests(), metadata=md(name), timeout=30)


def raw_call(channel, method, metadata):
    """Calls `method` with one empty message; returns the status code."""
    call = channel.stream_stream(method, request_serializer=None,
                                 response_deserializer=None)
    try:
        for _ in call(iter([b""]), metadata=metadata, timeout=10):
            break
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dendro_auth_")
        cls.keys = os.path.join(cls.dir, "keys")
        keys_file(cls.keys, ["reader", "writer", "writer2", "importer", "admin"])
        cls.server = Server(cls.dir, ("--auth_keys", cls.keys, "--drain_seconds", "0"))

    @classmethod
    def tearDownClass(cls):
        if cls.server.proc.poll() is None:
            cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_1_every_rpc_and_role(self):
        table = rules()
        methods = proto_methods()
        self.assertEqual(sorted(table), sorted(methods), "rule table vs proto")
        ch = self.server.channel
        for method in methods:
            need = RANK[table[method]]
            with self.subTest(method=method):
                self.assertEqual(raw_call(ch, method, ()), grpc.StatusCode.UNAUTHENTICATED)
                self.assertEqual(raw_call(ch, method, (("authorization", "Bearer nope"),)),
                                 grpc.StatusCode.UNAUTHENTICATED)
                self.assertEqual(raw_call(ch, method, (("authorization", KEYS["admin"]),)),
                                 grpc.StatusCode.UNAUTHENTICATED)  # no "Bearer "
                for name in ("reader", "writer", "importer", "admin"):
                    code = raw_call(ch, method, md(name))
                    if RANK[ROLES[name]] >= need:
                        self.assertNotIn(code, (grpc.StatusCode.UNAUTHENTICATED,
                                                grpc.StatusCode.PERMISSION_DENIED), name)
                    else:
                        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED, name)

    def test_2_messages_name_the_role_never_the_key(self):
        s = self.server
        with self.assertRaises(grpc.RpcError) as err:
            s.models.DeleteModel(pb.DeleteModelRequest(name="x"), metadata=md("writer"),
                                 timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("admin", err.exception.details())
        self.assertNotIn(KEYS["writer"], err.exception.details())
        with self.assertRaises(grpc.RpcError) as err:
            s.models.ListModels(pb.ListModelsRequest(), metadata=(
                ("authorization", "Bearer " + KEYS["admin"] + "x"),), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertNotIn(KEYS["admin"], err.exception.details())
        # Probes stay open.
        from health.v1 import health_pb2, health_pb2_grpc
        resp = health_pb2_grpc.HealthStub(s.channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5)
        self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)

    def test_3_ownership_and_cancel(self):
        s = self.server
        ds = upload_as(s, "writer", seed=3)
        self.assertEqual(ds.owner, "writer")
        long = pb.JobSpec(dataset_id=ds.id, model_name="long",
                          ghhc=pb.GhhcParams(internal_nodes=20, triples=10**9, seed=1))
        job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=long), metadata=md("writer"), timeout=10)
        self.assertEqual(job.owner, "writer")
        with self.assertRaises(grpc.RpcError) as err:
            s.jobs.CancelJob(pb.CancelJobRequest(id=job.id), metadata=md("writer2"), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("admin", err.exception.details())
        s.jobs.CancelJob(pb.CancelJobRequest(id=job.id), metadata=md("writer"), timeout=5)
        # An admin cancels anyone's job; the model a job creates is owned by its submitter.
        quick = pb.JobSpec(dataset_id=ds.id, model_name="owned", l2h=pb.L2hParams())
        done = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=quick), metadata=md("writer2"),
                                timeout=10)
        done = s.jobs.WaitJob(pb.WaitJobRequest(id=done.id, timeout={"seconds": GUARD_SECONDS}),
                              metadata=md("reader"), timeout=GUARD_SECONDS + 5)
        self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED, done)
        model = s.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="owned")),
                                  metadata=md("reader"), timeout=5)
        self.assertEqual(model.owner, "writer2")
        other = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=long), metadata=md("writer2"),
                                 timeout=10)
        s.jobs.CancelJob(pb.CancelJobRequest(id=other.id), metadata=md("admin"), timeout=5)
        end = s.jobs.WaitJob(pb.WaitJobRequest(id=other.id, timeout={"seconds": GUARD_SECONDS}),
                             metadata=md("admin"), timeout=GUARD_SECONDS + 5)
        self.assertEqual(end.state, pb.JOB_STATE_CANCELLED)
        # The audit trail names who deleted what.
        s.models.DeleteModel(pb.DeleteModelRequest(name="owned"), metadata=md("admin"),
                             timeout=5)
        with open(os.path.join(self.dir, "dendrod.log"), errors="replace") as f:
            log = f.read()
        self.assertIn("audit: 'admin' deleted model owned", log)
        self.assertIn("audit: 'writer2' was refused cancelling job", log)
        self.assertNotIn(KEYS["writer"], log)

    def test_3b_labels_under_retention_need_the_deleting_role(self):
        """A writer cannot undo the protection an admin's retention leaves to labels."""
        s = self.server
        ds = upload_as(s, "writer", seed=5)

        def fit(name):
            spec = pb.JobSpec(dataset_id=ds.id, model_name=name, l2h=pb.L2hParams())
            job = s.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=md("writer"),
                                   timeout=10)
            job = s.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": GUARD_SECONDS}),
                                 metadata=md("writer"), timeout=GUARD_SECONDS + 5)
            self.assertEqual(job.state, pb.JOB_STATE_SUCCEEDED, job)
            return job.model_version

        def versions(name):
            listed = s.models.ListModels(pb.ListModelsRequest(name=name), metadata=md("reader"),
                                         timeout=5)
            return sorted(m.version for m in listed.models)

        v1 = fit("kept")
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="kept", label="stable", version=v1),
                               metadata=md("admin"), timeout=5)
        s.models.SetModelRetention(pb.SetModelRetentionRequest(name="kept", keep_versions=1),
                                   metadata=md("admin"), timeout=5)
        fit("kept")  # v2, so that "latest" is another version than v1
        # The writer may neither remove nor move the label that keeps v1.
        for call, request in (
                (s.models.DeleteModelLabel, pb.DeleteModelLabelRequest(name="kept", label="stable")),
                (s.models.SetModelLabel, pb.SetModelLabelRequest(name="kept", label="stable"))):
            with self.assertRaises(grpc.RpcError) as err:
                call(request, metadata=md("writer"), timeout=5)
            self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn("admin", err.exception.details())
            self.assertIn("retention", err.exception.details())
        # So fitting on does not delete v1; the unlabelled versions obey the policy.
        v3 = fit("kept")
        self.assertEqual(versions("kept"), [v1, v3])
        # Adding a label, or relabelling the version a label already names,
        # protects at least as much: a writer's call.
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="kept", label="canary", version=v3),
                               metadata=md("writer"), timeout=5)
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="kept", label="stable", version=v1),
                               metadata=md("writer"), timeout=5)
        # Without a policy, labels are the writers' own again.
        s.models.SetModelRetention(pb.SetModelRetentionRequest(name="kept", keep_versions=0),
                                   metadata=md("admin"), timeout=5)
        s.models.DeleteModelLabel(pb.DeleteModelLabelRequest(name="kept", label="canary"),
                                  metadata=md("writer"), timeout=5)
        # The admin may move it under a policy.
        s.models.SetModelRetention(pb.SetModelRetentionRequest(name="kept", keep_versions=1),
                                   metadata=md("admin"), timeout=5)
        s.models.SetModelLabel(pb.SetModelLabelRequest(name="kept", label="stable", version=v3),
                               metadata=md("admin"), timeout=5)
        fit("kept")
        self.assertNotIn(v1, versions("kept"))
        with open(os.path.join(self.dir, "dendrod.log"), errors="replace") as f:
            self.assertIn("audit: 'writer' was refused moving label kept@stable", f.read())

    def test_4_sighup_reloads_keys(self):
        s = self.server
        s.models.ListModels(pb.ListModelsRequest(), metadata=md("reader"), timeout=5)
        keys_file(self.keys, ["writer", "writer2", "admin"])  # the reader key is revoked
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + GUARD_SECONDS
        code = None
        while time.time() < deadline:
            try:
                s.models.ListModels(pb.ListModelsRequest(), metadata=md("reader"), timeout=5)
            except grpc.RpcError as e:
                code = e.code()
                break
            time.sleep(0.1)
        self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED)
        # A broken file keeps the keys in force.
        with open(self.keys, "a") as f:
            f.write("not a valid line\n")
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        s.models.ListModels(pb.ListModelsRequest(), metadata=md("admin"), timeout=5)
        self.assertIsNone(s.proc.poll())
        keys_file(self.keys, ["reader", "writer", "writer2", "admin"])
        s.proc.send_signal(signal.SIGHUP)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ReflectionAuthTest(unittest.TestCase):
    """--auth_reflection: reflection needs a known caller; health stays open."""

    def list_services(self, channel, metadata, seen=None):
        """Service names listed; `seen` collects them even if the call fails."""
        seen = [] if seen is None else seen
        stub = bb.reflection_pb2_grpc.ServerReflectionStub(channel)
        for answer in stub.ServerReflectionInfo(
                iter([bb.reflection_pb2.ServerReflectionRequest(list_services=""),
                      bb.reflection_pb2.ServerReflectionRequest(
                          file_containing_symbol="dendro.v1.ModelService")]),
                metadata=metadata, timeout=10):
            seen.extend(s.name for s in answer.list_services_response.service)
            seen.extend(answer.file_descriptor_response.file_descriptor_proto)
        return seen

    def test_reflection_needs_a_key(self):
        d = tempfile.mkdtemp(prefix="dendro_refl_")
        keys = os.path.join(d, "keys")
        keys_file(keys, ["reader"])
        health_port = free_port()
        try:
            r = subprocess.run([bb.DENDROD, "--data_dir", d, "--auth_reflection"],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--auth_reflection needs --auth_keys", r.stderr)
            server = Server(d, ("--auth_keys", keys, "--auth_reflection",
                                "--health_listen", f"127.0.0.1:{health_port}"))
            health_channel = grpc.insecure_channel(f"127.0.0.1:{health_port}")
            try:
                for channel in (server.channel, health_channel):
                    for metadata in ((), (("authorization", "Bearer wrong"),)):
                        leaked = []
                        with self.assertRaises(grpc.RpcError) as err:
                            self.list_services(channel, metadata, leaked)
                        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                        self.assertEqual(leaked, [], "a refused caller saw descriptors")
                    self.assertIn("dendro.v1.ModelService" if channel is server.channel
                                  else "grpc.health.v1.Health",
                                  self.list_services(channel, md("reader")))
                    from health.v1 import health_pb2, health_pb2_grpc
                    resp = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=5)
                    self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)
                # Without the flag reflection stays open to anyone.
                server.stop()
                server = Server(d, ("--auth_keys", keys))
                self.assertIn("dendro.v1.ModelService", self.list_services(server.channel, ()))
            finally:
                health_channel.close()
                if server.proc.poll() is None:
                    server.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)


class InsecureTest(unittest.TestCase):
    def test_non_loopback_without_auth_is_refused_unless_asked(self):
        d = tempfile.mkdtemp(prefix="dendro_insecure_")
        try:
            r = subprocess.run([bb.DENDROD, "--listen", "0.0.0.0:0", "--data_dir", d],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--allow_insecure", r.stdout + r.stderr)
            server = Server(d, ("--listen", "0.0.0.0:0", "--allow_insecure"))
            try:
                server.models.ListModels(pb.ListModelsRequest(), timeout=5)
            finally:
                server.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class MutualTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("the openssl binary is not installed (Debian package openssl)")
        cls.dir = tempfile.mkdtemp(prefix="dendro_mtls_")
        p = cls.p
        for ca in ("ca", "other_ca"):
            openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={ca}", "-keyout", p(f"{ca}.key"), "-out", p(f"{ca}.pem"))

        def issue(name, ca, extra=()):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                    "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"))
            openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p(f"{ca}.pem"),
                    "-CAkey", p(f"{ca}.key"), "-CAcreateserial", "-days", "2",
                    "-out", p(f"{name}.pem"), *extra)
        ext = p("san.ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        issue("server", "ca", ("-extfile", ext))
        issue("alice", "ca")
        issue("mallory", "other_ca")
        with open(p("keys"), "w") as f:
            f.write("cn:alice  alice  reader\n")
        data = os.path.join(cls.dir, "data")
        os.makedirs(data)
        port_file = os.path.join(data, "port")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            cls.health_port = s.getsockname()[1]
        cls.log = open(os.path.join(data, "dendrod.log"), "ab")
        cls.proc = subprocess.Popen(
            [bb.DENDROD, "--listen", "127.0.0.1:0", "--data_dir", data, "--port_file", port_file,
             "--tls_cert", p("server.pem"), "--tls_key", p("server.key"),
             "--tls_client_ca", p("ca.pem"), "--auth_keys", p("keys"),
             "--health_listen", f"127.0.0.1:{cls.health_port}"],
            stdout=cls.log, stderr=cls.log)
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if cls.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("dendrod (mTLS) did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            cls.port = int(f.read().strip())

    @classmethod
    def p(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def tearDownClass(cls):
        cls.proc.send_signal(signal.SIGTERM)
        cls.proc.wait(timeout=60)
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def stub(self, name=None):
        root = open(self.p("ca.pem"), "rb").read()
        if name is None:
            creds = grpc.ssl_channel_credentials(root_certificates=root)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=open(self.p(f"{name}.key"), "rb").read(),
                certificate_chain=open(self.p(f"{name}.pem"), "rb").read())
        channel = grpc.secure_channel(f"127.0.0.1:{self.port}", creds,
                                      options=(("grpc.ssl_target_name_override", "localhost"),))
        self.addCleanup(channel.close)
        return rpc.ModelServiceStub(channel)

    def test_certificates(self):
        # No certificate, or one from another CA: the handshake fails.
        for name in (None, "mallory"):
            with self.assertRaises(grpc.RpcError) as err:
                self.stub(name).ListModels(pb.ListModelsRequest(), timeout=5)
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE, name)
        # A good one: the certificate's CN maps to a reader.
        alice = self.stub("alice")
        alice.ListModels(pb.ListModelsRequest(), timeout=5)
        with self.assertRaises(grpc.RpcError) as err:
            alice.DeleteModel(pb.DeleteModelRequest(name="x"), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def test_probes_use_the_plaintext_health_port(self):
        from health.v1 import health_pb2, health_pb2_grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{self.health_port}")
        self.addCleanup(channel.close)
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "dendro.v1.ModelService"):
            resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING, service)
        # Nothing else is served there.
        with self.assertRaises(grpc.RpcError) as err:
            rpc.ModelServiceStub(channel).ListModels(pb.ListModelsRequest(), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # The CLI's probe command, as the Docker HEALTHCHECK runs it.
        cli = os.path.join(os.path.dirname(bb.DENDROD), "..", "client", "dendro")
        if os.path.exists(cli):
            out = subprocess.run([cli, "--server", f"127.0.0.1:{self.health_port}", "health"],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual((out.returncode, out.stdout.strip()), (0, "SERVING"), out.stderr)


if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    unittest.main(verbosity=2)
