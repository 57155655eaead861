"""A fitted hierarchy as returned by GetTree, with local cuts."""
from __future__ import annotations

import io
import json
from typing import Any, Callable, Dict, List, Optional

import numpy as np


class Tree:
    """The tree of one model version.

    Built from the server's JSON export (``num_leaves``, ``nodes``,
    ``leaf_names``, ``point_leaf``, ``metadata``); the SciPy linkage matrix
    and the Newick string are fetched from the server on first access and
    kept. All three describe the same pinned model version.

    Nodes ``0 .. num_leaves-1`` are the leaf clusters (the ids ``Model.assign``
    returns); internal nodes have larger ids than their children and are
    merged in (height, id) order.
    """

    def __init__(self, doc: Dict[str, Any], fetch: Optional[Callable[[int], bytes]] = None,
                 unrefined: bool = False) -> None:
        """``doc``: the parsed JSON export; ``fetch(format)``: the GetTree content
        in another TreeFormat (None: linkage and Newick are unavailable)."""
        if doc.get("format") != "dendro.hierarchy":
            raise ValueError("not a dendro.hierarchy JSON document")
        self._doc = doc
        self._fetch = fetch
        self._unrefined = unrefined
        self._linkage: Optional[np.ndarray] = None
        self._newick: Optional[str] = None
        self.num_leaves: int = int(doc["num_leaves"])
        nodes = sorted(doc["nodes"], key=lambda n: n["id"])
        self._parent = np.array([n["parent"] for n in nodes], dtype=np.int64)
        self._height = np.array([n["height"] for n in nodes], dtype=np.float64)
        self._children: List[List[int]] = [list(n.get("children", [])) for n in nodes]
        # Internal nodes in merge order: (height, id).
        internal = range(self.num_leaves, len(nodes))
        self._merge_order = sorted(internal, key=lambda v: (self._height[v], v))
        # _levels[r]: clusters after undoing the r last merges.
        levels = [1]
        for v in reversed(self._merge_order):
            levels.append(levels[-1] + len(self._children[v]) - 1)
        self._levels = levels

    @classmethod
    def from_json(cls, content: "str | bytes", fetch: Optional[Callable[[int], bytes]] = None,
                  unrefined: bool = False) -> "Tree":
        """A Tree from the JSON text of a GetTree(TREE_FORMAT_JSON) answer."""
        return cls(json.loads(content), fetch, unrefined)

    @property
    def leaf_names(self) -> Optional[List[str]]:
        """The leaf clusters' names (leaf i is ``leaf_names[i]``), or None."""
        names = self._doc.get("leaf_names")
        return list(names) if names else None

    @property
    def point_leaf(self) -> Optional[np.ndarray]:
        """Each training point's leaf cluster (int32), or None when not fetched
        (``Model.tree(include_points=True)``) or not recorded."""
        points = self._doc.get("point_leaf")
        return None if points is None else np.asarray(points, dtype=np.int32)

    @property
    def stable_ids(self) -> Optional[np.ndarray]:
        """The stable id of every node, indexed by node id (int64): the ids
        ``Model.assign(..., stable_ids=True)`` answers, which a cluster keeps
        across the model's versions. None for an unrefined tree."""
        ids = self._doc.get("stable_ids")
        return None if ids is None else np.asarray(ids, dtype=np.int64)

    @property
    def metadata(self) -> Dict[str, Any]:
        """The tree's metadata (method, parameters)."""
        return dict(self._doc.get("metadata", {}))

    @property
    def heights(self) -> np.ndarray:
        """Height of every node, indexed by node id (leaves are 0)."""
        return self._height.copy()

    @property
    def parents(self) -> np.ndarray:
        """Parent of every node, indexed by node id (-1 at the root)."""
        return self._parent.copy()

    def children(self, node: int) -> List[int]:
        """The children of ``node`` (empty for a leaf)."""
        return list(self._children[node])

    @property
    def is_binary(self) -> bool:
        """True when every internal node has exactly two children."""
        return all(len(self._children[v]) == 2 for v in self._merge_order)

    @property
    def linkage(self) -> np.ndarray:
        """The SciPy linkage matrix, (L-1) x 4 float64, as the server exports it.

        Fetched on first access. An unrefined (n-ary) tree has no linkage:
        fetch the refined one (``Model.tree()``) instead.
        """
        if self._linkage is None:
            if self._unrefined:
                raise ValueError("an unrefined tree has no linkage matrix (n-ary nodes); "
                                 "use model.tree() for the binary refinement")
            if self._fetch is None:
                raise ValueError("this Tree was built without a server connection")
            from ._stubs import load
            pb, _ = load()
            self._linkage = np.load(io.BytesIO(self._fetch(pb.TREE_FORMAT_LINKAGE_NPY)),
                                    allow_pickle=False)
        return self._linkage

    @property
    def newick(self) -> str:
        """The Newick string (ends with ';'); fetched on first access."""
        if self._newick is None:
            if self._fetch is None:
                raise ValueError("this Tree was built without a server connection")
            from ._stubs import load
            pb, _ = load()
            self._newick = self._fetch(pb.TREE_FORMAT_NEWICK).decode()
        return self._newick

    def to_dict(self) -> Dict[str, Any]:
        """The JSON export as a dict (a deep copy)."""
        return json.loads(json.dumps(self._doc))

    def reachable_levels(self) -> List[int]:
        """Cluster counts :meth:`cut` accepts, ascending (1 .. L for a binary tree)."""
        return sorted(set(self._levels))

    def cut(self, k: int) -> np.ndarray:
        """A partition of the leaves into exactly ``k`` clusters.

        Undoes the top ``k - 1`` merges in (height, id) order (an n-ary node
        counts as one merge of all its children), as the server's Assign
        with ``level=k`` does. Returns one label per leaf (int32, shape
        ``(num_leaves,)``), numbered by each cluster's smallest leaf id: leaf 0
        is in cluster 0.

        Raises ValueError if ``k`` is outside ``[1, num_leaves]`` or, for an
        n-ary tree, no cut gives exactly ``k`` clusters (naming the nearest
        reachable counts).
        """
        k = int(k)
        if not 1 <= k <= self.num_leaves:
            raise ValueError(f"cannot cut into {k} clusters: k must be in "
                             f"[1, {self.num_leaves}]")
        if k not in self._levels:
            below = max(x for x in self._levels if x < k)
            above = min(x for x in self._levels if x > k)
            raise ValueError(f"cannot cut this n-ary tree into exactly {k} clusters: the "
                             f"nearest reachable counts are {below} and {above}")
        undone = self._levels.index(k)
        removed = set(self._merge_order[len(self._merge_order) - undone:])
        n = len(self._parent)
        rep = np.full(n, -1, dtype=np.int64)
        # Parents have larger ids than their children: one descending pass.
        for v in range(n - 1, -1, -1):
            if v in removed:
                continue
            p = self._parent[v]
            rep[v] = v if p < 0 or p in removed else rep[p]
        labels = np.empty(self.num_leaves, dtype=np.int32)
        numbering: Dict[int, int] = {}
        for leaf in range(self.num_leaves):
            labels[leaf] = numbering.setdefault(int(rep[leaf]), len(numbering))
        return labels

    def plot(self, ax: Any = None, p: Optional[int] = None, truncate_above: int = 60,
             **kwargs: Any) -> Dict[str, Any]:
        """Draws the dendrogram with matplotlib (an optional dependency).

        ``ax``: the matplotlib Axes to draw on (default: the current one).
        A tree of more than ``truncate_above`` leaves is drawn truncated as
        SciPy's ``truncate_mode="lastp"`` does, showing only the last ``p``
        merged clusters (default 30; a cluster of n leaves is labelled
        "(n)"), so the labels stay readable; ``p`` given explicitly truncates
        at any size, and ``truncate_mode`` in ``kwargs`` (None for the whole
        tree) overrides both. Other ``kwargs`` go to
        ``scipy.cluster.hierarchy.dendrogram`` (leaf names label the leaves
        unless ``labels`` is given). Returns dendrogram's dict. Raises
        ImportError when matplotlib is not installed.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("Tree.plot needs matplotlib (apt-get install python3-matplotlib "
                              "or pip install matplotlib); without it, use "
                              "scipy.cluster.hierarchy.dendrogram(tree.linkage, "
                              "no_plot=True)") from e
        from scipy.cluster.hierarchy import dendrogram
        if ax is None:
            ax = plt.gca()
        if "labels" not in kwargs and self.leaf_names:
            kwargs["labels"] = self.leaf_names
        if "truncate_mode" not in kwargs and (p is not None or
                                              self.num_leaves > truncate_above):
            kwargs["truncate_mode"] = "lastp"
            kwargs["p"] = 30 if p is None else int(p)
        elif p is not None:
            kwargs["p"] = int(p)
        return dendrogram(self.linkage, ax=ax, **kwargs)

    def __repr__(self) -> str:
        kind = "unrefined " if self._unrefined else ""
        return f"<{kind}Tree num_leaves={self.num_leaves} nodes={len(self._parent)}>"
