#!/usr/bin/python3
"""Checks that SciPy accepts the linkage matrices Dendro writes.

usage: check_scipy_linkage.py <hierarchy_export_tool> <work dir>

Runs the tool, then for every hierarchy it wrote:
  * scipy.cluster.hierarchy.is_valid_linkage(Z, throw=True) and is_monotonic;
  * to_tree(Z) counts L leaves and visits them in Dendro's leaf order, and
    leaves_list(Z) agrees;
  * fcluster(Z, k, 'maxclust') equals Dendro's CutToK(k) as a partition;
  * fcluster(Z, h, 'distance') equals Dendro's CutAtHeight(h);
  * the Newick text describes the same clusters at the same heights.
"""
import json
import os
import subprocess
import sys

import numpy as np
from scipy.cluster import hierarchy


def same_partition(a, b):
    """True if label vectors a and b induce the same partition."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False
    fwd, back = {}, {}
    for x, y in zip(a.tolist(), b.tolist()):
        if fwd.setdefault(x, y) != y or back.setdefault(y, x) != x:
            return False
    return True


def parse_newick(text):
    """Returns {frozenset(leaves): height} for internal nodes; leaves at 0."""
    assert text.endswith(";"), "Newick must end with ';'"
    pos = 0
    clusters = {}
    # Stack of open internal nodes: list of (leaf set, height, branch length).
    stack = [[]]
    pending = None  # last completed node: (leaves, height)

    def read_number():
        nonlocal pos
        start = pos
        while pos < len(text) and text[pos] not in ",);":
            pos += 1
        return text[start:pos]

    while pos < len(text) - 1:
        ch = text[pos]
        if ch == "(":
            stack.append([])
            pos += 1
        elif ch == ",":
            pos += 1
        elif ch == ")":
            children = stack.pop()
            assert len(children) >= 2, "internal node with < 2 children"
            heights = [h + length for (_, h, length) in children]
            height = heights[0]
            for h in heights:
                assert abs(h - height) <= 1e-9 * (1 + abs(height)), "inconsistent branch lengths"
            leaves = frozenset().union(*(c[0] for c in children))
            clusters[leaves] = height
            pending = (leaves, height)
            pos += 1
            if pos < len(text) and text[pos] == ":":
                pos += 1
                stack[-1].append((leaves, height, float(read_number())))
            else:
                stack[-1].append((leaves, height, None))
        else:
            name = read_number()
            leaf, _, length = name.partition(":")
            stack[-1].append((frozenset([int(leaf)]), 0.0, float(length) if length else None))
    assert len(stack) == 1 and len(stack[0]) == 1, "unbalanced Newick"
    return clusters


def linkage_clusters(Z, n):
    """{frozenset(leaves): height} for every row of Z."""
    members = [frozenset([i]) for i in range(n)]
    out = {}
    for a, b, h, _ in Z:
        s = members[int(a)] | members[int(b)]
        members.append(s)
        # Chains of an n-ary node share a height; keep the first (smallest).
        out.setdefault(s, h)
    return out


def check_case(work, name):
    side = json.load(open(os.path.join(work, name + ".json")))
    n = side["num_leaves"]
    raw = np.fromfile(os.path.join(work, side["linkage"]), dtype="<f8")
    assert raw.size == 4 * (n - 1), (name, raw.size)
    Z = raw.reshape(n - 1, 4)

    hierarchy.is_valid_linkage(Z, throw=True, name=name)
    assert hierarchy.is_monotonic(Z), name

    root = hierarchy.to_tree(Z)
    assert root.get_count() == n, (name, root.get_count())
    assert root.pre_order() == side["leaf_order"], name
    assert hierarchy.leaves_list(Z).tolist() == side["leaf_order"], name

    heights = np.sort(Z[:, 2])
    for cut in side["cuts"]:
        k = cut["k"]
        # SciPy < 1.15 cannot return k >= n - 1 clusters with 'maxclust'
        # (scipy gh-12651, fixed by gh-21121), so those levels are only
        # checked through the equivalent distance threshold below.
        if k <= n - 2:
            got = hierarchy.fcluster(Z, k, criterion="maxclust")
            assert len(set(got.tolist())) == k, (name, k)
            assert same_partition(got, cut["labels"]), (name, "maxclust", k)
        # k clusters = every row up to the (n-k)-th smallest height applied
        # (heights of distinct nodes are distinct; all are > 0).
        threshold = heights[n - k - 1] if k < n else 0.0
        got = hierarchy.fcluster(Z, threshold, criterion="distance")
        assert same_partition(got, cut["labels"]), (name, "distance for k", k)
    for cut in side["height_cuts"]:
        got = hierarchy.fcluster(Z, cut["h"], criterion="distance")
        assert same_partition(got, cut["labels"]), (name, "distance", cut["h"])

    newick = parse_newick(open(os.path.join(work, side["newick"])).read())
    from_z = linkage_clusters(Z, n)
    if side["binary"]:
        assert set(newick) == set(from_z), name
    else:
        # The n-ary clusters are the linkage clusters that end a chain.
        assert set(newick) <= set(from_z), name
        assert len(newick) < len(from_z) or n - 1 == len(newick), name
    for leaves, height in newick.items():
        assert abs(height - from_z[leaves]) <= 1e-9 * (1 + abs(height)), (name, sorted(leaves))
    return side["binary"]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    subprocess.run([tool, work], check=True)
    names = json.load(open(os.path.join(work, "cases.json")))
    assert names, "the tool wrote no hierarchies"
    kinds = [check_case(work, name) for name in names]
    assert any(kinds) and not all(kinds), "expected binary and n-ary cases"
    print("scipy accepted %d linkage matrices" % len(names))


if __name__ == "__main__":
    main()
