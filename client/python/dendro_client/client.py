"""The connection to dendrod and every call that is not about one model or job."""
from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from . import _stubs
from ._arrays import byte_chunks, is_dataset_id, label_codes, load_labels, load_matrix
from .errors import DendroError, translate
from .jobs import Job
from .models import Model, _timestamp, parse_model_ref

DEFAULT_TARGET = "127.0.0.1:50051"
# Room left in each message for everything but the payload.
_MESSAGE_OVERHEAD = 64 << 10
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Dataset:
    """An uploaded matrix, referenced by ``id`` ("ds-…") in fits.

    ``lineage`` and ``generation``: appends (``Client.upload(append_to=)``)
    make generations 2, 3, … of the first upload's ``lineage``; a fit naming
    the lineage uses its newest generation, ``ref`` ("LINEAGE:G") this one.
    """
    id: str
    name: str
    rows: int
    cols: int
    has_labels: bool
    transient: bool
    size_bytes: int
    owner: str
    create_time: Optional[datetime.datetime]
    lineage: str = ""
    generation: int = 1

    @property
    def ref(self) -> str:
        """"LINEAGE:G": names this generation whatever is appended later."""
        return f"{self.lineage or self.id}:{self.generation}"

    @classmethod
    def from_proto(cls, d: Any) -> "Dataset":
        return cls(d.id, d.display_name, int(d.rows), int(d.cols), bool(d.has_labels),
                   bool(d.transient), int(d.size_bytes), d.owner, _timestamp(d.create_time),
                   d.lineage or d.id, max(1, int(d.generation)))


def _read(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _model_name_from(text: str) -> str:
    """A valid model name derived from a file stem or display name."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:128].lstrip(".")
    return name or "model"


def _find_dendrod() -> str:
    """$DENDRO_DENDROD, else dendrod on PATH, else this checkout's build tree."""
    env = os.environ.get("DENDRO_DENDROD")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"DENDRO_DENDROD={env} is not an executable file")
        return env
    found = shutil.which("dendrod")
    if found:
        return found
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    built = os.path.join(root, "build", "server", "dendrod")
    if os.access(built, os.X_OK):
        return built
    raise FileNotFoundError("Client.local() needs the dendrod binary: set DENDRO_DENDROD to its "
                            "path, or put dendrod on PATH (none at " + built + " either)")


def _tail(workdir: str, limit: int = 4000) -> str:
    try:
        with open(os.path.join(workdir, "dendrod.log"), "rb") as f:
            return f.read()[-limit:].decode(errors="replace")
    except OSError:
        return "(no log)"


