"""The ops a training loop's constructs make: a step's minibatch, and an evaluation metric's table.

``minibatch`` (made by ``iterate: batches``) cuts this step's rows out of a
dataset held on the device: epoch ``e`` orders the rows by a permutation
drawn from the stream ``(seed, e)`` (or keeps them in order), and step
``s`` of the pass takes batch ``s mod b`` of epoch ``s div b``, ``b`` being
the batches per epoch. So a step's rows are a function of the step alone:
a run resumed from a checkpoint at step ``n`` draws exactly what an
uninterrupted run draws from ``n`` on, and every device holding the same
dataset cuts the same rows. Batches never cross an epoch; the last one of
an epoch is the remainder (``drop_last`` leaves it out). With
``across_epochs`` the epochs are one stream and batches cut it whole
(tf.data's ``repeat().batch()``); ``shuffle: once`` draws one order for every
epoch (tf.data's ``reshuffle_each_iteration=False``).

``evaluations`` is the export of an evaluation metric: a ``(step, value)``
row per evaluation, resolved by the loop's driver like a metric's series.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from .base import KernelContext
from .inference import ShapeError
from .values import ValueInfo

Params = Mapping[str, Any]


def batches_per_epoch(rows: int, size: int, drop_last: bool) -> int:
    return rows // size if drop_last else -(-rows // size)


def evaluation_steps(steps: int, every: int) -> tuple[int, ...]:
    """The steps after which an evaluation runs: every ``every`` steps, and after the last step."""
    points = list(range(every, steps + 1, every))
    if steps and (not points or points[-1] != steps):
        points.append(steps)
    return tuple(points)


@lru_cache(maxsize=16)
def _order(seed: int, epoch: int, rows: int) -> np.ndarray:
    # an epoch's order is drawn once per process, not once per step (a permutation is O(rows))
    return np.random.default_rng([seed, epoch]).permutation(rows)


def _epoch_order(p: Params, epoch: int, rows: int) -> np.ndarray | None:
    """Epoch ``epoch``'s order of the rows: drawn per epoch, drawn once (``shuffle: once``), or none."""
    shuffle = p.get("shuffle", True)
    if not shuffle:
        return None
    return _order(int(p.get("seed", 0)), 0 if shuffle == "once" else epoch, rows)


def batch_rows(p: Params, rows: int, step: int) -> tuple[int, int, np.ndarray | None]:
    """(first, stop) of this step's batch within its epoch's order, and that order (None: the rows in order)."""
    size, drop = int(p["size"]), bool(p.get("drop_last", False))
    per_epoch = batches_per_epoch(rows, size, drop)
    if per_epoch == 0:
        raise ValueError(f"a batch of {size} rows needs at least {size} rows; the data has {rows}")
    passes = int(p.get("steps") or 0)
    epoch, index = divmod(step % passes if passes else step, per_epoch)
    return index * size, min((index + 1) * size, rows), _epoch_order(p, epoch, rows)


def stream_rows(p: Params, rows: int, step: int) -> np.ndarray:
    """``across_epochs``: this step's rows of the epochs one after another (tf.data's repeat, then batch).

    Step ``s`` takes positions ``s*size .. (s+1)*size`` of the stream, position ``q`` being row
    ``order(q div rows)[q mod rows]``; a batch may span epochs, and every batch is full but a last partial
    one of the whole run (``epochs x rows`` not a multiple of ``size``).
    """
    size, passes = int(p["size"]), int(p.get("steps") or 0)
    start = (step % passes if passes else step) * size
    stop = start + size
    if p.get("epochs") is not None:
        stop = min(stop, int(p["epochs"]) * rows)
    pieces = []
    while start < stop:
        epoch, index = divmod(start, rows)
        take = min(stop - start, rows - index)
        order = _epoch_order(p, epoch, rows)
        pieces.append(np.arange(index, index + take) if order is None else order[index:index + take])
        start += take
    return np.concatenate(pieces) if pieces else np.arange(0)


def partial_step(batches: Params, step: int) -> bool:
    """Is ``step`` the one whose batch is partial (the last of an epoch, or with ``across_epochs`` of the run)?

    ``batches``: the rows, size and steps (and ``across_epochs``) the combine of a data-parallel loop keeps."""
    rows, size, passes = int(batches["rows"]), int(batches["size"]), int(batches["steps"])
    if batches.get("across_epochs"):
        return bool(passes) and step % passes == passes - 1
    per_epoch = -(-rows // size)
    return (step % passes if passes else step) % per_epoch == per_epoch - 1


def minibatch(ctx: KernelContext, p: Params, x: Any) -> Any:
    if p.get("across_epochs"):
        return x[ctx.xp.asarray(stream_rows(p, int(x.shape[0]), ctx.step))]
    first, stop, order = batch_rows(p, int(x.shape[0]), ctx.step)
    if order is None:
        return x[first:stop]
    return x[ctx.xp.asarray(order[first:stop])]


def infer_minibatch(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (x,) = ins
    if x.shape is None:
        return (ValueInfo(None, x.dtype),)
    if not x.shape:
        raise ShapeError("a minibatch is cut from rows, but this data is a scalar",
                         "batch arrays whose first axis is the rows")
    size, rows = int(p["size"]), int(x.shape[0])
    return (ValueInfo((size if p.get("across_epochs") else min(size, rows), *x.shape[1:]), x.dtype),)


def infer_evaluations(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return (ValueInfo((len(evaluation_steps(int(p["steps"]), int(p["every"]))), 2), "float64"),)


def evaluations(ctx: KernelContext, p: Params, *values: Any) -> Any:
    steps = evaluation_steps(int(p["steps"]), int(p["every"]))
    return ctx.xp.asarray(np.column_stack([steps[:len(values)], [float(ctx.to_host(v)) for v in values]]))
