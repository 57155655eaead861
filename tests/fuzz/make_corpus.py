#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/).

npy:        small valid .npy files from NumPy itself (every dtype the reader
            takes, C and Fortran order, 1-D and 2-D, format versions 1 and 2)
            plus a truncated one;
tree:       hierarchy JSON documents in the format core/hierarchy/export.h
            describes (binary, n-ary, with names and point assignments);
model_load: a selector byte (which file of which saved model) and a mode
            byte, followed by a short payload, for every file; then, per
            model, damaged manifests (wrong format or version, a field
            missing, mistyped or implausible) and arrays of the wrong shape
            or dtype or with a header claiming a vast array;
upload:     small upload streams (whole, floats split across chunks, labels,
            a NaN across a boundary, short, labels too early);
jobspec:    a dataset shape and a JobSpec per method (protoc --encode).

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

# The files model_load_fuzz.cc saves, in its selector order (each model's
# files sorted by name); keep in step with its templates.
MODEL_FILES = (
    ["tneb_center.npy", "tneb_means.npy", "tneb_model.json", "tneb_scale.npy",
     "tneb_scales.npy", "tneb_weights.npy"] +
    ["ghhc_mean.npy", "ghhc_model.json", "ghhc_node_leaf.npy", "ghhc_node_parent.npy",
     "ghhc_nodes.npy", "ghhc_projection.npy"] +
    ["class_bases.npy", "class_counts.npy", "class_eigvals.npy", "class_means.npy",
     "class_rank.npy", "class_tail.npy", "hppca.json", "labels.npy", "point_leaf.npy",
     "super_bases.npy", "super_eigvals.npy", "super_means.npy", "super_stats.npy",
     "superclass_of.npy", "tree.json"])

for selector in range(len(MODEL_FILES)):
    write("model_load", f"replace_{selector}", bytes([selector, 0]) + b'{"format": 1}')
    write("model_load", f"mutate_{selector}", bytes([selector, 1, 40]) + b"\xff\x00\x7f\x80")


def model_seed(name, file, payload):
    write("model_load", name, bytes([MODEL_FILES.index(file), 0]) + payload)


# Manifests close to the saved ones (the fitted sizes differ), each with one
# kind of damage.
manifests = {
    "tneb_model.json": {"format": "dendro.tneb_model", "version": 1, "dim": 4, "leaves": 2,
                        "dof": [4.5, None], "original_component": [0, 1],
                        "height_offset": 1.0, "standardize": True},
    "ghhc_model.json": {"format": "dendro.ghhc_model", "version": 1, "dim": 4,
                        "internal_nodes": 8, "center": True, "point_norm": 0.9,
                        "projection_dim": 2},
    "hppca.json": {"format": "dendro.hppca", "version": 1, "dim": 4, "classes": 6,
                   "superclasses": 2, "q": 2, "r": 2,
                   "options": {"q": 2, "r": 2, "lambda": 0.01, "score": "mahalanobis",
                               "superclasses": 2, "raw_data_clustering": False,
                               "raw_samples_per_class": 20, "kmeans_iterations": 50,
                               "kmeans_restarts": 1, "seed": 0, "default_top_t": 5},
                   "stats": {"kmeans_iterations": 2}},
}
for file, doc in manifests.items():
    stem = file.split(".")[0]
    damaged = {
        "plausible": doc,
        "version_2": dict(doc, version=2),
        "format_other": dict(doc, format="dendro.other"),
        "dim_missing": {k: v for k, v in doc.items() if k != "dim"},
        "dim_float": dict(doc, dim=4.5),
        "dim_huge": dict(doc, dim=2**62),
        "dim_1e300": dict(doc, dim=1e300),
    }
    for what, d in damaged.items():
        model_seed(f"{stem}_{what}", file, json.dumps(d).encode())

