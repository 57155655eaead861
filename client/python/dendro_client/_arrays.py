"""Conversion and client-side checks of the matrices sent to dendrod."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple, Union

import numpy as np

ArrayLike = Union[np.ndarray, "os.PathLike[str]", str]


def is_dataset_id(value: Any) -> bool:
    """True for a string naming a dataset ("ds-…") rather than an existing file."""
    return isinstance(value, str) and value.startswith("ds-") and not os.path.exists(value)


def load_matrix(data: Any, what: str = "data") -> Tuple[np.ndarray, Optional[str]]:
    """A 2-D float32 C-contiguous matrix from an array or a .npy path.

    Returns the matrix and, for a path, its stem (a default name). Raises
    ValueError for a non-2-D or non-numeric input, or for a NaN or infinity
    (naming the first one's row and column), before anything is sent.
    """
    stem = None
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if path.suffix.lower() != ".npy":
            raise ValueError(f"{what}: {path} is not a .npy file")
        data = np.load(path, mmap_mode="r", allow_pickle=False)
        stem = path.stem
        what = str(path)
    array = np.asarray(data)
    if array.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (rows x columns), got shape "
                         f"{array.shape}")
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"{what}: the matrix is empty (shape {array.shape})")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{what}: expected a float32/float64 array, got dtype {array.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        matrix = np.ascontiguousarray(array, dtype="<f4")
    check_finite(matrix, what)
    return matrix, stem


def check_finite(matrix: np.ndarray, what: str = "data") -> None:
    """Raises ValueError naming the first non-finite entry's row and column.

    The check is on the float32 values actually sent, so a float64 value too
    large for float32 is reported as well.
    """
    finite = np.isfinite(matrix)
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        raise ValueError(f"{what}: row {row}, column {col} is {matrix[row, col]} "
                         "(every value must be finite)")


def load_labels(labels: Any, rows: int, what: str = "labels") -> np.ndarray:
    """Labels as little-endian int64, one per row, from an array or a .npy path."""
    if isinstance(labels, (str, os.PathLike)):
        labels = np.load(Path(labels), allow_pickle=False)
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array, got shape {array.shape}")
    if len(array) != rows:
        raise ValueError(f"{what}: {len(array)} labels for {rows} rows")
    if not np.issubdtype(array.dtype, np.integer):
        if not np.issubdtype(array.dtype, np.floating) or not np.all(array == np.round(array)):
            raise ValueError(f"{what}: expected integer labels, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype="<i8")


def byte_chunks(matrix: np.ndarray, chunk_bytes: int) -> Iterator[bytes]:
    """The matrix's bytes in pieces of at most chunk_bytes, without one big copy."""
    flat = matrix.reshape(-1).view(np.uint8)
    for start in range(0, flat.size, chunk_bytes):
        yield flat[start:start + chunk_bytes].tobytes()


def row_batches(matrix: np.ndarray, max_bytes: int) -> Iterator[np.ndarray]:
    """Consecutive row blocks whose float32 data fits in max_bytes (at least one row)."""
    rows_per = max(1, max_bytes // (4 * matrix.shape[1]))
    for start in range(0, matrix.shape[0], rows_per):
        yield matrix[start:start + rows_per]
