"""Checks of a loop's ``checkpoint:`` beyond its path (which ``outputs`` checks as it checks output paths).

* ``best_only`` watches a metric: ``monitor``, or else the loop's
  ``early_stop`` metric; a loop with neither has nothing to compare, and a
  metric the loop does not make is an error (with did-you-mean). An
  evaluation metric is known only at evaluation steps, so with one the
  checkpoint steps must be evaluation steps (``every`` a multiple of
  ``evaluate: every``). A step metric is known at every step.
* ``monitor`` or ``mode`` without ``best_only`` changes nothing: a warning.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...errors import did_you_mean
from ..records import Loop
from .checker import Checker


def check_checkpoints(c: Checker, loops: Sequence[Loop]) -> None:
    for loop in loops:
        checkpoint = loop.checkpoint
        if checkpoint is None:
            continue
        where = (*loop.path, "checkpoint")
        written = _node(c.doc.data, where)
        if not checkpoint.best_only:
            for key in ("monitor", "mode"):
                if isinstance(written, dict) and key in written:
                    c.warn("checkpoint-best", (*where, key), f"checkpoint {key} of '{loop.name}' is read only "
                           "with best_only: true, so every checkpoint is written", "add best_only: true, or remove "
                           f"{key}", key=True)
            continue
        _check_monitor(c, loop, where)


def _check_monitor(c: Checker, loop: Loop, where: tuple[str | int, ...]) -> None:
    checkpoint = loop.checkpoint
    assert checkpoint is not None
    evaluated = [name for name, _ in loop.evaluation.metrics] if loop.evaluation else []
    made = evaluated + [name for name, _ in loop.metrics]
    early = next((rule.metric for rule in loop.stopping if rule.patience is not None), None)
    if checkpoint.monitor is None:
        c.error("checkpoint-best", (*where, "best_only"), f"best_only of '{loop.name}' watches no metric: the loop "
                "has no early_stop to take it from", f"give monitor: NAME, one of the loop's metrics: "
                f"{', '.join(made) or 'none (add metrics: or evaluate:)'}")
        return
    if checkpoint.monitor not in made:
        if checkpoint.monitor != early:  # a missing early-stop metric is said once, at early_stop
            c.error("checkpoint-best", (*where, "monitor"), f"checkpoint monitor '{checkpoint.monitor}' is not a "
                    f"metric of '{loop.name}' (its metrics: {', '.join(made) or 'none'})",
                    did_you_mean(checkpoint.monitor, made) or "name a metric of evaluate: metrics or of metrics")
        return
    every = loop.evaluation.every if loop.evaluation else 0
    if checkpoint.monitor in evaluated and checkpoint.every % every:
        c.error("checkpoint-best", (*where, "every"), f"best_only watches the evaluation metric "
                f"'{checkpoint.monitor}', known only at evaluation steps, and a checkpoint every "
                f"{checkpoint.every} steps falls between the evaluations every {every} steps",
                f"every: a multiple of {every}, e.g. every: {every * max(1, round(checkpoint.every / every))}")


def _node(data: Any, path: Sequence[str | int]) -> Any:
    """The YAML value at ``path`` as written (None where there is none)."""
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data
