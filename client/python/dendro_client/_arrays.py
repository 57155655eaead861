"""Conversion and client-side checks of the matrices sent to dendrod."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple, Union

import numpy as np

ArrayLike = Union[np.ndarray, "os.PathLike[str]", str]


def is_dataset_id(value: Any) -> bool:
    """True for a string naming a dataset ("ds-…") rather than an existing file."""
    return isinstance(value, str) and value.startswith("ds-") and not os.path.exists(value)


def _only_array(archive: Any, path: Path) -> np.ndarray:
    """The one array of an .npz archive (several are refused, named)."""
    if len(archive.files) != 1:
        raise ValueError(f"{path}: holds {len(archive.files)} arrays "
                         f"({', '.join(archive.files)}); pass the array itself")
    return archive[archive.files[0]]


def _read_matrix_file(path: Path) -> np.ndarray:
    """A .npy (mapped), .npz (its only array) or numeric .csv/.tsv/.txt file."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path, mmap_mode="r", allow_pickle=False)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return _only_array(archive, path)
    if suffix in (".csv", ".tsv", ".txt"):
        with open(path) as f:
            first = f.readline()
        delimiter = "," if suffix == ".csv" else ("\t" if suffix == ".tsv" or "\t" in first
                                                  else ("," if "," in first else None))
        fields = [x.strip().strip('"') for x in first.split(delimiter)]
        try:
            [float(x) for x in fields]
            skip = 0
        except ValueError:
            skip = 1  # a header line
        return np.loadtxt(path, delimiter=delimiter, skiprows=skip, dtype=np.float64, ndmin=2)
    raise ValueError(f"{path}: unrecognised format; Dendro reads .npy, .npz, .csv, .tsv "
                     "and .txt files")


def load_matrix(data: Any, what: str = "data") -> Tuple[np.ndarray, Optional[str]]:
    """A 2-D float32 C-contiguous matrix from an array or a file path (.npy,
    .npz, .csv/.tsv/.txt: the formats the CLI reads).

    Returns the matrix and, for a path, its stem (a default name). Raises
    ValueError for a non-2-D or non-numeric input, or for a NaN or infinity
    (naming the first one's row and column), before anything is sent.
    """
    stem = None
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        data = _read_matrix_file(path)
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


def _read_label_array(labels: Any) -> np.ndarray:
    if isinstance(labels, (str, os.PathLike)):
        path = Path(labels)
        if path.suffix.lower() in (".txt", ".csv", ".tsv"):
            lines = [line.strip() for line in path.read_text().splitlines()]
            return np.asarray([line for line in lines if line])
        labels = np.load(path, allow_pickle=False)
        if isinstance(labels, np.lib.npyio.NpzFile):
            with labels as archive:
                labels = _only_array(archive, path)
    return np.asarray(labels)


def label_codes(labels: Any, rows: Optional[int],
                what: str = "labels") -> Tuple[np.ndarray, Optional[List[str]]]:
    """Labels as little-endian int64, one per row, and the class names when
    they were strings (numbered in sorted order, as the CLI numbers them).

    Integers and whole-valued floats keep their values (names: None).
    """
    array = _read_label_array(labels)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array, got shape {array.shape}")
    if rows is not None and len(array) != rows:
        raise ValueError(f"{what}: {len(array)} labels for {rows} rows")
    if array.dtype.kind in "USO":
        strings = array.astype(str)
        if np.any(strings == ""):
            raise ValueError(f"{what}: the label at row {int(np.argmax(strings == ''))} is empty")
        names, ids = np.unique(strings, return_inverse=True)
        return np.ascontiguousarray(ids, dtype="<i8"), [str(n) for n in names]
    if array.dtype.kind == "b":
        array = array.astype(np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        if not np.issubdtype(array.dtype, np.floating) or not np.all(array == np.round(array)):
            raise ValueError(f"{what}: labels are integers, whole-valued floats or strings; "
                             f"got dtype {array.dtype} with fractions")
    return np.ascontiguousarray(array, dtype="<i8"), None


def load_labels(labels: Any, rows: int, what: str = "labels") -> np.ndarray:
    """Labels as little-endian int64 (strings numbered in sorted order)."""
    return label_codes(labels, rows, what)[0]


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
