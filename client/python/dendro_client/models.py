"""Model versions of the registry and inference against them."""
from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ._arrays import load_matrix, row_batches
from .errors import translate
from .tree import Tree

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client



def parse_model_ref(text: str, version: int = 0) -> Tuple[str, int, str]:
    """Splits "NAME", "NAME:VERSION", "NAME:latest" or "NAME@LABEL".

    Returns ``(name, version, label)`` with version 0 for "the latest" and
    label "" when none is given. ``version`` (if not 0) is used for a bare
    NAME; giving it together with ":VERSION" or "@LABEL" is a ValueError.
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"model {text!r}: expected NAME, NAME:VERSION or NAME@LABEL")
    name, label, parsed = text, "", 0
    if "@" in text:
        name, label = text.rsplit("@", 1)
        if not label or ":" in name:
            raise ValueError(f"model {text!r}: expected NAME, NAME:VERSION or NAME@LABEL")
    elif ":" in text:
        name, number = text.rsplit(":", 1)
        if number != "latest":
            if not number.isdigit() or int(number) < 1:
                raise ValueError(f"model {text!r}: version must be a number >= 1 or 'latest', "
                                 f"got {number!r}")
            parsed = int(number)
    if not name:
        raise ValueError(f"model {text!r}: expected NAME, NAME:VERSION or NAME@LABEL")
    if version:
        if parsed or label:
            raise ValueError(f"model {text!r}: a version is given twice ({version})")
        if int(version) < 1:
            raise ValueError(f"version must be >= 1 (0 = the latest), got {version}")
        parsed = int(version)
    return name, parsed, label


class Prediction(NamedTuple):
    """A classifier's answer for ``rows`` inputs, best class first.

    labels: int64 ``(rows, top_k)`` original class labels;
    scores: float32 ``(rows, top_k)``, smaller is better;
    superclasses: int32 ``(rows, top_t)`` super-classes opened per row
    (``(rows, 0)`` for a flat prediction).
    """
    labels: np.ndarray
    scores: np.ndarray
    superclasses: np.ndarray


class Classes(NamedTuple):
    """A classifier's class table, in the model's internal class order.

    labels: int64 original class labels; superclasses: int32 super-class of
    each class (-1 for a flat model); num_superclasses: 0 for a flat model;
    train_counts: int64 training rows per class; names: each class's name
    (string labels and ``class_names`` at training, else the label's digits).
    """
    labels: np.ndarray
    superclasses: np.ndarray
    num_superclasses: int
    train_counts: np.ndarray
    names: Tuple[str, ...] = ()


def _timestamp(ts: Any) -> Optional[datetime.datetime]:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=datetime.timezone.utc)


class Model:
    """One version of a named model in the registry.

    A Model is pinned to its version: ``tree``, ``assign``, ``predict`` and
    ``classes`` always answer from that version, even if it was looked up as
    "NAME" (the latest) or "NAME@label" and the name has moved on since.
    """

    def __init__(self, client: "Client", proto: Any) -> None:
        self._client = client
        self._proto = proto

    # --- attributes ----------------------------------------------------------
    @property
    def name(self) -> str:
        return self._proto.name

    @property
    def version(self) -> int:
        return int(self._proto.version)

    @property
    def method(self) -> str:
        """"l2h", "tneb", "ghhc" or "hppca"."""
        return self._proto.method

    @property
    def num_leaves(self) -> int:
        """Leaf clusters of the hierarchy (classes, for hppca)."""
        return int(self._proto.num_leaves)

    @property
    def input_dim(self) -> int:
        """Columns that assign and predict expect."""
        return int(self._proto.input_dim)

    @property
    def metadata(self) -> Dict[str, str]:
        return dict(self._proto.metadata)

    @property
    def labels(self) -> List[str]:
        """Version labels pointing at this version (e.g. ["stable"]), as of the lookup."""
        return list(self._proto.labels)

    @property
    def dataset_id(self) -> str:
        return self._proto.dataset_id

    @property
    def job_id(self) -> str:
        return self._proto.job_id

    @property
    def owner(self) -> str:
        return self._proto.owner

    @property
    def create_time(self) -> Optional[datetime.datetime]:
        return _timestamp(self._proto.create_time)

    @property
    def ref(self) -> str:
        """"NAME:VERSION", accepted wherever a model is named."""
        return f"{self.name}:{self.version}"

    @property
    def proto(self) -> Any:
        """The underlying dendro.v1.Model message."""
        return self._proto

    def _ref(self) -> Any:
        return self._client._pb.ModelRef(name=self.name, version=self.version)

    # --- calls ----------------------------------------------------------------
    def refresh(self) -> "Model":
        """Re-reads this version (e.g. its labels) from the server; returns self."""
        self._proto = self._client._unary(
            self._client._models.GetModel, self._client._pb.GetModelRequest(model=self._ref()))
        return self

    def tree(self, unrefined: bool = False, include_points: bool = False) -> Tree:
        """The hierarchy of this version.

        ``unrefined``: the method's own (possibly n-ary) tree instead of its
        binary refinement (gHHC, hppca; the same tree for l2h and t-NEB); it
        has no linkage matrix. ``include_points``: also fetch each training
        point's leaf (``Tree.point_leaf``; can be large).
        """
        pb = self._client._pb

        def fetch(fmt: int, points: bool = False) -> bytes:
            # The streaming form: no message limit applies to the tree.
            req = pb.GetTreeRequest(model=self._ref(), format=fmt, include_points=points,
                                    unrefined=unrefined)
            with translate(self._client.target, self._client._tls):
                chunks = self._client._models.GetTreeStream(
                    req, timeout=self._client.timeout, metadata=self._client._metadata)
                return b"".join(chunk.content for chunk in chunks)

        return Tree(json.loads(fetch(pb.TREE_FORMAT_JSON, include_points)), fetch, unrefined)

    def assign(self, x: Any, level: int = 0, stable_ids: bool = False) -> np.ndarray:
        """Assigns rows (an array or a .npy path) to the hierarchy.

        ``level=0`` returns each row's leaf-cluster id; ``level=k`` its
        cluster when the tree is cut into k clusters (numbered as
        ``Tree.cut(k)`` numbers them). Returns int32 of shape ``(rows,)``.
        With ``stable_ids=True``, the same clusters' stable ids instead
        (int64): ids a cluster keeps from one version of the model to the
        next while it is the same cluster (the model's metadata
        ``stable_ids_basis`` and ``stable_ids_kept`` say how they matched).
        Large inputs are sent in several requests under the message limit.
        """
        pb = self._client._pb
        matrix, _ = load_matrix(x, "assign")
        out = []
        for block in row_batches(matrix, self._client._batch_bytes):
            resp = self._client._unary(self._client._models.Assign, pb.AssignRequest(
                model=self._ref(), rows=block.shape[0], cols=block.shape[1],
                data=block.tobytes(), level=int(level), stable_ids=bool(stable_ids)))
            if stable_ids:
                out.append(np.asarray(resp.stable_cluster, dtype=np.int64))
            else:
                out.append(np.asarray(resp.cluster if level else resp.leaf, dtype=np.int32))
        return np.concatenate(out)

    def predict(self, x: Any, top_t: int = 0, top_k: int = 1, flat: bool = False) -> Prediction:
        """Classifies rows (an array or a .npy path) with an hppca model.

        ``top_t``: super-classes to open (0 = the model's default);
        ``top_k``: classes returned per row; ``flat``: score every class.
        Returns a :class:`Prediction` of arrays with one row per input row.
        """
        pb = self._client._pb
        matrix, _ = load_matrix(x, "predict")
        labels, scores, supers = [], [], []
        for block in row_batches(matrix, self._client._batch_bytes):
            resp = self._client._unary(self._client._models.Predict, pb.PredictRequest(
                model=self._ref(), rows=block.shape[0], cols=block.shape[1],
                data=block.tobytes(), top_t=int(top_t), top_k=int(top_k), flat=bool(flat)))
            n = block.shape[0]
            labels.append(np.asarray(resp.labels, dtype=np.int64).reshape(n, resp.top_k))
            scores.append(np.asarray(resp.scores, dtype=np.float32).reshape(n, resp.top_k))
            opened = np.asarray(resp.superclasses, dtype=np.int32)
            supers.append(opened.reshape(n, opened.size // n if n else 0))
        return Prediction(np.concatenate(labels), np.concatenate(scores),
                          np.concatenate(supers))

    def classes(self) -> Classes:
        """The class table of an hppca model (labels, super-classes, counts)."""
        pb = self._client._pb
        resp = self._client._unary(self._client._models.GetClasses,
                                   pb.GetClassesRequest(model=self._ref()))
        return Classes(np.asarray(resp.labels, dtype=np.int64),
                       np.asarray(resp.superclasses, dtype=np.int32),
                       int(resp.num_superclasses),
                       np.asarray(resp.train_counts, dtype=np.int64),
                       tuple(resp.names))

    def set_label(self, label: str) -> "Model":
        """Points ``label`` of this name at this version; returns self, refreshed."""
        self._proto = self._client.set_label(self.name, label, self.version).proto
        return self

    def delete(self) -> int:
        """Deletes this version from the registry; returns the number deleted (1)."""
        return self._client.delete_model(self.name, self.version)

    def __repr__(self) -> str:
        return (f"<Model {self.name}:{self.version} method={self.method} "
                f"num_leaves={self.num_leaves}>")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Model) and (self.name, self.version) ==
                (other.name, other.version))

    def __hash__(self) -> int:
        return hash((self.name, self.version))
