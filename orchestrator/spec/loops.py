"""The records of a loop (``iterate``): its state, checkpoints, evaluation, stopping rules and batches.

A :class:`Loop` carries its place in the tree of loops (``parent``, ``children``) and the scope it was
made in (a sweep's copy), both set by the spec stage, so that no later stage reads them out of names.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import YamlPath
from .refs import OpRef
from .scopes import Scope


@dataclass(frozen=True)
class StateVar:
    name: str
    init: OpRef
    placeholder: str  # the body's state op
    update: OpRef


@dataclass(frozen=True)
class Checkpoint:
    every: int
    keep: int = 2
    path: str | None = None  # a directory relative to the output directory; None: the cache directory's
    best_only: bool = False  # write only when the monitored metric improved (Keras's save_best_only)
    monitor: str | None = None  # the metric best_only watches: as written, else the early stop's metric
    mode: str = "min"  # lower is better ("max": higher); as written, else the early stop's
    every_epochs: int | None = None  # every: {epochs: N}: ``every`` is 0 until validation knows an epoch's steps


@dataclass(frozen=True)
class Evaluation:
    """A body run every ``every`` steps (and after the last) on the states as they are then."""

    every: int
    body: tuple[str, ...]  # its ops (``LOOP/eval/<op>``), planned like the others, run by the loop's driver
    metrics: tuple[tuple[str, OpRef], ...]
    every_epochs: int | None = None  # every: {epochs: N}: ``every`` is 0 until validation knows an epoch's steps


@dataclass(frozen=True)
class Stopping:
    """When a loop stops before its last step: Keras's EarlyStopping, or a condition; judged at evaluations."""

    metric: str
    mode: str = "min"  # early stop: lower is better ("max": higher)
    patience: int | None = None  # None: a condition (below/above), not early stopping
    min_delta: float = 0.0
    baseline: float | None = None
    start_from: int = 0  # evaluations ignored at the start
    restore_best: bool = False
    below: float | None = None
    above: float | None = None


@dataclass(frozen=True)
class Batches:
    """Minibatches: each ``data`` name in the body is this step's rows of an outer value."""

    data: tuple[tuple[str, OpRef], ...]  # (body op made for it, the outer value)
    size: int
    epochs: int | None
    shuffle: bool | str = True  # True: a new order each epoch; "once": one order for every epoch; False: in order
    seed: int = 0
    drop_last: bool = False
    across_epochs: bool = False  # the epochs one stream, batches cut from it whole (tf.data repeat, then batch)


@dataclass(frozen=True)
class Loop:
    """An ``iterate`` construct: its body ops run ``steps`` times with carried state."""

    name: str
    steps: int
    window: int
    state: tuple[StateVar, ...]
    body: tuple[str, ...]
    metrics: tuple[tuple[str, OpRef], ...]
    path: YamlPath
    checkpoint: Checkpoint | None = None
    evaluation: Evaluation | None = None
    stopping: tuple[Stopping, ...] = ()
    batches: Batches | None = None
    rungs: tuple[int, ...] = ()  # a sweep rule's decision steps (halving, median): its windows end there too
    parent: str | None = None  # the loop whose step runs this one (None: a top-level loop); set by the spec stage
    children: tuple[str, ...] = ()  # the loops this one's step runs, directly
    scope: Scope = Scope()  # where the loop itself stands: the sweep copy that made it, the loop around it

    @property
    def evaluated(self) -> tuple[str, ...]:
        """The ops of its evaluation body (run by its driver between windows, never as steps)."""
        return self.evaluation.body if self.evaluation is not None else ()

    def window_starts(self) -> tuple[int, ...]:
        """The first step of each window: every ``window`` steps, and a window ends at every checkpoint and
        evaluation step (the driver reads the states there)."""
        cuts = set(range(0, self.steps, self.window)) | {r for r in self.rungs if 0 < r < self.steps}
        for every in (self.checkpoint.every if self.checkpoint else 0, self.evaluation.every if self.evaluation else 0):
            if every:
                cuts |= set(range(every, self.steps, every))
        return tuple(sorted(cuts))

    @property
    def exports(self) -> tuple[str, ...]:
        """``NAME.state`` and ``NAME.metric``: values the driver resolves after the loop, never tasks."""
        evaluated = self.evaluation.metrics if self.evaluation is not None else ()
        return (*(f"{self.name}.{var.name}" for var in self.state), *(f"{self.name}.{m}" for m, _ in self.metrics),
                *(f"{self.name}.{m}" for m, _ in evaluated))
