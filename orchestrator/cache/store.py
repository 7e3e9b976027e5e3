"""The cache: values of ops, and of whole loops, kept on disk, keyed by what made them — never by where.

Policy. A value is stored under its key (``keys``: a hash of everything that
decides it, never of where it ran); a loop's entry holds its final states and
its metric series.

Entries. One file per key under ``entries/``: a NumPy ``.npz`` (no pickle)
holding the values and a header (the key, what made it, a SHA-256 of the
values' bytes). Written atomically; read back only if the header's key is the
file's and the checksum holds — a corrupted or foreign entry is ignored with a
warning and never loaded. ``index/<spec>.json`` keeps, per op, the parts of
its last key, so that a value computed again can say why: which parameter,
input, ``fn`` source or file changed, or that there was no entry.

State. A :class:`Cache` is a directory; this module keeps nothing in memory
between calls.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..atomic import write_bytes, write_text
from ..paths import CACHE_FOLDER
from ..plan.records import Plan
from ..spec.records import OpRef

FORMAT = 1


def default_directory(spec_dir: str) -> str:
    """A spec's cache directory when none is given: ``.orchestrate/cache`` beside it."""
    return os.path.join(spec_dir, CACHE_FOLDER)


class Cache:
    """A cache directory: ``entries/<key>.npz`` and ``index/<spec name>.json``."""

    def __init__(self, directory: str):
        self.directory = directory
        self.warnings: list[str] = []

    def _entry(self, key: str) -> str:
        return os.path.join(self.directory, "entries", key[:2], f"{key}.npz")

    def has(self, key: str) -> bool:
        return os.path.isfile(self._entry(key))

    def load(self, key: str, what: str) -> tuple[np.ndarray, ...] | None:
        """The values stored under ``key``, or None (a missing, corrupted or foreign entry: warned, not loaded)."""
        path = self._entry(key)
        if not os.path.isfile(path):
            return None
        try:
            header, arrays, intact = read_checked(path)
            values = tuple(arrays[f"v{i}"] for i in range(int(header["values"])))
        except Exception as exc:  # any unreadable file: it is not loaded, whatever went wrong
            self.warnings.append(f"cache entry for {what} is unreadable and was ignored ({type(exc).__name__}: "
                                 f"{exc}): {path}")
            return None
        if header.get("format") != FORMAT or header.get("key") != key:
            self.warnings.append(f"cache entry for {what} belongs to another key or format and was ignored: {path}")
            return None
        if not intact:
            self.warnings.append(f"cache entry for {what} does not match its checksum (corrupted) and was "
                                 f"ignored: {path}")
            return None
        return values

    def store(self, key: str, what: str, values: Sequence[Any]) -> None:
        arrays = {f"v{i}": np.asarray(v) for i, v in enumerate(values)}
        write_checked(self._entry(key), {"format": FORMAT, "key": key, "what": what, "values": len(arrays),
                                         "created": time.time(),
                                         "bytes": int(sum(a.nbytes for a in arrays.values()))}, arrays)

    def previous(self, spec_name: str) -> dict[str, dict[str, str]]:
        """The parts of the last key recorded for each op of this spec (by name)."""
        try:
            with open(os.path.join(self.directory, "index", f"{spec_name}.json"), encoding="utf-8") as handle:
                data = json.load(handle)
            return {str(k): {str(a): str(b) for a, b in v.items()} for k, v in data.items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def remember(self, spec_name: str, parts: Mapping[str, Mapping[str, str]]) -> None:
        index = self.previous(spec_name)
        index.update({k: dict(v) for k, v in parts.items()})
        os.makedirs(os.path.join(self.directory, "index"), exist_ok=True)
        write_text(os.path.join(self.directory, "index", f"{spec_name}.json"), json.dumps(index, indent=1))

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every entry's header (what made it, its size and age); unreadable ones say so."""
        root = os.path.join(self.directory, "entries")
        for folder, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                if name.startswith("."):  # a write under way (atomic_open's temporary): not an entry yet
                    continue
                path = os.path.join(folder, name)
                try:
                    with np.load(path, allow_pickle=False) as archive:
                        header = json.loads(str(archive["header"]))
                    size = os.path.getsize(path)
                except FileNotFoundError:  # cleared meanwhile
                    continue
                except Exception as exc:
                    header = {"key": name.removesuffix(".npz"), "what": f"unreadable ({type(exc).__name__})"}
                    size = os.path.getsize(path) if os.path.exists(path) else 0
                yield {**header, "path": path, "file_bytes": size}

    def clear(self) -> int:
        """Remove every entry; the number removed. The index stays: the next run can say what was cleared."""
        removed = 0
        for entry in list(self.entries()):
            os.unlink(entry["path"])
            removed += 1
        return removed


def write_checked(path: str, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """An npz of named arrays (no pickle) with a JSON header holding a SHA-256 of them, written atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_bytes(path, checked_bytes(header, arrays))


def checked_bytes(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """What :func:`write_checked` writes: the npz of ``arrays`` and of ``header`` with their SHA-256."""
    checked = {**header, "sha256": _checksum(list(arrays.values()))}
    contents: dict[str, Any] = {"header": np.array(json.dumps(checked)), **arrays}
    buffer = io.BytesIO()
    np.savez(buffer, **contents)
    return buffer.getvalue()


def read_checked(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray], bool]:
    """What :func:`write_checked` wrote: its header, its arrays, and whether they match the header's SHA-256.

    Raises on a file that cannot be read as such (the caller says so and does not use it)."""
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["header"]))
        arrays = {name: np.array(archive[name]) for name in archive.files if name != "header"}
    if not isinstance(header, dict):
        raise ValueError("its header is not a mapping")
    return header, arrays, header.get("sha256") == _checksum(list(arrays.values()))


def _checksum(values: Sequence[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for value in values:
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def ref_of(plan: Plan, name: str) -> list[OpRef]:
    """The refs that make up an op's value (one per output)."""
    outputs = plan.spec.op(name).outputs
    return [OpRef(name)] if outputs == 1 else [OpRef(name, i) for i in range(outputs)]
