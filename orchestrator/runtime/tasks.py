"""What a Dask task of one op carries to its worker: the op's payload, small and quick to pickle.

An op's payload pickles as its values in field order, its usually-default tail
left out. A task of many ops (a device partition, a loop's window) carries its
ops as columns instead (:func:`pack_ops`): a field that every op has the same
value for is written once, the others as one plain tuple each, which pickle
writes and reads at C speed, without a Python call per op. No state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import repeat
from operator import attrgetter, is_
from typing import Any, Mapping


@dataclass(frozen=True)
class OpTask:
    """Everything a worker needs to run one op (pickled into the graph, once per task)."""

    name: str
    kind: str
    params: Mapping[str, Any]
    n_inputs: int
    run: str = ""  # the run token: events of other runs on a kept-alive cluster are ignored
    step: int = 0
    input_keys: tuple[str, ...] | None = None
    timeout: float | None = None
    log: bool = False
    base_dir: str = ""  # where relative paths and user modules are found (only ops that need it get it)
    outputs: int = 1
    input_index: tuple[int | None, ...] = ()  # per input: which output of a tuple it reads, in place
    # "copy": an op of a sweep's copy (it fails alone: a CopyFailed goes on in its place); "gather": a
    # sweep's op that reads every copy (select, pick, gather, combine, table) and reads a CopyFailed
    copies: str = ""
    stream: tuple[int, ...] = ()  # the copy of each replicate and sweep around the op: its random stream's key
    # a sweep's gathering op: the copy of each input, then of each marker after them (a copy's last op, or
    # what copy_failed made of it beside it): an input of a copy whose marker is a CopyFailed is that CopyFailed
    copies_of: tuple[int, ...] = ()
    retries: int = 0  # with ``retry_on``: how many times an exception of those types runs the op again, in place
    retry_on: tuple[str, ...] = ()  # ``run.retry_on``: the exception types worth retrying (Dask then retries none)

    @staticmethod
    def from_values(*values: Any) -> OpTask:
        """An OpTask from its fields in order, without the frozen dataclass's checks (compile makes 100k)."""
        return _restore_op_task(values)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The client, the scheduler and the worker each pickle or unpickle this once per task: positional
        # values without field names, the usually-default tail dropped, and no __init__ on the way back
        # (a tiny op's payload: 115 bytes instead of 324, and a few microseconds less at every hop).
        head = (self.name, self.kind, self.params, self.n_inputs, self.run, self.step)
        tail = (self.input_keys, self.timeout, self.log, self.base_dir, self.outputs, self.input_index, self.copies,
                self.stream, self.copies_of, self.retries, self.retry_on)
        return _restore_op_task, (head if tail == _OP_TASK_DEFAULT_TAIL else head + tail,)


_OP_TASK_FIELDS = tuple(f.name for f in fields(OpTask))
_OP_TASK_DEFAULTS = tuple(f.default for f in fields(OpTask))
_OP_TASK_DEFAULT_TAIL = _OP_TASK_DEFAULTS[6:]
_op_task_values = attrgetter(*_OP_TASK_FIELDS)


def _restore_op_task(values: tuple[Any, ...]) -> OpTask:
    task = object.__new__(OpTask)
    task.__dict__.update(zip(_OP_TASK_FIELDS, values + _OP_TASK_DEFAULTS[len(values):]))
    return task


# A field whose value is the same in every op of a program is kept once: by identity (one run token,
# one ``()``, one default), or by value where equal values are interchangeable — never a float or a
# container, where ``==`` would merge 0.0 with -0.0, 1 with 1.0, or two dicts a later op might tell apart.
_INTERCHANGEABLE = (str, int, bool, type(None))


def pack_ops(ops: Sequence[OpTask]) -> tuple[int, tuple[tuple[bool, Any], ...]]:
    """Many ops' fields as columns, each field kept once where every op has the same value.

    A partition or window carries thousands of ops whose run token, kind, defaults and most settings
    repeat: as columns, pickle writes plain tuples at C speed with no call per op, and the repeats once.
    """
    return pack_rows(list(map(_op_task_values, ops)))  # (C speed: no Python frame per op)


def pack_rows(rows: Sequence[tuple[Any, ...]]) -> tuple[int, tuple[tuple[bool, Any], ...]]:
    """:func:`pack_ops` of the ops whose values, in field order, are ``rows`` (without making the ops)."""
    if not rows:
        return 0, tuple((True, d) for d in _OP_TASK_DEFAULTS)
    columns = []
    for values in zip(*rows):
        first = values[0]
        same = all(map(is_, values, repeat(first))) or (
            type(first) in _INTERCHANGEABLE and set(map(type, values)) == {type(first)}
            and values.count(first) == len(values))
        columns.append((True, first) if same else (False, values))
    return len(rows), tuple(columns)


def unpack_ops(packed: tuple[int, tuple[tuple[bool, Any], ...]]) -> tuple[OpTask, ...]:
    """The ops :func:`pack_ops` packed, equal field by field (no ``__init__``: a worker builds thousands)."""
    n, columns = packed
    rows = zip(*[repeat(value, n) if same else value for same, value in columns])
    ops = list(map(object.__new__, repeat(OpTask, n)))
    for _ in map(dict.update, map(vars, ops), map(zip, repeat(_OP_TASK_FIELDS), rows)):  # (C speed, as above)
        pass
    return tuple(ops)
