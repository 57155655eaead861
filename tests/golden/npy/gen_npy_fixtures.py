#!/usr/bin/python3
"""Writes the .npy fixtures for tests/core/io_npy_test.cc with numpy.

Run from anywhere with Debian's python (it has numpy):
    /usr/bin/python3 tests/golden/npy/gen_npy_fixtures.py
The files are committed; rerun only to change them. Values are small and
deterministic so the test can state them directly.
"""
import io
import os

import numpy as np
from numpy.lib import format as npformat

OUT = os.path.dirname(os.path.abspath(__file__))


def path(name):
    return os.path.join(OUT, name)


def save(name, arr):
    np.save(path(name), arr, allow_pickle=False)


def write_version(name, arr, version):
    with open(path(name), "wb") as f:
        npformat.write_array(f, arr, version=version, allow_pickle=False)


def write_header_only(name, dtype, shape):
    """Just the header numpy writes for `dtype`/`shape` (no data)."""
    d = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
    with open(path(name), "wb") as f:
        npformat.write_array_header_1_0(f, d)


def main():
    # Accepted files.
    f32_2d = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 4
    save("f32_2d.npy", f32_2d)                                   # (3, 4)
    save("f64_1d.npy", np.array([0.1, -2.5, 1e10, 3.25, -0.0]))  # '<f8'
    save("i32_1d.npy", np.array([7, -3, 0, 2**31 - 1, -2**31], dtype=np.int32))
    save("i64_1d.npy", np.array([2**53 + 1, -(2**62), 0, 42], dtype=np.int64))
    save("i64_2d.npy", np.arange(6, dtype=np.int64).reshape(2, 3) * -1000)
    save("f32_empty_2d.npy", np.zeros((0, 5), dtype=np.float32))
    save("f64_huge.npy", np.array([1.0, 1e300]))  # fits float64, not float32
    write_version("v2_f32_2d.npy", f32_2d, (2, 0))
    write_version("v3_f64_2d.npy", f32_2d.astype(np.float64), (3, 0))

    # Rejected files.
    save("fortran_f32.npy", np.asfortranarray(f32_2d))
    save("bigendian_f4.npy", f32_2d.astype(">f4"))
    save("f16.npy", np.array([1.0, 2.0], dtype=np.float16))
    save("u8.npy", np.array([1, 2, 3], dtype=np.uint8))
    save("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    save("f32_3d.npy", np.zeros((2, 3, 2), dtype=np.float32))
    save("f32_scalar.npy", np.float32(1.5))
    buf = io.BytesIO()
    np.save(buf, np.ones((10, 4), dtype=np.float32))
    raw = buf.getvalue()
    with open(path("truncated_f32.npy"), "wb") as f:  # 160 data bytes -> 156
        f.write(raw[:-4])
    with open(path("trailing_f32.npy"), "wb") as f:   # 160 data bytes -> 164
        f.write(raw + b"\0\0\0\0")

    # Headers numpy writes, to compare MakeNpyHeader with byte for byte.
    write_header_only("hdr_f4_123456789x7.bin", "<f4", (123456789, 7))
    write_header_only("hdr_f8_0.bin", "<f8", (0,))
    write_header_only("hdr_i4_9223372036854775807.bin", "<i4", (2**63 - 1,))
    write_header_only("hdr_i8_1x1.bin", "<i8", (1, 1))


if __name__ == "__main__":
    main()
