"""scikit-learn estimators over dendrod: ``L2H``, ``TNEB``, ``GHHC`` and ``HPPCAClassifier``.

    from dendro_client.sklearn import TNEB
    labels = TNEB(n_clusters=3).fit(X).labels_

Each fit uploads ``X`` to a server and waits for the job: through ``client``
when one is given, else through a private server (:meth:`Client.local`)
started on first use, kept by the estimator and stopped by :meth:`close` or
when the estimator is garbage collected. The fitted model lives on the
server, named ``model_name`` (default ``sklearn_<method>``; each fit adds a
version); ``model_`` is its ``(name, version)``. A pickled estimator keeps
that reference but no connection: give it a ``client`` (``set_params``)
to predict with it again.

Fitted clusterers have sklearn AgglomerativeClustering's attributes over the
tree's *leaf clusters* (not the rows): ``children_`` and ``distances_`` are
the SciPy linkage of the tree (leaves ``0 .. n_leaves_-1``), ``point_leaf_``
is each training row's leaf, and ``labels_`` its cluster when the tree is
cut into ``n_clusters`` (as ``Tree.cut`` numbers them).
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, Optional

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, ClusterMixin
from sklearn.utils.validation import check_array, check_is_fitted

from .client import Client

__all__ = ["L2H", "TNEB", "GHHC", "HPPCAClassifier"]


def _close_owned(holder: Dict[str, Any]) -> None:
    client = holder.pop("client", None)
    if client is not None:
        client.close()


class _DendroBase(BaseEstimator):
    _method = ""
    _min_features = 1
    _params_map: Dict[str, str] = {}

    # --- the connection -------------------------------------------------------
    def _client(self) -> Client:
        if self.client is not None:
            return self.client
        holder = self.__dict__.setdefault("_owned", {})
        if holder.get("client") is None:
            holder["client"] = Client.local()
            # Stops the private server when the estimator is collected.
            self.__dict__["_finalizer"] = weakref.finalize(self, _close_owned, holder)
        return holder["client"]

    def close(self) -> None:
        """Stops the private server this estimator started, if any."""
        finalizer = self.__dict__.pop("_finalizer", None)
        if finalizer is not None:
            finalizer()
        self.__dict__.pop("_owned", None)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_owned", "_finalizer", "_model", "tree_"):
            state.pop(key, None)
        state["client"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _validate(self, X: Any, reset: bool) -> np.ndarray:
        X = check_array(X, dtype=[np.float64, np.float32], force_all_finite=True,
                        ensure_min_samples=2, ensure_min_features=self._min_features)
        if reset:
            self.n_features_in_ = X.shape[1]
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input")
        return X

    def _fit_params(self) -> Dict[str, Any]:
        return {server: getattr(self, own) for own, server in self._params_map.items()
                if getattr(self, own) is not None}

    def _fitted_model(self) -> Any:
        check_is_fitted(self, "model_")
        model = self.__dict__.get("_model")
        if model is None:
            model = self._client().model(*self.model_)
            self.__dict__["_model"] = model
        return model

    def _more_tags(self) -> Dict[str, Any]:
        return {"non_deterministic": False, "requires_fit": True}


class _Clusterer(ClusterMixin, _DendroBase):
    def _submit(self, client: Client, X: np.ndarray) -> Any:
        raise NotImplementedError

    def fit(self, X: Any, y: Any = None) -> "_Clusterer":
        """Fits the hierarchy on the server; sets labels_, children_, distances_, ..."""
        X = self._validate(X, reset=True)
        client = self._client()
        model = self._submit(client, X).wait(progress=False)
        tree = model.tree(include_points=True)
        self.__dict__["_model"] = model
        self.model_ = (model.name, model.version)
        self.tree_ = tree
        self.n_leaves_ = tree.num_leaves
        if tree.num_leaves > 1:
            Z = np.asarray(tree.linkage)
            self.children_ = Z[:, :2].astype(np.intp)
            self.distances_ = Z[:, 2].astype(np.float64)
        else:
            self.children_ = np.zeros((0, 2), dtype=np.intp)
            self.distances_ = np.zeros(0)
        k = min(int(self.n_clusters), tree.num_leaves)
        self.n_clusters_ = k
        self.leaf_labels_ = tree.cut(k).astype(np.intp)
        point_leaf = tree.point_leaf
        if point_leaf is None or len(point_leaf) != X.shape[0]:
            point_leaf = model.assign(X)
        self.point_leaf_ = np.asarray(point_leaf, dtype=np.intp)
        self.labels_ = self.leaf_labels_[self.point_leaf_]
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Each row's cluster at the cut into n_clusters_ (the Assign RPC)."""
        model = self._fitted_model()
        X = check_array(X, dtype=[np.float64, np.float32], force_all_finite=True)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input")
        leaves = model.assign(X)
        return self.leaf_labels_[leaves]

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).labels_


class L2H(_Clusterer):
    """L2H over N x K logits: the K classes are the leaves, each row belongs
    to its arg-max class; ``labels_`` is that class's cluster at the cut."""
    _method = "l2h"

    def __init__(self, n_clusters: int = 2, *, aggregation: Optional[str] = None,
                 client: Optional[Client] = None, model_name: Optional[str] = None) -> None:
        self.n_clusters = n_clusters
        self.aggregation = aggregation
        self.client = client
        self.model_name = model_name

    def _submit(self, client: Client, X: np.ndarray) -> Any:
        return client.fit_l2h(X, name=self.model_name or "sklearn_l2h",
                              aggregation=self.aggregation)


