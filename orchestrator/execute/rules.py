"""The decisions of a sweep's rule at one step: successive halving's ranking, and the median rule.

Policy. Both are decided on every copy still running at the step, all
together, from values the driver read at that step; nothing here depends
on which copy reached the step first, so the same values give the same
decision on any cluster and in ``--sync``.

* **Halving**: the copies are ranked by their value at the step (``mode``
  first, NaN last, ties by copy index); the best ``keep`` of them (at least
  one) go on.
* **Median** (Optuna's ``MedianPruner``): the sweep's first ``n_startup``
  copies are the reference and always go on. Each other copy stops when its
  best value so far (the lowest, or highest with ``mode: max``, of its
  values up to the step; NaN when it has none) is worse than the median of
  the reference copies' values at the step: strictly worse, so a tie goes
  on, and a NaN best stops (as Optuna prunes a NaN). With no reference value
  at the step (they failed or stopped by their own rule), nobody stops.

Optuna compares with the trials *completed* before the judged one reports;
in a search whose copies run side by side, the only copies sure to complete
are those the rule never stops, so they are the reference: the decisions
are Optuna's when its first ``n_startup`` trials ran to completion and the
others then ran at once. Ray Tune's ``MedianStoppingRule`` takes the median
of the other trials' running means at the step, over whichever trials have
reached it when one reports; that set depends on timing, which this rule
avoids.

State: none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..spec.records import Halving, Median
from .records import Decision, DecisionRow


def halving_decision(rule: Halving, number: int, step: int, values: Mapping[int, float]) -> Decision:
    """Rung ``number`` at ``step``: ``values`` are the running copies' values there, by copy."""
    sign = 1.0 if rule.mode == "min" else -1.0
    ranked = sorted(values, key=lambda c: (math.isnan(values[c]), sign * values[c], c))
    kept = set(ranked[:max(1, int(len(ranked) * rule.keep))])
    return Decision("halving", number, step, rule.metric, rule.mode,
                    tuple(DecisionRow(c, values[c], c in kept) for c in ranked))


def median_decision(rule: Median, number: int, step: int, values: Mapping[int, float],
                    best: Mapping[int, float]) -> Decision:
    """Decision ``number`` at ``step``: ``values`` the running copies' values there, ``best`` their best so far."""
    reference = [values[c] for c in values if c < rule.n_startup and not math.isnan(values[c])]
    median = float(np.median(reference)) if reference else math.nan
    rows = []
    for c in sorted(values):
        judged = c >= rule.n_startup and not math.isnan(median)
        kept = not judged or not _worse(best[c], median, rule.mode)
        rows.append(DecisionRow(c, values[c], kept, best[c], c < rule.n_startup))
    return Decision("median", number, step, rule.metric, rule.mode, tuple(rows), median)


def best_so_far(values: Sequence[float], mode: str) -> float:
    """The best of ``values`` (NaN left out); NaN when there is none."""
    usable = [v for v in values if not math.isnan(v)]
    if not usable:
        return math.nan
    return min(usable) if mode == "min" else max(usable)


def _worse(value: float, median: float, mode: str) -> bool:
    if math.isnan(value):
        return True
    return value > median if mode == "min" else value < median


def stop_reason(decision: Decision, row: DecisionRow) -> str:
    """Why a copy stopped at ``decision``: the words of its loop's stop reason."""
    if decision.rule == "halving":
        kept = sum(1 for r in decision.rows if r.kept)
        return (f"halving: rung {decision.number} at step {decision.step}, {decision.metric} {row.value:.4g} not "
                f"among the best {kept} of {len(decision.rows)}")
    references = [r.copy for r in decision.rows if r.reference]
    return (f"median: step {decision.step}, best {decision.metric} {row.best:.4g} worse than the median "
            f"{decision.median:.4g} of copies {_copies(references)}")


def _copies(indices: Sequence[int]) -> str:
    if indices and list(indices) == list(range(indices[0], indices[-1] + 1)) and len(indices) > 2:
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(str(i) for i in indices)
