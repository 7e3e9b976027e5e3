"""Compact frames: a step's few small values as raw bytes behind a short header, not as a pickle.

Why. A loop window sends, every step, a handful of values of a few bytes
each (a gradient of 3 floats, a loss). Pickling ``[(run, tag, value), ...]``
walks NumPy's reduce protocol for every array and unpickling rebuilds each
through ``numpy.core.multiarray._reconstruct``: per value that costs more
than the arithmetic of the step. Here a plain array or NumPy scalar is its
dtype string, its shape and its bytes, read back with ``numpy.frombuffer``.

Policy.
* Only values that come back bitwise equal and of the same type take this
  path: ``numpy.ndarray`` itself (no subclass) and NumPy scalars whose dtype
  is fully named by its ``dtype.str`` (booleans, integers, floats, complex,
  datetimes, fixed-width strings; not objects, not records); an array that
  is Fortran-ordered and not C-ordered keeps its order through a pickle.
  Every other value of the frame is pickled alone, inside the frame.
* A frame is compact only up to :data:`COMPACT_BYTES` (the receiver refuses
  more before allocating); a bigger frame is :mod:`.frames`' pickle with its
  buffers out of band, which copies nothing.
* All values of a compact frame belong to one run (a window sends its own).
* Received arrays own their memory (copied out of the frame's buffer):
  aligned and writeable, as the pickle path gives them.

State: the dtypes already checked to survive their ``dtype.str`` (a few per
process).
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Sequence

import numpy as np

COMPACT_BYTES = 1 << 16  # the most a compact frame's body holds
MAX_DIMS = 64  # NumPy's own limit
_RUN = struct.Struct("!HI")  # run name length, item count
_ITEM = struct.Struct("!qqHB")  # loop, step, ref length, what the value is
_ARRAY = struct.Struct("!BB")  # dtype string length, dimensions
_PICKLED_LEN = struct.Struct("!I")
ARRAY, SCALAR, PICKLED = 0, 1, 2
_KINDS = frozenset("biufcmMSU")
_DTYPES: dict[np.dtype[Any], bytes] = {}  # dtype -> its dtype.str encoded, or b"" when that does not name it


def _dtype_name(dtype: np.dtype[Any]) -> bytes:
    name = _DTYPES.get(dtype)
    if name is None:
        name = dtype.str.encode() if dtype.kind in _KINDS and np.dtype(dtype.str) == dtype else b""
        _DTYPES[dtype] = name
    return name


def _raw(value: Any) -> tuple[int, bytes, tuple[int, ...], bytes] | None:
    """(ARRAY or SCALAR, dtype name, shape, bytes in C order) of a value that takes the raw path, or None."""
    kind = type(value)
    if kind is np.ndarray:
        if value.flags.f_contiguous and not value.flags.c_contiguous:
            return None
        which = ARRAY
    elif isinstance(value, np.generic) and kind is value.dtype.type:
        which = SCALAR
    else:
        return None
    name = _dtype_name(value.dtype)
    if not name or value.nbytes > COMPACT_BYTES or value.ndim > MAX_DIMS:
        return None
    return which, name, value.shape, value.tobytes()


def pack(items: Sequence[tuple[str, Sequence[Any], Any]]) -> bytes | None:
    """The compact body of ``[(run, tag, value), ...]``, or None when it is not a compact frame's."""
    if not items:
        return None
    run = items[0][0]
    encoded = run.encode()
    parts = [_RUN.pack(len(encoded), len(items)), encoded]
    size = len(parts[0]) + len(encoded)
    for owner, (loop, step, ref), value in items:
        if owner != run:
            return None
        name = str(ref).encode()
        raw = _raw(value)
        if raw is None:
            if isinstance(getattr(value, "nbytes", None), int) and value.nbytes > COMPACT_BYTES:
                return None  # a big array of another kind (Fortran order, a subclass): not pickled twice
            data = pickle.dumps(value, protocol=5)
            parts += [_ITEM.pack(loop, step, len(name), PICKLED), name, _PICKLED_LEN.pack(len(data)), data]
            size += _ITEM.size + len(name) + _PICKLED_LEN.size + len(data)
        else:
            which, dtype, shape, data = raw
            dims = _dims(len(shape)).pack(*shape)
            parts += [_ITEM.pack(loop, step, len(name), which), name, _ARRAY.pack(len(dtype), len(shape)), dtype,
                      dims, data]
            size += _ITEM.size + len(name) + _ARRAY.size + len(dtype) + len(dims) + len(data)
        if size > COMPACT_BYTES:
            return None
    return b"".join(parts)


def unpack(body: bytearray) -> list[tuple[str, tuple[int, int, str], Any]]:
    """The items of a compact body; raises (ValueError, struct.error, ...) on one that is not well formed."""
    view = memoryview(body)
    size, count = _RUN.unpack_from(view, 0)
    at = _RUN.size + size
    run = bytes(view[_RUN.size:at]).decode()
    if count * _ITEM.size > len(body):
        raise ValueError(f"{count:,} items cannot fit in {len(body):,} bytes")
    items = []
    for _ in range(count):
        loop, step, size, which = _ITEM.unpack_from(view, at)
        at += _ITEM.size
        ref = bytes(view[at:at + size]).decode()
        at += size
        value, at = _pickled(view, at) if which == PICKLED else _array(view, at, which)
        items.append((run, (loop, step, ref), value))
    if at != len(body):
        raise ValueError(f"{len(body) - at:,} bytes left over after the last item")
    return items


def _pickled(view: memoryview, at: int) -> tuple[Any, int]:
    (size,) = _PICKLED_LEN.unpack_from(view, at)
    at += _PICKLED_LEN.size
    if at + size > len(view):
        raise ValueError("a pickled value runs past the frame's end")
    return pickle.loads(view[at:at + size]), at + size


def _array(view: memoryview, at: int, which: int) -> tuple[Any, int]:
    if which not in (ARRAY, SCALAR):
        raise ValueError(f"unknown value kind {which}")
    size, ndim = _ARRAY.unpack_from(view, at)
    at += _ARRAY.size
    dtype = _dtype(bytes(view[at:at + size]))
    at += size
    if ndim > MAX_DIMS or (which == SCALAR and ndim):
        raise ValueError(f"a value of dtype {dtype} and {ndim} dimensions is not sent compact")
    shape = _dims(ndim).unpack_from(view, at)
    at += 8 * ndim
    array = np.empty(shape, dtype)  # raises for a shape no memory holds (a proven peer's bad frame)
    end = at + array.nbytes
    if end > len(view):
        raise ValueError("an array runs past the frame's end")
    if dtype.kind in "mM":  # no buffer protocol for datetimes: NumPy copies them itself
        array[...] = np.frombuffer(view[at:end], dtype).reshape(shape)
    elif array.nbytes:
        array.data.cast("B")[:] = view[at:end]
    return (array[()] if which == SCALAR else array), end


_RECEIVED: dict[bytes, np.dtype[Any]] = {}  # dtype names read, parsed once (a few per process)


def _dtype(name: bytes) -> np.dtype[Any]:
    dtype = _RECEIVED.get(name)
    if dtype is None:
        dtype = np.dtype(name.decode())
        if dtype.kind not in _KINDS:
            raise ValueError(f"a value of dtype {dtype} is not sent compact")
        if len(_RECEIVED) < 256:
            _RECEIVED[name] = dtype
    return dtype


_DIMS: dict[int, struct.Struct] = {}


def _dims(ndim: int) -> struct.Struct:
    found = _DIMS.get(ndim)
    if found is None:
        found = _DIMS[ndim] = struct.Struct(f"!{ndim}Q")
    return found
