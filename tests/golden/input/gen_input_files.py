#!/usr/bin/python3
"""Writes the input files tests/core/input_matrix_file_test.cc reads.

Every matrix is the 3 x 4 table v[r, c] = r * 4 + c (minus 5 for the signed
types, so negatives occur; modulo 2 for bool), written by numpy itself in
each dtype, byte order and memory order Dendro accepts, so the test can
check every value without a second copy of the expectations.

    /usr/bin/python3 tests/golden/input/gen_input_files.py
"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
base = np.arange(12).reshape(3, 4)


def out(name):
    return os.path.join(here, name)


for code in ["<f2", "<f4", "<f8", ">f4", ">f8", "|i1", "<i2", "<i4", "<i8", ">i8",
             "|u1", "<u2", "<u4", "<u8", "|b1"]:
    kind = np.dtype(code).kind
    values = base - 5 if kind == "i" else (base % 2 if kind == "b" else base)
    tag = code.replace("<", "le_").replace(">", "be_").replace("|", "")
    for order in ["C", "F"]:
        a = np.asarray(values, dtype=code, order=order)
        assert a.flags["F_CONTIGUOUS" if order == "F" else "C_CONTIGUOUS"]
        np.save(out(f"m_{tag}_{order}.npy"), a)

x = base.astype(np.float32)
np.savez(out("one.npz"), x=x)
np.savez(out("two.npz"), first=x, second=(x * 2).astype(np.float64))
np.savez_compressed(out("compressed.npz"), data=np.asfortranarray(x.astype(np.float64)))
np.savetxt(out("m.csv"), base, delimiter=",", header="a,b,c,d", comments="", fmt="%d")
np.savetxt(out("m.tsv"), base, delimiter="\t", fmt="%.1f")
np.savetxt(out("m.txt"), base)  # numpy's default: spaces, %.18e
np.save(out("three_d.npy"), np.zeros((2, 2, 2), np.float32))
np.save(out("complex.npy"), np.zeros((2, 2), np.complex64))
np.save(out("strings_matrix.npy"), np.array([["a", "b"], ["c", "d"]]))

# Labels: the same classes {cat, dog, emu} in every spelling.
names = np.array(["dog", "cat", "emu", "cat", "dog"])
np.save(out("y_unicode.npy"), names)
np.save(out("y_bytes.npy"), names.astype("S"))
np.save(out("y_float.npy"), np.array([1.0, 0.0, 2.0, 0.0, 1.0]))
np.save(out("y_half_float.npy"), np.array([1.5, 0.0], np.float16))
np.save(out("y_uint8_column.npy"), np.array([[1], [0], [2], [0], [1]], np.uint8))
np.save(out("y_two_columns.npy"), np.zeros((5, 2), np.int64))
np.savez(out("y.npz"), y=np.array([1, 0, 2, 0, 1], np.int16))
with open(out("y_names.txt"), "w") as f:
    f.write("\n".join(names) + "\n")
with open(out("y_header.csv"), "w") as f:
    f.write("label\n1\n0\n2\n0\n1\n")