def _stop_process(proc: "subprocess.Popen[bytes]", timeout: float = 30) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Client:
    """A connection to a dendrod server.

    ``target``: any gRPC target ("host:port", "dns:///host:port",
    "ipv4:10.0.0.1:50051,10.0.0.2:50051"); default ``$DENDRO_SERVER``, else
    "127.0.0.1:50051". Calls are spread over every address the target
    resolves to (round_robin).
    ``api_key``: sent as "authorization: Bearer <key>"; default
    ``$DENDRO_API_KEY`` (``api_key=""`` sends none, whatever the environment).
    ``tls``: connect with TLS, checking the server against the system roots,
    or against ``tls_ca`` (a PEM file; implies TLS). ``tls_cert`` and
    ``tls_key``: a client certificate and key (PEM files, both or neither;
    imply TLS).
    ``timeout``: seconds allowed for each unary call (uploads and waits have
    their own limits).
    ``max_message_bytes``: the gRPC message limit both ways; uploads, assign
    and predict are split to stay under it. ``upload_chunk_bytes``: the size
    of each upload message (default 1 MiB, less for a smaller limit).

    Every failed call raises :class:`DendroError`. A Client is thread-safe
    and can be used as a context manager (closing its channel on exit).
    """

    def __init__(self, target: Optional[str] = None, api_key: Optional[str] = None,
                 tls: bool = False, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 60, max_message_bytes: int = 64 << 20,
                 upload_chunk_bytes: Optional[int] = None) -> None:
        self._pb, self._rpc = _stubs.load()
        self.target = target or os.environ.get("DENDRO_SERVER") or DEFAULT_TARGET
        if api_key is None:
            api_key = os.environ.get("DENDRO_API_KEY") or None
        if api_key and any(ord(c) <= 0x20 or ord(c) >= 0x7f for c in api_key):
            raise ValueError("the API key contains whitespace or non-printable characters")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if timeout is None or timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_message_bytes < (1 << 20):
            raise ValueError(f"max_message_bytes must be at least 1 MiB, got {max_message_bytes}")
        if upload_chunk_bytes is None:
            upload_chunk_bytes = min(1 << 20, max_message_bytes - _MESSAGE_OVERHEAD)
        if not 8 <= upload_chunk_bytes <= max_message_bytes - _MESSAGE_OVERHEAD:
            raise ValueError("upload_chunk_bytes must be in [8, max_message_bytes - 64 KiB], "
                             f"got {upload_chunk_bytes}")
        self.timeout = float(timeout)
        self._chunk_bytes = int(upload_chunk_bytes)
        self._batch_bytes = int(max_message_bytes) - _MESSAGE_OVERHEAD
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {api_key}"),) if api_key else ())
        options = [
            ("grpc.max_send_message_length", int(max_message_bytes)),
            ("grpc.max_receive_message_length", int(max_message_bytes)),
            ("grpc.lb_policy_name", "round_robin"),
        ]
        if tls or tls_ca or tls_cert:
            creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca),
                                                 private_key=_read(tls_key),
                                                 certificate_chain=_read(tls_cert))
            self._channel = grpc.secure_channel(self.target, creds, options=options)
            self._tls: Optional[str] = "cert" if tls_cert else "no-cert"
        else:
            self._channel = grpc.insecure_channel(self.target, options=options)
            self._tls = None
        self._datasets = self._rpc.DatasetServiceStub(self._channel)
        self._jobs = self._rpc.JobServiceStub(self._channel)
        self._models = self._rpc.ModelServiceStub(self._channel)

    @classmethod
    def local(cls, timeout: float = 60, start_timeout: float = 60,
              **server_flags: Any) -> "Client":
        """A Client of a private dendrod started for it, for notebooks and tests.

        The server listens on a free loopback port (``--listen 127.0.0.1:0``)
        with a temporary data directory; ``server_flags`` are further dendrod
        flags (``workers=2`` gives ``--workers 2``). The binary is
        ``$DENDRO_DENDROD``, else ``dendrod`` on PATH, else the build tree's
        ``build/server/dendrod`` of a source checkout. Returns once the health
        check says SERVING. :meth:`close` (or leaving a ``with`` block) stops
        the server (SIGTERM, then SIGKILL after 30 s) and removes the directory.
        """
        binary = _find_dendrod()
        workdir = tempfile.mkdtemp(prefix="dendro-local-")
        port_file = os.path.join(workdir, "port")
        args = [binary, "--listen", "127.0.0.1:0", "--port_file", port_file,
                "--data_dir", os.path.join(workdir, "data"), "--drain_seconds", "1"]
        for key, value in server_flags.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            args += [f"--{key}", str(value)]
        log = open(os.path.join(workdir, "dendrod.log"), "ab")
        try:
            proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        client = None
        try:
            deadline = time.monotonic() + start_timeout
            port = ""
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"dendrod ({binary}) exited with code {proc.returncode} "
                                       f"at start; its log:\n{_tail(workdir)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dendrod ({binary}) did not serve within "
                                       f"{start_timeout} s; its log:\n{_tail(workdir)}")
                if not port and os.path.exists(port_file):
                    with open(port_file) as f:
                        port = f.read().strip()
                    if port:
                        client = cls(f"127.0.0.1:{port}", api_key="", timeout=timeout)
                if client is not None:
                    try:
                        if client.health() == "SERVING":
                            break
                    except DendroError:
                        pass
                time.sleep(0.05)
        except BaseException:
            if client is not None:
                client._channel.close()
            _stop_process(proc)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        client._process = proc
        client._workdir = workdir
        return client

    # --- plumbing ---------------------------------------------------------------
    def close(self) -> None:
        """Closes the channel; the Client cannot be used afterwards. A
        :meth:`local` Client also stops its server and removes its directory."""
        self._channel.close()
        proc = getattr(self, "_process", None)
        if proc is not None:
            self._process = None
            _stop_process(proc)
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def process(self) -> Optional["subprocess.Popen[bytes]"]:
        """The dendrod process of a :meth:`local` Client (None otherwise, or once closed)."""
        return getattr(self, "_process", None)

    @property
    def local_dir(self) -> Optional[str]:
        """The temporary directory of a :meth:`local` Client's server, else None."""
        return getattr(self, "_workdir", None)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Client":
        """A Client is a connection: copies (e.g. sklearn's clone) share it."""
        return self

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dendro_client.Client {self.target}>"

    def _unary(self, method: Callable[..., Any], request: Any,
               timeout: Optional[float] = None) -> Any:
        with translate(self.target, self._tls):
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)

    def _pages(self, method: Callable[..., Any], make: Callable[[str], Any],
               field: str) -> Iterator[Any]:
        token = ""
        while True:
            resp = self._unary(method, make(token))
            yield from getattr(resp, field)
            token = resp.next_page_token
            if not token:
                return

    # --- health -----------------------------------------------------------------
    def health(self, service: str = "") -> str:
        """The standard gRPC health check (grpc.health.v1.Health/Check).

        ``service``: "" for the server, or e.g. "dendro.v1.ModelService".
        Needs no API key. Returns "SERVING", "NOT_SERVING" or "UNKNOWN";
        raises DendroError when the server cannot be reached (UNAVAILABLE)
        or does not know ``service`` (NOT_FOUND).
        """
        from google.protobuf import wrappers_pb2
        # HealthCheckRequest {string service = 1} and HealthCheckResponse
        # {ServingStatus status = 1} share their wire format with these
        # wrappers, so no health stubs are needed.
        check = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=wrappers_pb2.StringValue.SerializeToString,
            response_deserializer=wrappers_pb2.Int32Value.FromString)
        resp = self._unary(check, wrappers_pb2.StringValue(value=service))
        return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING",
                3: "SERVICE_UNKNOWN"}.get(resp.value, "UNKNOWN")

    # --- datasets ---------------------------------------------------------------
    def upload(self, data: Any, labels: Any = None, name: Optional[str] = None,
               transient: bool = False, prepare: str = "",
               append_to: Optional[str] = None) -> Dataset:
        """Uploads a 2-D matrix (a float32/float64 array or a .npy path).

        ``labels``: optional int labels, one per row (array or .npy path).
        ``name``: the display name (default: the file's stem). ``transient``:
        not written durably; the server drops it after the last job using it
        ends, and on restart. ``prepare``: "l2h" has the server run L2H's
        first pass while the rows arrive (DatasetHeader.prepare).
        ``append_to``: a dataset ("ds-…", or "ds-…:G" to insist that G is
        still its newest generation); the rows become its next generation,
        a new dataset holding every earlier row and then these
        (DatasetHeader.append_to). The name defaults to the dataset's.

        Every value is checked to be finite first: a ValueError names the
        first NaN or infinity's row and column, and nothing is sent. Data
        travels as float32 in chunks of ``upload_chunk_bytes``.
        """
        pb = self._pb
        matrix, stem = load_matrix(data, "upload")
        label_array = None if labels is None else load_labels(labels, matrix.shape[0])
        default_name = "" if append_to else (stem or "")
        header = pb.DatasetHeader(display_name=name if name is not None else default_name,
                                  rows=matrix.shape[0], cols=matrix.shape[1],
                                  has_labels=label_array is not None, transient=transient,
                                  prepare=prepare, append_to=append_to or "")

        def requests() -> Iterator[Any]:
            yield pb.UploadDatasetRequest(header=header)
            for chunk in byte_chunks(matrix, self._chunk_bytes):
                yield pb.UploadDatasetRequest(data=chunk)
            if label_array is not None:
                for chunk in byte_chunks(label_array, self._chunk_bytes):
                    yield pb.UploadDatasetRequest(labels=chunk)

        with translate(self.target, self._tls):
            # No deadline: an upload takes as long as the data needs.
            resp = self._datasets.UploadDataset(requests(), metadata=self._metadata)
        return Dataset.from_proto(resp)

    def import_file(self, path: str, labels: Any = None, name: Optional[str] = None,
                    transient: bool = False) -> Dataset:
        """Has a server on this host read a .npy file itself instead of receiving it.

        The server must have been started with ``--import_dirs`` over a
        directory holding ``path``, and the caller needs the importer role.
        The file must hold 2-D float32 in C order (what :meth:`upload`
        converts anything else to). A transient import links the file into
        the server's data directory (no copy: leave the file as it is until
        the job on it has ended); a durable one is copied by the server.
        ``labels`` and ``name`` as for :meth:`upload`.
        """
        pb = self._pb
        label_array = None
        if labels is not None:
            import numpy as np
            rows = int(np.load(path, mmap_mode="r").shape[0])
            label_array = load_labels(labels, rows)
        stem = os.path.splitext(os.path.basename(path))[0]
        header = pb.DatasetHeader(display_name=name if name is not None else stem,
                                  has_labels=label_array is not None, transient=transient)
        req = pb.ImportDatasetRequest(
            header=header, path=os.path.realpath(path),
            labels=b"" if label_array is None else label_array.astype("<i8").tobytes())
        with translate(self.target, self._tls):
            # No deadline: the server reads the whole file.
            resp = self._datasets.ImportDataset(req, metadata=self._metadata)
        return Dataset.from_proto(resp)

    def dataset(self, dataset_id: str) -> Dataset:
        """Looks up a dataset: an id, "ds-…" (the newest generation) or "ds-…:G"."""
        return Dataset.from_proto(self._unary(self._datasets.GetDataset,
                                              self._pb.GetDatasetRequest(id=dataset_id)))

    def datasets(self) -> List[Dataset]:
        """Every dataset (all pages)."""
        pb = self._pb
        return [Dataset.from_proto(d) for d in self._pages(
            self._datasets.ListDatasets,
            lambda t: pb.ListDatasetsRequest(page_size=1000, page_token=t), "datasets")]

    def delete_dataset(self, dataset_id: str) -> None:
        """Deletes a dataset (FAILED_PRECONDITION while a job uses it)."""
        self._unary(self._datasets.DeleteDataset, self._pb.DeleteDatasetRequest(id=dataset_id))

    # --- jobs -------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        """Looks up one job by id."""
        return Job(self, self._unary(self._jobs.GetJob, self._pb.GetJobRequest(id=job_id)))

    def jobs(self, states: Optional[Sequence[str]] = None, newest_first: bool = False,
             limit: Optional[int] = None) -> List[Job]:
        """Job records, oldest first unless ``newest_first``.

        ``states``: only jobs in these states ("queued", "running", "succeeded",
        "failed", "cancelled"); ``limit``: at most this many (default: all).
        """
        pb = self._pb
        wanted = []
        for name in states or ():
            key = "JOB_STATE_" + str(name).upper()
            if key not in pb.JobState.keys() or key == "JOB_STATE_UNSPECIFIED":
                raise ValueError(f"states: {name!r} is not a job state (queued, running, "
                                 "succeeded, failed or cancelled)")
            wanted.append(pb.JobState.Value(key))
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        out: List[Job] = []
        for j in self._pages(
                self._jobs.ListJobs,
                lambda t: pb.ListJobsRequest(
                    page_size=1000 if limit is None else min(1000, limit - len(out)),
                    page_token=t, newest_first=newest_first, states=wanted),
                "jobs"):
            out.append(Job(self, j))
            if limit is not None and len(out) >= limit:
                break
        return out

    def _params(self, message: Any, params: Dict[str, Any], method: str) -> Any:
        """Fills a *Params message from keyword arguments (None = the default)."""
        fields = [f.name for f in message.DESCRIPTOR.fields]
        unknown = sorted(set(params) - set(fields))
        if unknown:
            raise TypeError(f"unknown {method} parameter(s) {', '.join(unknown)}; valid: "
                            f"{', '.join(fields)}")
        for key, value in params.items():
            if value is not None:
                setattr(message, key, value)
        return message

    def _submit(self, data: Any, labels: Any, name: Optional[str], method: str,
                fill: Callable[[Any], None], leaf_names: Optional[Sequence[str]],
                request_id: Optional[str], allow_method_change: bool,
                default_name: Optional[str] = None) -> Job:
        """Uploads ``data`` unless it is a dataset id, then submits the job.

        An uploaded matrix is transient: the server deletes it when the job
        ends. If the submission is refused, it is deleted at once.
        """
        pb = self._pb
        uploaded = None
        if isinstance(data, Dataset):
            data = data.id
        if is_dataset_id(data):
            if labels is not None:
                raise ValueError(f"labels cannot be given with a dataset id ({data}): the "
                                 "dataset's own labels are used")
            dataset_id = data
            if name is None and default_name is None:
                ds = self.dataset(dataset_id)
                default_name = _model_name_from(ds.name or ds.id)
        else:
            matrix, stem = load_matrix(data, method)
            label_array = None if labels is None else load_labels(labels, matrix.shape[0])
            if name is None and default_name is None:
                default_name = _model_name_from(stem) if stem else method
            uploaded = self.upload(matrix, label_array, name=name or default_name,
                                   transient=True, prepare="l2h" if method == "l2h" else "")
            dataset_id = uploaded.id
        model_name = name if name is not None else default_name
        if not _MODEL_NAME.match(model_name or ""):
            raise ValueError(f"model name {model_name!r}: 1-128 letters, digits, '.', '_' or "
                             "'-', not starting with '.'")
        spec = pb.JobSpec(dataset_id=dataset_id, model_name=model_name,
                          allow_method_change=allow_method_change,
                          leaf_names=list(leaf_names or ()))
        fill(spec)
        try:
            resp = self._unary(self._jobs.SubmitJob,
                               pb.SubmitJobRequest(spec=spec, request_id=request_id or ""))
        except DendroError:
            if uploaded is not None:
                try:
                    self.delete_dataset(uploaded.id)
                except DendroError:
                    pass
            raise
        return Job(self, resp)

    def fit_l2h(self, data: Any, name: Optional[str] = None, aggregation: Optional[str] = None,
                leaf_names: Optional[Sequence[str]] = None, request_id: Optional[str] = None,
                allow_method_change: bool = False, warm_start: Optional[str] = None) -> Job:
        """Submits an L2H fit over N x K logits; returns the Job.

        ``data``: an array or .npy path (uploaded as a transient dataset) or
        a dataset id "ds-…". ``name``: the model name (default: the file's
        stem, the dataset's display name, else "l2h"; with ``warm_start``,
        its name). ``aggregation``: "sum_of_means" (default),
        "mean_of_means" or "sum_of_sums". ``leaf_names``: one name per
        column (class). ``request_id``: an idempotency key (a retry with the
        same key returns the same job). ``warm_start``: a version ("m",
        "m:3", "m@stable") fitted on an earlier generation of the dataset
        ``data`` names; its first pass over those rows is reused (the tree
        is the one a fit from scratch gives).
        """
        if warm_start is not None and name is None:
            name = parse_model_ref(warm_start, 0)[0]

        def fill(spec: Any) -> None:
            spec.l2h.SetInParent()
            self._params(spec.l2h, {"aggregation": aggregation}, "l2h")
            if warm_start is not None:
                spec.warm_start.CopyFrom(self._model_ref(warm_start))
        return self._submit(data, None, name, "l2h", fill, leaf_names, request_id,
                            allow_method_change)

    def fit_tneb(self, data: Any, name: Optional[str] = None, *,
                 leaf_names: Optional[Sequence[str]] = None, request_id: Optional[str] = None,
                 allow_method_change: bool = False, warm_start: Optional[str] = None,
                 **params: Any) -> Job:
        """Submits a t-NEB fit over N x d embeddings; returns the Job.

        ``params`` are TnebParams fields (components, dof, learn_dof,
        gaussian, ridge, restarts, max_iterations, tolerance, neighbors,
        path_points, path_steps, learning_rate, eval_points, standardize,
        seed, min_component_points, max_elongation, auto_dof, merge,
        rank_restarts_by, standardize_mode: "auto" (the default), "on" or
        "off", diagnose_k: the cut the diag_* metadata describe, 0 the auto
        k); unset ones take the defaults (docs/methods.md). An
        unknown name raises TypeError. ``data`` and ``name`` as in
        :meth:`fit_l2h`. ``warm_start``: a version fitted on an earlier
        generation of the dataset; the EM runs once from its mixture.
        """
        if warm_start is not None and name is None:
            name = parse_model_ref(warm_start, 0)[0]

        def fill(spec: Any) -> None:
            spec.tneb.SetInParent()
            self._params(spec.tneb, params, "tneb")
            if warm_start is not None:
                spec.warm_start.CopyFrom(self._model_ref(warm_start))
        self._params(self._pb.TnebParams(), params, "tneb")  # check before uploading
        return self._submit(data, None, name, "tneb", fill, leaf_names, request_id,
                            allow_method_change)

    def fit_ghhc(self, data: Any, name: Optional[str] = None, *,
                 leaf_names: Optional[Sequence[str]] = None, request_id: Optional[str] = None,
                 allow_method_change: bool = False, warm_start: Optional[str] = None,
                 **params: Any) -> Job:
        """Submits a gHHC fit over N x d embeddings; returns the Job.

        ``params`` are GhhcParams fields (internal_nodes, learning_rate,
        batch_size, triples, neighbors, margin, seed, init_sample,
        point_norm, max_node_norm, gumbel_temperature, projection_dim,
        no_center, margin_every, margin_steps, margin_learning_rate, link,
        projection, learn_points, point_learning_rate, validation_triples,
        validate_every, constant_step_size, points, standardize, tree: "ward",
        the default, or "nodes"). A seed that is passed
        is used as given, 0 included. An unknown name raises TypeError.
        ``data`` and ``name`` as in :meth:`fit_l2h`. ``warm_start``: a
        version fitted on an earlier generation of the dataset; training
        continues from its nodes.
        """
        if warm_start is not None and name is None:
            name = parse_model_ref(warm_start, 0)[0]

        def fill(spec: Any) -> None:
            spec.ghhc.SetInParent()
            self._params(spec.ghhc, params, "ghhc")
            if warm_start is not None:
                spec.warm_start.CopyFrom(self._model_ref(warm_start))
        self._params(self._pb.GhhcParams(), params, "ghhc")
        return self._submit(data, None, name, "ghhc", fill, leaf_names, request_id,
                            allow_method_change)

    def hppca_train(self, features: Any, labels: Any, name: str,
                    superclasses: Optional[int] = None, q: Optional[int] = None,
                    r: Optional[int] = None, *, leaf_names: Optional[Sequence[str]] = None,
                    request_id: Optional[str] = None, allow_method_change: bool = False,
                    **params: Any) -> Job:
        """Submits hierarchical PPCA classifier training; returns the Job.

        ``features``: N x d array or .npy path with ``labels`` (N ints, array
        or path), or a dataset id uploaded with labels (then ``labels`` is
        None). ``superclasses``: S (None/0 = automatic, -1 = flat); ``q``,
        ``r``: class and super-class PPCA components. Further ``params`` are
        HppcaTrainParams fields (``lambda_`` for ``lambda``, log_det_score,
        raw_data_clustering, kmeans_iterations, seed, default_top_t, seeding_rank,
        scoring: "auto", "hierarchical" or "flat", how a prediction naming no
        top_t is scored).
        """
        if "lambda_" in params:
            params["lambda"] = params.pop("lambda_")
        params.update(superclasses=superclasses, q=q, r=r)
        self._params(self._pb.HppcaTrainParams(), params, "hppca")

        def fill(spec: Any) -> None:
            spec.hppca.SetInParent()
            self._params(spec.hppca, params, "hppca")
        if labels is None and not is_dataset_id(features) and not isinstance(features, Dataset):
            raise ValueError("hppca_train needs labels (or a dataset id uploaded with labels)")
        if labels is not None:
            labels, names = label_codes(labels, None)
            if names is not None:
                if leaf_names is not None:
                    raise ValueError("string labels name the classes themselves; drop "
                                     "leaf_names")
                leaf_names = names
        return self._submit(features, labels, name, "hppca", fill, leaf_names, request_id,
                            allow_method_change)

    def hppca_add(self, model: Any, features: Any, labels: Any = None, recluster: bool = False,
                  *, request_id: Optional[str] = None) -> Job:
        """Adds the classes of new labelled data to an hppca model; returns the Job.

        ``model``: a Model or "NAME", "NAME:VERSION", "NAME@LABEL" (the
        base); the result is a new version of the base's name.
        ``features``/``labels`` as in :meth:`hppca_train`. ``recluster``:
        re-run the super-class k-means from scratch.
        """
        if isinstance(model, Model):
            base_name, version, label = model.name, model.version, ""
        else:
            base_name, version, label = parse_model_ref(model)

        def fill(spec: Any) -> None:
            spec.hppca_add.base.name = base_name
            spec.hppca_add.base.version = version
            spec.hppca_add.base.label = label
            spec.hppca_add.recluster = recluster
        if labels is None and not is_dataset_id(features) and not isinstance(features, Dataset):
            raise ValueError("hppca_add needs labels (or a dataset id uploaded with labels)")
        leaf_names = None
        if labels is not None:
            labels, names = label_codes(labels, None)
            if names is not None:
                labels, leaf_names = self._labels_of_base(base_name, version, label, labels,
                                                          names)
        return self._submit(features, labels, base_name, "hppca", fill, leaf_names, request_id,
                            False)

    def _labels_of_base(self, name: str, version: int, label: str, ids: Any,
                        names: List[str]) -> Tuple[Any, List[str]]:
        """String labels for hppca_add: the base's classes keep their labels
        (matched by name), new names get labels after its largest, as the
        CLI does. Returns the rows' labels and the names by label."""
        base = Model(self, self._unary(self._models.GetModel, self._pb.GetModelRequest(
            model=self._pb.ModelRef(name=name, version=version, label=label))))
        classes = base.classes()
        label_of = {n: int(v) for n, v in zip(classes.names, classes.labels)}
        next_label = int(classes.labels.max()) + 1 if len(classes.labels) else 0
        codes = []
        for n in names:
            if n not in label_of:
                label_of[n] = next_label
                next_label += 1
            codes.append(label_of[n])
        if next_label > 1_000_000:
            raise ValueError(f"the base model's labels reach {next_label - 1}; string labels "
                             "can extend models whose labels are below 1000000")
        by_label = [str(v) for v in range(next_label)]
        for n, v in label_of.items():
            by_label[v] = n
        return np.asarray(codes, dtype="<i8")[ids], by_label

    # --- models -----------------------------------------------------------------
    def _model_ref(self, name: str, version: int = 0) -> Any:
        base, number, label = parse_model_ref(name, version)
        return self._pb.ModelRef(name=base, version=number, label=label)

    def model(self, name: str, version: int = 0) -> Model:
        """Looks up a model version: ``model("m")`` (the latest),
        ``model("m", 3)``, ``model("m:3")`` or ``model("m@stable")``."""
        return Model(self, self._unary(self._models.GetModel,
                                       self._pb.GetModelRequest(model=self._model_ref(name,
                                                                                      version))))

    def diff(self, a: str, b: str, tanglegram: bool = False) -> Dict[str, Any]:
        """Compares two models' trees on the server, as ``dendro diff A B --json`` does.

        ``a`` and ``b`` are references ("m", "m:3", "m@stable"). Returns the
        report (format "dendro.diff": Robinson-Foulds distance, cophenetic
        correlation, ARI of the cuts at every k, cluster events; see
        docs/methods.md), with "tanglegram_svg" (the two trees facing each
        other, as SVG text) added when ``tanglegram`` is set.
        """
        import json
        resp = self._unary(self._models.DiffModels, self._pb.DiffModelsRequest(
            a=self._model_ref(a), b=self._model_ref(b), tanglegram=tanglegram))
        report: Dict[str, Any] = json.loads(resp.report_json)
        if tanglegram:
            report["tanglegram_svg"] = resp.tanglegram_svg.decode("utf-8")
        return report

    def models(self, name: Optional[str] = None) -> List[Model]:
        """Every model version (all pages), or only the versions of ``name``."""
        pb = self._pb
        return [Model(self, m) for m in self._pages(
            self._models.ListModels,
            lambda t: pb.ListModelsRequest(name=name or "", page_size=1000, page_token=t),
            "models")]

    def delete_model(self, name: str, version: int = 0) -> int:
        """Deletes one version, or every version of the name when ``version`` is 0
        (a bare "NAME:VERSION" string works too); returns how many were deleted."""
        base, number, label = parse_model_ref(name, version)
        if label:
            raise ValueError("delete_model takes a version number, not a label")
        resp = self._unary(self._models.DeleteModel,
                           self._pb.DeleteModelRequest(name=base, version=number))
        return int(resp.deleted)

    def set_label(self, name: str, label: str, version: int = 0) -> Model:
        """Points ``label`` of model ``name`` at ``version`` (0 = the latest),
        moving it if it points elsewhere; then "name@label" names that version."""
        return Model(self, self._unary(self._models.SetModelLabel, self._pb.SetModelLabelRequest(
            name=name, label=label, version=int(version))))

    def delete_label(self, name: str, label: str) -> int:
        """Removes a label; returns the version it pointed at."""
        resp = self._unary(self._models.DeleteModelLabel,
                           self._pb.DeleteModelLabelRequest(name=name, label=label))
        return int(resp.version)

    def set_retention(self, name: str, keep_versions: int) -> int:
        """Keeps the newest ``keep_versions`` unlabelled versions of ``name`` (0 =
        all); returns how many versions were deleted now."""
        resp = self._unary(self._models.SetModelRetention, self._pb.SetModelRetentionRequest(
            name=name, keep_versions=int(keep_versions)))
        return int(resp.deleted)
