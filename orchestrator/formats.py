"""File formats: how an array is read from and written to a file, chosen by name or suffix.

One registry, :data:`FORMATS`, serves every place a file meets an array:
``load`` ops read with it, ``save`` ops and the spec's ``outputs`` write with
it, and validation asks it which suffixes exist, which formats an op may use
and how many dimensions a format holds. A format is picked by the op's
``format:`` parameter, else by the file's suffix.

How to add one: write a :class:`FileFormat` (a name, its suffixes, a reader
and a writer) and add it to :data:`FORMATS`; set ``loadable``/``saveable``
for the ops that may use it. Nothing else changes (docs/extending.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any, Callable, Mapping

import numpy as np

Reader = Callable[[str, Mapping[str, Any]], np.ndarray]
Writer = Callable[[IO[bytes], np.ndarray], None]


@dataclass(frozen=True)
class FileFormat:
    """One file format for arrays."""

    name: str
    suffixes: tuple[str, ...]
    read: Reader | None  # None: cannot be read by a load op
    write: Writer
    max_ndim: int | None = None  # the most dimensions the format holds (CSV: a table)
    saveable: bool = True  # a save op may write it (outputs may use any format)
    description: str = ""


def _read_npy(path: str, params: Mapping[str, Any]) -> np.ndarray:
    array = np.load(path, allow_pickle=False)
    if not isinstance(array, np.ndarray):  # an .npz archive opened through a .npy name
        raise ValueError(f"{path} is not a .npy file (it holds several arrays)")
    dtype = params.get("dtype")
    return array.astype(dtype) if dtype else array


def _read_csv(path: str, params: Mapping[str, Any]) -> np.ndarray:
    return np.loadtxt(path, delimiter=params.get("delimiter", ","), skiprows=int(params.get("header", 0)),
                      dtype=params.get("dtype") or "float64", ndmin=1)


def _write_npy(handle: IO[bytes], value: np.ndarray) -> None:
    np.save(handle, value, allow_pickle=False)


def _write_npz(handle: IO[bytes], value: np.ndarray) -> None:
    np.savez(handle, value=value)


def _write_csv(handle: IO[bytes], value: np.ndarray) -> None:
    np.savetxt(handle, np.atleast_1d(value), delimiter=",")


FORMATS: Mapping[str, FileFormat] = {f.name: f for f in (
    FileFormat("npy", (".npy",), _read_npy, _write_npy, description="NumPy's binary format, any shape"),
    FileFormat("npz", (".npz",), None, _write_npz, saveable=False,
               description="a NumPy archive holding the array as 'value'"),
    FileFormat("csv", (".csv",), _read_csv, _write_csv, max_ndim=2,
               description="comma-separated text, one row per line (at most 2 dimensions)"),
)}
"""Every known format by name (``load``/``save`` ops take these names as ``format:``)."""


def suffixes(predicate: Callable[[FileFormat], bool] = lambda f: True) -> tuple[str, ...]:
    """The suffixes of the formats ``predicate`` accepts, in registry order."""
    return tuple(s for f in FORMATS.values() if predicate(f) for s in f.suffixes)


def by_suffix(path: str) -> FileFormat | None:
    """The format a file name's suffix names, or None."""
    lowered = path.lower()
    return next((f for f in FORMATS.values() if lowered.endswith(f.suffixes)), None)


def chosen(path: str, name: str | None = None) -> FileFormat | None:
    """The format of ``path``: the one named, else the suffix's, else None."""
    if name:
        return FORMATS.get(name)
    return by_suffix(path)


def read_array(path: str, params: Mapping[str, Any]) -> np.ndarray:
    """Read ``path`` with the format ``params['format']`` or its suffix (``load`` ops)."""
    fmt = chosen(path, params.get("format")) or FORMATS["npy"]
    if fmt.read is None:
        raise ValueError(f"the {fmt.name} format cannot be loaded; use {', '.join(suffixes(lambda f: f.read is not None))}")
    return fmt.read(path, params)


def write_array(handle: IO[bytes], path: str, value: np.ndarray, name: str | None = None) -> None:
    """Write ``value`` to an open binary ``handle`` in the format of ``path`` (or the one named)."""
    fmt = chosen(path, name) or FORMATS["npy"]
    if fmt.max_ndim is not None and value.ndim > fmt.max_ndim:
        raise ValueError(f"cannot write a {value.ndim}-D array to {fmt.name.upper()} file {os.path.basename(path)}; "
                         f"it holds at most {fmt.max_ndim} dimensions (use .npy)")
    fmt.write(handle, value)
