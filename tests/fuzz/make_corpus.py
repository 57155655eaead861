#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/).

npy:        small valid .npy files from NumPy itself (every dtype the reader
            takes, C and Fortran order, 1-D and 2-D, format versions 1 and 2)
            plus a truncated one;
tree:       hierarchy JSON documents in the format core/hierarchy/export.h
            describes (binary, n-ary, with names and point assignments);
model_load: a selector byte (which file of which saved model) and a mode
            byte, followed by a short payload.

Usage: make_corpus.py [OUT_DIR]   (default: the corpus directory beside it)
"""
import io
import json
import os
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")


def write(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy_bytes(a, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, a)
    else:
        np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


rng = np.random.RandomState(0)
write("npy", "f32_2d", npy_bytes(rng.randn(3, 4).astype("<f4")))
write("npy", "f64_2d", npy_bytes(rng.randn(2, 5)))
write("npy", "f32_fortran", npy_bytes(np.asfortranarray(rng.randn(3, 2).astype("<f4"))))
write("npy", "i64_1d", npy_bytes(np.arange(7, dtype="<i8")))
write("npy", "i32_column", npy_bytes(np.arange(5, dtype="<i4").reshape(5, 1)))
write("npy", "f32_v2", npy_bytes(rng.randn(2, 2).astype("<f4"), version=(2, 0)))
write("npy", "f32_big_endian", npy_bytes(rng.randn(2, 3).astype(">f4")))
write("npy", "truncated", npy_bytes(rng.randn(4, 4).astype("<f4"))[:100])


def tree_doc(num_leaves, nodes, **extra):
    doc = {"format": "dendro.hierarchy", "version": 1, "num_leaves": num_leaves,
           "metadata": {"method": "seed"},
           "nodes": [{"id": i, "parent": p, "height": h, "children": c}
                     for i, (p, h, c) in enumerate(nodes)]}
    doc.update(extra)
    return json.dumps(doc).encode()


# ((0, 1), 2)
binary = [(3, 0, []), (3, 0, []), (4, 0, []), (4, 1.0, [0, 1]), (-1, 2.0, [3, 2])]
write("tree", "binary", tree_doc(3, binary))
write("tree", "binary_named", tree_doc(3, binary, leaf_names=["a", "b c", "O'd"],
                                       point_leaf=[0, 2, 1, 1]))
# A root with four children, one of them internal.
nary = [(4, 0, []), (4, 0, []), (5, 0, []), (5, 0, []), (5, 1.0, [0, 1]),
        (-1, 3.0, [4, 2, 3])]
write("tree", "nary", tree_doc(4, nary))
write("tree", "single_leaf", tree_doc(1, [(-1, 0, [])]))

for selector in range(12):
    write("model_load", f"replace_{selector}", bytes([selector, 0]) + b'{"format": 1}')
    write("model_load", f"mutate_{selector}", bytes([selector, 1, 40]) + b"\xff\x00\x7f\x80")
