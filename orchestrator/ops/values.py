"""What an op's output is known to be before it runs: shape and dtype (shape inference); and what a value is
once it ran: a sweep copy's failure in its place (:class:`CopyFailed`), its bytes. No state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ValueInfo:
    """Inferred shape and dtype of one output; ``None`` where unknown."""

    shape: tuple[int, ...] | None
    dtype: str | None

    @property
    def nbytes(self) -> int | None:
        if self.shape is None or self.dtype is None:
            return None
        n = 1
        for dim in self.shape:
            n *= dim
        return n * _itemsize(self.dtype)

    def describe(self) -> str:
        shape = "?" if self.shape is None else list(self.shape)
        return f"{shape} {self.dtype or '?'}"


_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
             "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
             "complex64": 8, "complex128": 16}


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


@dataclass(frozen=True)
class CopyFailed:
    """What a sweep copy's op gives when it, or an op of the copy before it, failed: the copy is recorded as
    failed and the sweep goes on. Only the sweep's own gathering ops (select, pick, gather, combine, table)
    read one: a failed copy is never selected, its gathered row is NaN, a combine leaves it out."""

    op: str  # the op that failed
    device: str
    error: str


def failure_in(value: object) -> CopyFailed | None:
    """The CopyFailed that ``value`` is (or that an output of a multi-output op's tuple is), else None."""
    if isinstance(value, CopyFailed):
        return value
    if isinstance(value, tuple):
        return next((v for v in value if isinstance(v, CopyFailed)), None)
    return None


def first_failed(values: tuple[object, ...]) -> CopyFailed | None:
    """The first of an op's inputs that is a CopyFailed, else None (every op of every step asks: a plain loop)."""
    for value in values:
        if isinstance(value, CopyFailed):
            return value
    return None


def unless_failed(raw: tuple[Any, ...], n: int, copies_of: tuple[int, ...]) -> tuple[Any, ...]:
    """A sweep's gathering op's ``n`` inputs without its markers (``raw`` past them; ``copies_of``: the copy of
    each), every input of a copy whose marker failed that failure: a copy that failed after its metric was made
    is never selected, gathered or combined."""
    failed: dict[int, CopyFailed] = {}
    for marker, copy in zip(raw[n:], copies_of[n:]):
        found = failure_in(marker)
        if found is not None:
            failed.setdefault(copy, found)
    return tuple(x if isinstance(x, CopyFailed) else failed.get(copy, x) for x, copy in zip(raw[:n], copies_of))


def nbytes_of(value: Any) -> int:
    """The bytes of an op's value (an array, or a tuple of them)."""
    if isinstance(value, tuple):
        return sum(nbytes_of(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def without_failed(values: tuple[object, ...]) -> tuple[object, ...]:
    """The values of the copies that did not fail."""
    return tuple(v for v in values if not isinstance(v, CopyFailed))