# Arrays: a shape the loader does not expect, integers for floats (and the
# reverse), and a header claiming 2^62 elements over a few bytes.
# (Their own generator, so that the upload seeds below stay as they were.)
model_rng = np.random.RandomState(1)
vast = b"{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 2), }"
vast += b" " * (-(10 + len(vast) + 1) % 64) + b"\n"
vast = b"\x93NUMPY\x01\x00" + len(vast).to_bytes(2, "little") + vast + b"\x00" * 16
for file in MODEL_FILES:
    if not file.endswith(".npy"):
        continue
    stem = file[:-4]
    model_seed(f"{stem}_shape_3x5", file, npy_bytes(model_rng.randn(3, 5)))
    model_seed(f"{stem}_int64", file, npy_bytes(np.arange(6, dtype="<i8")))
    model_seed(f"{stem}_float32", file, npy_bytes(model_rng.randn(6).astype("<f4")))
    model_seed(f"{stem}_vast", file, vast)


# --- upload: [rows % 48, cols % 12, flags, max bytes / 32] then messages of
# (op % 4: 0/1 data, 2 labels, 3 finish; length; payload).
def upload_seed(rows, cols, has_labels, ops, max_units=255):
    b = bytes([rows - 1, cols - 1, 1 if has_labels else 0, max_units])
    for op, payload in ops:
        b += bytes([op, len(payload)]) + payload
    return b


x = rng.randn(3, 2).astype("<f4").tobytes()
y = np.arange(3, dtype="<i8").tobytes()
write("upload", "whole", upload_seed(3, 2, False, [(0, x), (3, b"")]))
write("upload", "split_floats", upload_seed(3, 2, False, [(0, x[:5]), (1, x[5:13]), (0, x[13:]),
                                                          (3, b"")]))
write("upload", "labels", upload_seed(3, 2, True, [(0, x), (2, y[:7]), (2, y[7:]), (3, b"")]))
nan = np.array([1.0, np.nan, 2.0, np.inf], dtype="<f4").tobytes()
write("upload", "nan_across_chunks", upload_seed(2, 2, False, [(0, nan[:6]), (0, nan[6:])]))
write("upload", "short", upload_seed(3, 2, False, [(0, x[:8]), (3, b"")]))
write("upload", "labels_early", upload_seed(3, 2, True, [(0, x[:8]), (2, y)]))


# --- jobspec: [rows u32, cols u16, has_labels] then a serialized JobSpec,
# encoded from text format by protoc.
def jobspec_seed(rows, cols, has_labels, text):
    import struct
    import subprocess
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")
    spec = subprocess.run(["protoc", f"--proto_path={root}", "--encode=dendro.v1.JobSpec",
                           "dendro/v1/dendro.proto"], input=text.encode(), capture_output=True,
                          check=True).stdout
    return struct.pack("<IH", rows - 1, cols - 1) + bytes([1 if has_labels else 0]) + spec


write("jobspec", "l2h", jobspec_seed(1000, 10, False,
                                     'dataset_id: "ds-1" model_name: "m" l2h { aggregation: "mean_of_means" }'))
write("jobspec", "l2h_names", jobspec_seed(50, 3, False,
                                           'model_name: "m" leaf_names: "a" leaf_names: "b" '
                                           'leaf_names: "c" l2h {}'))
write("jobspec", "tneb", jobspec_seed(2000, 8, False,
                                      "tneb { components: 30 dof: 1 restarts: 2 neighbors: 5 "
                                      "path_points: 50 standardize: true seed: 3 }"))
write("jobspec", "tneb_gaussian", jobspec_seed(500, 2, False, "tneb { gaussian: true learn_dof: true }"))
write("jobspec", "ghhc", jobspec_seed(10000, 64, False,
                                      'ghhc { internal_nodes: 64 learning_rate: 0.01 batch_size: 100 '
                                      'triples: 100000 neighbors: 5 margin: 0.1 projection_dim: 8 '
                                      'projection: "random" link: "softplus" }'))
write("jobspec", "hppca", jobspec_seed(5000, 32, True,
                                       "hppca { superclasses: 4 q: 10 r: 10 lambda: 0.01 "
                                       "default_top_t: 3 }"))
write("jobspec", "hppca_flat", jobspec_seed(100, 4, True, "hppca { superclasses: -1 }"))
write("jobspec", "hppca_add", jobspec_seed(100, 4, True,
                                           'hppca_add { base { name: "h" version: 2 } recluster: true }'))
write("jobspec", "none", jobspec_seed(10, 10, False, 'dataset_id: "ds-1"'))
