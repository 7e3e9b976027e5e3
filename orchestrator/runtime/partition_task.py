"""A device partition on a worker: its ops one after the other, in one Dask task.

Each op runs exactly as :func:`~orchestrator.runtime.device.run_op` would run
it alone — charged to the device's memory at its own allocation, timed out
on its own ``timeout``, recorded, logged, and failing with an error naming
the op and the device — so nothing a user sees per op is lost. Values the
partition's later ops no longer need are dropped after their last reader
(the simulated GPU gives their memory back then, as the memory planner
assumes); what other partitions read is returned, alone or as a tuple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .device import _runtime, execute
from .tasks import OpTask

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
