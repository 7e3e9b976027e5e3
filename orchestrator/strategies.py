"""Placement strategies: how a ``round_robin`` rule spreads the ops it matches over a job's tasks.

A rule names its strategy with ``by:`` (``round_robin: /job:ps``, ``by:
bytes``); each rule gets a fresh strategy object when placement starts and
asks it, op by op in graph order, for the next task. The default,
``count``, is TensorFlow's ``replica_device_setter``: tasks in turn.

How to add one: a class with ``next_task(tasks, nbytes, held) -> int`` and
its name in :data:`STRATEGIES` (docs/extending.md). Validation takes the
names from here, so ``by: <new name>`` is accepted at once.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol


class TaskStrategy(Protocol):
    """Chooses a task of the rule's job for each op it matches, in graph order."""

    def next_task(self, tasks: int, nbytes: int, held: Mapping[int, int]) -> int:
        """The task (0 .. tasks-1) for the next op.

        ``nbytes`` is the op's inferred size (0 if unknown); ``held`` maps a task
        to the bytes placed on it so far by every op before this one, whatever
        placed it (a pin, a scope, any rule, a default); a task not in it holds
        nothing.
        """
        ...


class ByCount:
    """Tasks in turn: 0, 1, ..., n-1, 0, ... (TF ``replica_device_setter``)."""

    description = "tasks in turn (task i mod n), as TensorFlow's replica_device_setter"

    def __init__(self) -> None:
        self.count = 0

    def next_task(self, tasks: int, nbytes: int, held: Mapping[int, int]) -> int:
        task = self.count % tasks
        self.count += 1
        return task


class ByBytes:
    """The task holding the fewest bytes so far (ties: the lowest); an op of unknown size weighs nothing.

    The bytes are all a task holds, not only what this rule gave it: a large
    variable pinned to task 0 sends the next ones elsewhere. TF's
    ``GreedyLoadBalancingStrategy`` ("the least-loaded ps task") keeps its own
    tally of the ops it is asked about; the placer knows what every task
    holds, so the balance starts from that.
    """

    description = "the task with the fewest bytes so far, from inferred sizes"

    def next_task(self, tasks: int, nbytes: int, held: Mapping[int, int]) -> int:
        return min(range(tasks), key=lambda t: (held.get(t, 0), t))


STRATEGIES: Mapping[str, Callable[[], TaskStrategy]] = {"count": ByCount, "bytes": ByBytes}
"""Every strategy a rule's ``by:`` may name; ``count`` is the default."""

DEFAULT = "count"
