"""When a loop's checkpoint is written: the spec's cadence (``checkpoint.every``, ``best_only``).

Policy. A checkpoint follows every ``every``-th step and the last (unless
the loop evaluates there only because it is the last: a longer run could
not go on from it); with ``best_only`` only one whose watched metric beats
every value checkpointed before (Keras's ``save_best_only``; a tie or NaN
does not). A drain on notice (``execute.draining``) writes one besides,
wherever the window in flight ends. Pure functions of the loop and its
series: the training loop keeps the state (the best value so far).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..spec.records import Loop


def checkpoint_due(loop: Loop, step: int) -> bool:
    """Is a checkpoint written after ``step`` by the spec's cadence?"""
    checkpoint, evaluation, steps = loop.checkpoint, loop.evaluation, loop.steps
    if checkpoint is None or step % checkpoint.every:
        return False
    return step < steps or (step == steps and (evaluation is None or steps % evaluation.every == 0))


def improves(loop: Loop, scores: Mapping[str, float], series: Mapping[str, Sequence[Any]],
             best: float | None) -> tuple[bool, float | None]:
    """With ``best_only``: does the watched metric beat ``best`` (the best checkpointed so far)? Always without
    it. With the best value from now on."""
    checkpoint = loop.checkpoint
    if checkpoint is None or not checkpoint.best_only or checkpoint.monitor is None:
        return True, best
    name = checkpoint.monitor
    if name in scores:
        value = float(scores[name])
    elif series.get(name):
        value = float(np.asarray(series[name][-1]))
    else:
        return False, best
    if np.isnan(value) or (best is not None and not (value > best if checkpoint.mode == "max" else value < best)):
        return False, best
    return True, value
