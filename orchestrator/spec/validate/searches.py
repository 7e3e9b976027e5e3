"""Checks of a sweep's rule once its loop's steps are known, and the median rule's decision steps.

* The median rule decides at ``warmup_steps + k x every`` (k >= 0, from step
  1), before the loop's last step. They are settled here, where the loop's
  steps and its evaluation's ``every`` are known (either may be counted in
  epochs), and written into every copy's loop: its windows end there, where
  the driver decides. No decision step before the last is an error at
  ``warmup_steps`` (or ``every``).
* A rule on an evaluation metric decides at evaluation steps only, where the
  metric has a value: every rung of a halving, and the median's
  ``warmup_steps`` and ``every``, must be multiples of the evaluation's
  ``every``. A decision between evaluations would read a stale value (or
  none), and evaluating there too would change what ``early_stop`` counts
  and what the evaluation table holds, so it is an error with the steps
  that would do.

State: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..records import Halving, Loop, Median, Search
from ..searches import median_steps
from .checker import Checker


def settle_rules(c: Checker, loops: Sequence[Loop], searches: Sequence[Search]) -> tuple[list[Loop], list[Search]]:
    """The loops with every copy's decision steps, the sweeps with their median rule's steps settled."""
    by_name = {loop.name: loop for loop in loops}
    settled: list[Search] = []
    steps_of: dict[str, tuple[int, ...]] = {}
    for search in searches:
        rule = search.rule
        first = by_name.get(search.copies[0].prefix + rule.loop) if rule is not None else None
        if rule is None or first is None or not first.steps:
            settled.append(search)
            continue
        if isinstance(rule, Median):
            rule = _median_steps(c, search.name, rule, first)
            search = replace(search, median=rule)
        if rule.evaluated and first.evaluation is not None and first.evaluation.every:
            _at_evaluations(c, search.name, rule, first.evaluation.every)
        steps_of.update({copy.prefix + rule.loop: rule.steps for copy in search.copies})
        settled.append(search)
    return [replace(loop, rungs=steps_of[loop.name]) if loop.name in steps_of and loop.rungs != steps_of[loop.name]
            else loop for loop in loops], settled


def _median_steps(c: Checker, sweep: str, rule: Median, loop: Loop) -> Median:
    """The rule with its decision steps (its ``every`` an evaluation's when not written)."""
    every = rule.every or (loop.evaluation.every if loop.evaluation is not None else 0)
    steps = median_steps(rule.warmup_steps, every, loop.steps)
    if every and not steps:
        field = "warmup_steps" if rule.warmup_steps >= loop.steps else "every"
        c.error("median", (*rule.at, field), f"median of sweep '{sweep}': its first decision is past step "
                f"{loop.steps - 1}, "
                f"the last before loop '{rule.loop}' ends (warmup_steps {rule.warmup_steps}, every {every}): it "
                "would never stop a copy", f"decide before the last step: warmup_steps (or, from 0, every) below "
                f"{loop.steps}")
    return replace(rule, every=every, steps=steps)


def _at_evaluations(c: Checker, sweep: str, rule: Halving | Median, every: int) -> None:
    """A rule on an evaluation metric decides at evaluation steps only."""
    if isinstance(rule, Halving):
        off = [s for s in rule.steps if s % every]
        if off:
            c.error("halving", (*rule.at, rule.written), f"halving of sweep '{sweep}' watches the evaluation metric "
                    f"'{rule.metric}', "
                    f"known only at evaluation steps (every {every}), and rung{'s' if len(off) > 1 else ''} "
                    f"{', '.join(str(s) for s in off[:4])} fall{'' if len(off) > 1 else 's'} between them",
                    f"rungs at evaluation steps: every: {every}, or rungs that are multiples of {every}")
        return
    for field, value in (("warmup_steps", rule.warmup_steps), ("every", rule.every)):
        if value % every:
            c.error("median", (*rule.at, field), f"median of sweep '{sweep}' watches the evaluation metric "
                    f"'{rule.metric}', "
                    f"known only at evaluation steps (every {every}), and {field}: {value} falls between them",
                    f"{field}: a multiple of {every}, e.g. {field}: {max(every, value - value % every)}")
            return