class TNEB(_Clusterer):
    """t-NEB (mixture of t components merged along nudged elastic band paths).
    Parameters left None take the server's defaults (docs/methods.md)."""
    _method = "tneb"
    _min_features = 2
    _params_map = {"components": "components", "restarts": "restarts", "seed": "seed",
                   "standardize": "standardize", "path_points": "path_points",
                   "path_steps": "path_steps", "eval_points": "eval_points",
                   "min_component_points": "min_component_points"}

    def __init__(self, n_clusters: int = 2, *, components: Optional[int] = None,
                 restarts: Optional[int] = None, seed: Optional[int] = 0,
                 standardize: Optional[bool] = None, path_points: Optional[int] = None,
                 path_steps: Optional[int] = None, eval_points: Optional[int] = None,
                 min_component_points: Optional[int] = None,
                 client: Optional[Client] = None, model_name: Optional[str] = None) -> None:
        self.n_clusters = n_clusters
        self.components = components
        self.restarts = restarts
        self.seed = seed
        self.standardize = standardize
        self.path_points = path_points
        self.path_steps = path_steps
        self.eval_points = eval_points
        self.min_component_points = min_component_points
        self.client = client
        self.model_name = model_name

    def _submit(self, client: Client, X: np.ndarray) -> Any:
        params = self._fit_params()
        # standardize: None leaves the server's rule (auto), True and False insist.
        if params.get("standardize") is False:
            del params["standardize"]
            params["standardize_mode"] = "off"
        return client.fit_tneb(X, name=self.model_name or "sklearn_tneb", **params)


class GHHC(_Clusterer):
    """gHHC (gradient-based hyperbolic hierarchical clustering).
    Parameters left None take the server's defaults (docs/methods.md)."""
    _method = "ghhc"
    _params_map = {"internal_nodes": "internal_nodes", "triples": "triples",
                   "batch_size": "batch_size", "learning_rate": "learning_rate",
                   "seed": "seed", "tree": "tree"}

    def __init__(self, n_clusters: int = 2, *, internal_nodes: Optional[int] = None,
                 triples: Optional[int] = None, batch_size: Optional[int] = None,
                 learning_rate: Optional[float] = None, seed: Optional[int] = 0,
                 tree: Optional[str] = None, client: Optional[Client] = None,
                 model_name: Optional[str] = None) -> None:
        self.n_clusters = n_clusters
        self.tree = tree
        self.internal_nodes = internal_nodes
        self.triples = triples
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.seed = seed
        self.client = client
        self.model_name = model_name

    def _submit(self, client: Client, X: np.ndarray) -> Any:
        return client.fit_ghhc(X, name=self.model_name or "sklearn_ghhc", **self._fit_params())


class HPPCAClassifier(ClassifierMixin, _DendroBase):
    """Hierarchical PPCA classifier. ``y`` may hold any labels (kept in
    ``classes_``); ``lam`` is the method's λ. ``predict`` opens ``top_t``
    super-classes, or with 0 scores as the model's default does (flat where
    its cost model says the hierarchy would not pay); ``predict_proba`` scores every class
    and returns softmax(-score / 2), the Gaussian posterior under equal
    priors for ``log_det_score=True`` (with the default Mahalanobis score it
    leaves out each class's covariance volume)."""
    _method = "hppca"
    _params_map = {"superclasses": "superclasses", "q": "q", "r": "r", "lam": "lambda",
                   "log_det_score": "log_det_score", "seed": "seed"}

    def __init__(self, *, superclasses: Optional[int] = None, q: Optional[int] = None,
                 r: Optional[int] = None, lam: Optional[float] = None,
                 log_det_score: Optional[bool] = None, seed: Optional[int] = 0,
                 top_t: int = 0, client: Optional[Client] = None,
                 model_name: Optional[str] = None) -> None:
        self.superclasses = superclasses
        self.q = q
        self.r = r
        self.lam = lam
        self.log_det_score = log_det_score
        self.seed = seed
        self.top_t = top_t
        self.client = client
        self.model_name = model_name

    def fit(self, X: Any, y: Any) -> "HPPCAClassifier":
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import check_X_y
        X, y = check_X_y(X, y, dtype=[np.float64, np.float32], force_all_finite=True)
        check_classification_targets(y)
        self.n_features_in_ = X.shape[1]
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError("HPPCAClassifier needs at least 2 classes, got "
                             f"{len(self.classes_)}")
        client = self._client()
        params = self._fit_params()
        model = client.hppca_train(X, codes.astype(np.int64),
                                   self.model_name or "sklearn_hppca", **params).wait(
                                       progress=False)
        self.__dict__["_model"] = model
        self.model_ = (model.name, model.version)
        return self

    def _rows(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "model_")
        X = check_array(X, dtype=[np.float64, np.float32], force_all_finite=True)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but HPPCAClassifier is "
                             f"expecting {self.n_features_in_} features as input")
        return X

    def predict(self, X: Any) -> np.ndarray:
        X = self._rows(X)
        pred = self._fitted_model().predict(X, top_t=int(self.top_t), top_k=1)
        return self.classes_[pred.labels[:, 0]]

    def predict_proba(self, X: Any) -> np.ndarray:
        X = self._rows(X)
        k = len(self.classes_)
        pred = self._fitted_model().predict(X, top_k=k, flat=True)
        scores = np.empty((X.shape[0], k))
        np.put_along_axis(scores, pred.labels, pred.scores.astype(np.float64), axis=1)
        logits = -0.5 * scores
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)
