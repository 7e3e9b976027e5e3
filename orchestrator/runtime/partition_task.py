"""A device partition on a worker: its ops one after the other, in one Dask task.

Each op runs exactly as :func:`~orchestrator.runtime.device.run_op` would run
it alone — charged to the device's memory at its own allocation, timed out
on its own ``timeout``, recorded, logged, and failing with an error naming
the op and the device — so nothing a user sees per op is lost. Values the
partition's later ops no longer need are dropped after their last reader
(the simulated GPU gives their memory back then, as the memory planner
assumes); what other partitions read is returned, alone or as a tuple.

A partition of a big plan carries thousands of ops, and its task is pickled
on the client, unpickled and pickled again by the scheduler, and unpickled on
the worker. So it pickles as its label and one bytes object, its program (the
ops as columns, :func:`~.tasks.pack_ops`, and the wiring), made once on the
client; the scheduler copies those bytes as they are, and the worker reads
them back once, on first use. Compile packs the ops' values as columns
straight away (:meth:`PartitionTask.from_rows`), making no OpTask at all.
State: a task keeps its packed columns and, once pickled or read back, its
program bytes (to pickle again as they are); its ops are made when first read.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .device import _runtime, execute
from .tasks import OpTask, pack_ops, pack_rows, unpack_ops

Wire = tuple[int, int]  # (slot, element): slot of a value (arguments first, then ops); element of a tuple or -1


@dataclass(frozen=True)
class PartitionTask:
    """Everything a worker needs to run one partition (pickled once per task)."""

    label: str  # first op and count, for messages
    ops: tuple[OpTask, ...]  # in run order
    inputs: tuple[tuple[Wire, ...], ...]  # per op: where each data input comes from
    frees: tuple[tuple[int, ...], ...]  # per op: slots no later op of the partition reads
    publish: tuple[Wire, ...]  # the values returned: one (returned as is), several (a tuple) or none
    n_args: int  # leading task arguments that are values; the rest are control tokens
    arg_index: tuple[int, ...] = ()  # per value argument: the element of a tuple it is, or -1

    @staticmethod
    def from_rows(label: str, rows: Sequence[tuple[Any, ...]], inputs: tuple[tuple[Wire, ...], ...],
                  frees: tuple[tuple[int, ...], ...], publish: tuple[Wire, ...], n_args: int,
                  arg_index: tuple[int, ...] = ()) -> PartitionTask:
        """A partition of the ops whose OpTask values are ``rows``: packed now, made into OpTasks only if read."""
        task = object.__new__(PartitionTask)
        task.__dict__.update(label=label, inputs=inputs, frees=frees, publish=publish, n_args=n_args,
                             arg_index=arg_index, _packed=pack_rows(rows))
        return task

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        program = self.__dict__.get(_PROGRAM)
        if program is None:
            wiring = (self.inputs, self.frees, self.publish, self.n_args, self.arg_index)
            packed = self.__dict__.get(_PACKED)
            try:
                program = pickle.dumps((packed or pack_ops(self.ops), *wiring), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # a value plain pickle cannot write (Dask's pickler may): the fields as they are
                return PartitionTask, (self.label, self.ops, *wiring)
            self.__dict__[_PROGRAM] = program  # pickled again (a resubmission): the same bytes
        return _restore_partition, (self.label, program)

    if not TYPE_CHECKING:  # (mypy keeps checking attribute names)
        def __getattr__(self, name: str) -> Any:
            # only for a field not unpacked yet (present fields never come here)
            state = self.__dict__
            if name == "ops" and _PACKED in state:
                state["ops"] = unpack_ops(state[_PACKED])
            elif name in _PROGRAM_FIELDS and _PROGRAM in state:
                packed, *wiring = pickle.loads(state[_PROGRAM])
                state.update(zip(_PROGRAM_FIELDS, (unpack_ops(packed), *wiring)))
            else:
                raise AttributeError(name)
            return state[name]


_PROGRAM, _PACKED = "_program", "_packed"
_PROGRAM_FIELDS = ("ops", "inputs", "frees", "publish", "n_args", "arg_index")


def _restore_partition(label: str, program: bytes) -> PartitionTask:
    task = object.__new__(PartitionTask)
    task.__dict__.update({"label": label, _PROGRAM: program})
    return task


def run_partition(task: PartitionTask, *args: Any) -> Any:
    """Run a partition's ops on this worker's device; return the values other partitions read."""
    worker, runtime = _runtime()
    env: list[Any] = [None] * (task.n_args + len(task.ops))
    for i in range(task.n_args):
        element = task.arg_index[i] if task.arg_index else -1
        env[i] = args[i] if element < 0 else args[i][element]
    del args  # the worker's data store still holds the arguments; this frame need not
    for j, op in enumerate(task.ops):
        raw = tuple(env[slot] if element < 0 else env[slot][element] for slot, element in task.inputs[j])
        env[task.n_args + j] = execute(op, runtime, worker, raw)
        for slot in task.frees[j]:
            env[slot] = None
    values = tuple(env[slot] if element < 0 else env[slot][element] for slot, element in task.publish)
    if not values:
        return None
    return values[0] if len(values) == 1 else values
