"""When a training loop stops: Keras's EarlyStopping, and conditions on a metric, judged at evaluations.

Early stopping follows ``keras.callbacks.EarlyStopping`` (Keras 3), the
reference users know, evaluation by evaluation where Keras goes epoch by
epoch:

* evaluations before ``start_from`` are ignored;
* ``wait`` counts evaluations since the last improvement: it is raised
  first, then reset to 0 by an improvement, which is a value better than
  the best by more than ``min_delta`` (``mode: min``: lower; a tie is not an
  improvement) and, with a ``baseline``, better than the baseline too;
* the loop stops once ``wait >= patience``, never at the first evaluation
  judged;
* the best value and its step are kept (``restore_best``: the loop's outputs
  are that step's states, also when it ran to its last step).

A condition (``stop_when``) stops at the first evaluation where the metric
is below (or above) its bound. Nothing here looks at devices or futures:
the driver hands in each evaluation's values and gets back a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..spec.records import Stopping


@dataclass
class Judge:
    rules: tuple[Stopping, ...]
    best: float | None = None
    best_step: int | None = None
    wait: int = 0
    judged: int = 0  # evaluations seen (those before start_from included)
    improved: bool = False  # the last evaluation improved on the best (the driver keeps that step's states)

    @property
    def early(self) -> Stopping | None:
        return next((rule for rule in self.rules if rule.patience is not None), None)

    def judge(self, step: int, values: Mapping[str, float]) -> str | None:
        """After the evaluation at ``step``: ``early_stop``, ``condition``, or None to go on."""
        self.improved = False
        index, self.judged = self.judged, self.judged + 1
        for rule in self.rules:
            if rule.patience is None and rule.metric in values and _holds(rule, values[rule.metric]):
                return "condition"
        early = self.early
        if early is None or early.metric not in values or index < early.start_from:
            return None
        current = float(values[early.metric])
        if math.isnan(current):
            return None  # as Keras: a missing value is skipped, not judged
        self.wait += 1
        if self._better(early, current, self.best):
            self.best, self.best_step, self.improved = current, step, True
            if early.baseline is None or self._better(early, current, early.baseline):
                self.wait = 0
            return None
        if self.wait >= (early.patience or 0) and index > 0:
            return "early_stop"
        return None

    @staticmethod
    def _better(rule: Stopping, value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        return value - rule.min_delta > reference if rule.mode == "max" else value + rule.min_delta < reference

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it (JSON)."""
        return {"best": self.best, "best_step": self.best_step, "wait": self.wait, "judged": self.judged}

    def restore(self, saved: Mapping[str, Any]) -> None:
        best, step = saved.get("best"), saved.get("best_step")
        self.best = None if best is None else float(best)
        self.best_step = None if step is None else int(step)
        self.wait, self.judged = int(saved.get("wait", 0)), int(saved.get("judged", 0))


def _holds(rule: Stopping, value: float) -> bool:
    return (rule.below is not None and value < rule.below) or (rule.above is not None and value > rule.above)
