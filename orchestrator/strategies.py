"""Placement strategies: how a ``round_robin`` rule spreads the ops it matches over a job's tasks.

A rule names its strategy with ``by:`` (``round_robin: /job:ps``, ``by:
bytes``); each rule gets a fresh strategy object when placement starts and
asks it, op by op in graph order, for the next task. The default,
``count``, is TensorFlow's ``replica_device_setter``: tasks in turn.

How to add one: a class with ``next_task(tasks, nbytes) -> int`` and its
name in :data:`STRATEGIES` (docs/extending.md). Validation takes the names
from here, so ``by: <new name>`` is accepted at once.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol


class TaskStrategy(Protocol):
    """Chooses a task of the rule's job for each op it matches, in graph order."""

    def next_task(self, tasks: int, nbytes: int) -> int:
        """The task (0 .. tasks-1) for the next op; ``nbytes`` is its inferred size (0 if unknown)."""
        ...


class ByCount:
    """Tasks in turn: 0, 1, ..., n-1, 0, ... (TF ``replica_device_setter``)."""

    description = "tasks in turn (task i mod n), as TensorFlow's replica_device_setter"

    def __init__(self) -> None:
        self.count = 0

    def next_task(self, tasks: int, nbytes: int) -> int:
        task = self.count % tasks
        self.count += 1
        return task


class ByBytes:
    """The task holding the fewest bytes so far (ties: the lowest); an op of unknown size weighs nothing."""

    description = "the task with the fewest bytes so far, from inferred sizes"

    def __init__(self) -> None:
        self.loads: dict[int, int] = {}

    def next_task(self, tasks: int, nbytes: int) -> int:
        task = min(range(tasks), key=lambda t: (self.loads.get(t, 0), t))
        self.loads[task] = self.loads.get(task, 0) + nbytes
        return task


STRATEGIES: Mapping[str, Callable[[], TaskStrategy]] = {"count": ByCount, "bytes": ByBytes}
"""Every strategy a rule's ``by:`` may name; ``count`` is the default."""

DEFAULT = "count"
