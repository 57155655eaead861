#!/usr/bin/python3
"""How far two L2H trees share their merge order.

  /usr/bin/python3 tests/bench/l2h_merge_order.py A.json B.json

A and B are Dendro hierarchy JSON files over the same leaves (e.g. `dendro
l2h base.npy --out A.json` and `dendro l2h all.npy --out B.json`). L2H gives
merge t the height t + 1, so the internal nodes sorted by height are the
merges in the order the algorithm made them; a merge is identified by the
leaf sets of the two groups it joins. Prints the first step at which the
two orders differ (or that they never do) and how many merges (as pairs of
leaf sets) the two trees share at any step.
"""
import json
import sys


def merges(path):
    tree = json.load(open(path))
    nodes = tree["nodes"]
    leaves = {}

    def leaf_set(i):
        if i not in leaves:
            children = nodes[i]["children"]
            leaves[i] = (frozenset([i]) if not children
                         else frozenset().union(*(leaf_set(c) for c in children)))
        return leaves[i]

    internal = sorted((n for n in nodes if n["children"]), key=lambda n: n["height"])
    return [frozenset(leaf_set(c) for c in n["children"]) for n in internal]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: l2h_merge_order.py A.json B.json")
    a, b = merges(sys.argv[1]), merges(sys.argv[2])
    first = next((t for t, (x, y) in enumerate(zip(a, b)) if x != y), None)
    where = "never" if first is None else f"at step {first}"
    print(f"{len(a)} and {len(b)} merges; the orders first differ {where}; "
          f"{len(set(a) & set(b))} merges are in both trees")


if __name__ == "__main__":
    main()
