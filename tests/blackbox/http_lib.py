"""Helpers for the tests of dendrod's HTTP listener (--http_listen).

A real dendrod with API keys and the listener on a free loopback port,
keyed gRPC calls to give it datasets, jobs and models, and plain urllib
requests that return (status, headers, body) whatever the status.
"""
import hashlib
import json
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import pb, Server  # noqa: E402

import numpy as np  # noqa: E402

KEYS = {"reader": "http-reader-key-0123456789", "writer": "http-writer-key-0123456789"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keys(path):
    with open(path, "w") as f:
        for role, key in KEYS.items():
            f.write(f"{hashlib.sha256(key.encode()).hexdigest()}  {role}-user  {role}\n")


def md(role):
    return (("authorization", f"Bearer {KEYS[role]}"),)


class HttpServer(Server):
    """dendrod with --auth_keys and --http_listen on a free port."""

    def __init__(self, data_dir, extra=()):
        keys = os.path.join(data_dir, "keys")
        write_keys(keys)
        self.http_port = free_port()
        super().__init__(data_dir, ("--auth_keys", keys, "--http_listen",
                                    f"127.0.0.1:{self.http_port}", "--threads", "1",
                                    "--drain_seconds", "5", *extra))
        self.base = f"http://127.0.0.1:{self.http_port}"


def request(url, role=None, method="GET", body=None, headers=None, context=None, timeout=None):
    """(status, headers, body bytes) of one request; never raises on 4xx/5xx."""
    h = dict(headers or {})
    if role is not None:
        h["Authorization"] = f"Bearer {KEYS[role]}"
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, context=context,
                                    **({} if timeout is None else {"timeout": timeout})) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(url, role="reader", context=None):
    status, _, body = request(url, role, context=context)
    assert status == 200, (url, status, body)
    return json.loads(body)


def upload(server, x, y=None, name="http"):
    def requests():
        yield pb.UploadDatasetRequest(header=pb.DatasetHeader(
            rows=x.shape[0], cols=x.shape[1], has_labels=y is not None, display_name=name))
        yield pb.UploadDatasetRequest(data=np.ascontiguousarray(x, dtype="<f4").tobytes())
        if y is not None:
            yield pb.UploadDatasetRequest(labels=np.asarray(y, dtype="<i8").tobytes())
    return server.datasets.UploadDataset(requests(), metadata=md("writer"), timeout=60)


def fit(server, spec, wait=True):
    job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=md("writer"),
                                timeout=30)
    if not wait:
        return job
    # WaitJob returns at its own timeout too; ask again until the job ends.
    while True:
        job = server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 30}),
                                  metadata=md("writer"), timeout=60)
        if job.state in (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED):
            return job


def long_job_spec(dataset_id, name="long"):
    """A gHHC fit that runs until it is cancelled (as in auth_test.py)."""
    return pb.JobSpec(dataset_id=dataset_id, model_name=name,
                      ghhc=pb.GhhcParams(internal_nodes=20, triples=10**9, seed=1))


def classifier_data(seed):
    """3 groups of 4 classes in 12 dimensions, labels 50 + 10 k (as in
    grpc_blackbox_test.py)."""
    rng = np.random.default_rng(5)
    groups, per, d = 3, 4, 12
    k = groups * per
    means = (np.repeat(rng.normal(0, 3.0, (groups, d)), per, axis=0) +
             rng.normal(0, 0.8, (k, d)))
    labels = 50 + 10 * np.arange(k)
    r = np.random.default_rng(seed)
    c = np.repeat(np.arange(k), 40)
    return (means[c] + r.normal(0, 0.9, (len(c), d))).astype(np.float32), labels[c]


def tls_context(cafile):
    return ssl.create_default_context(cafile=cafile)


def set_dendrod(path):
    bb.DENDROD = path
