"""What a Dask task of one op carries to its worker: the op's payload, small and quick to pickle."""

from __future__ import annotations

from dataclasses import dataclass, fields
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


def _restore_op_task(values: tuple[Any, ...]) -> OpTask:
    task = object.__new__(OpTask)
    task.__dict__.update(zip(_OP_TASK_FIELDS, values + _OP_TASK_DEFAULTS[len(values):]))
    return task

