"""Checks of training loops once shapes are known, and the steps of a loop given in epochs.

* Minibatches: every dataset's rows are known and equal, a batch is no
  larger than the data; ``epochs`` gives the steps (epochs x batches per
  epoch), which must then agree with ``steps`` when both are given. The
  steps are written into the loop and into every op that counts them (the
  metrics' series, the evaluations' tables, the minibatches themselves).
* Checkpoints and evaluations: their ``every`` must leave something to do;
  where it does not divide the window, the windows are cut at its steps
  (said as a warning, since a window shorter than asked costs a round).
* Stopping: the metric an early stop or a ``stop_when`` watches is made by
  the evaluation (or is a step metric, judged at the evaluations); rules
  need an evaluation to be judged at; ``stop_when`` gives one bound.
* Checkpoints, evaluations and stopping belong to a loop no other loop
  holds (an inner loop restarts with every step of the outer one).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from ...errors import did_you_mean
from ...ops.training import batches_per_epoch
from ...ops.values import ValueInfo
from ..constructs.iterate import MAX_STEPS
from ..records import Loop, Op
from .checker import Checker

Values = Mapping[str, tuple[ValueInfo, ...]]
_COUNTED = ("series", "evaluations", "minibatch")  # ops whose params carry the loop's steps


def settle_loops(c: Checker, loops: Sequence[Loop], order: Sequence[Op],
                 values: Values) -> tuple[list[Loop], list[Op], bool]:
    """The loops with their steps known, the ops that count them updated; True when any changed."""
    settled, changed = [], False
    steps_of: dict[str, int] = {}
    every_of: dict[str, int] = {}
    for loop in loops:
        steps = _batched_steps(c, loop, values) if loop.batches is not None else loop.steps
        if steps and steps != loop.steps:
            loop, changed = replace(loop, steps=steps), True
        loop = _every_in_epochs(c, loop, values)
        steps_of[loop.name] = loop.steps
        every_of[loop.name] = loop.evaluation.every if loop.evaluation is not None else 0
        _check_training(c, loop, loops)
        settled.append(loop)
    ops = [_counted(op, steps_of, every_of) if op.kind in _COUNTED else op for op in order]
    return settled, ops, changed or any(a is not b for a, b in zip(ops, order))


def _counted(op: Op, steps_of: Mapping[str, int], every_of: Mapping[str, int]) -> Op:
    loop = op.group if op.kind == "minibatch" else op.name.rpartition(".")[0]
    steps = steps_of.get(loop or "")
    counts = {"steps": steps, **({"every": every_of.get(loop or "")} if op.kind == "evaluations" else {})}
    if steps is None or all(op.params.get(k) == v for k, v in counts.items()):
        return op
    return replace(op, params={**op.params, **counts})


def _every_in_epochs(c: Checker, loop: Loop, values: Values) -> Loop:
    """``every: {epochs: N}`` of the evaluation and the checkpoint, as N x the steps of an epoch."""
    asked = [(field, epochs) for field, epochs in (
        ("evaluate", loop.evaluation.every_epochs if loop.evaluation is not None else None),
        ("checkpoint", loop.checkpoint.every_epochs if loop.checkpoint is not None else None)) if epochs]
    if not asked:
        return loop
    per_epoch = _epoch_steps(c, loop, values, (*loop.path, asked[0][0], "every"))
    if per_epoch is None:
        return loop
    if loop.evaluation is not None and loop.evaluation.every_epochs:
        loop = replace(loop, evaluation=replace(loop.evaluation, every=loop.evaluation.every_epochs * per_epoch))
    if loop.checkpoint is not None and loop.checkpoint.every_epochs:
        loop = replace(loop, checkpoint=replace(loop.checkpoint, every=loop.checkpoint.every_epochs * per_epoch))
    return loop


def _epoch_steps(c: Checker, loop: Loop, values: Values, where: tuple[str | int, ...]) -> int | None:
    """The steps of one epoch of the loop's batches; None (with an error where it has none) when not known."""
    batches = loop.batches
    if batches is None:
        c.error("loop-every", where, f"every: {{epochs: N}} counts the epochs of '{loop.name}''s batches, and it "
                "has none", "give every in steps (every: N), or batches: {data: ..., size: ...}")
        return None
    rows = [_rows(values, source.op) for _, source in batches.data]
    if not rows or rows[0] is None or batches.size <= 0:
        return None  # said by the batches' own checks
    if not batches.across_epochs:
        return batches_per_epoch(rows[0], batches.size, batches.drop_last) or None
    if rows[0] % batches.size:
        c.error("loop-every", where, f"'{loop.name}' batches across epochs, and an epoch of {rows[0]} rows is "
                f"{rows[0] / batches.size:g} batches of {batches.size}: every: {{epochs: N}} needs whole steps",
                "give every in steps (every: N), or a size that divides the rows")
        return None
    return rows[0] // batches.size


def _rows(values: Values, name: str) -> int | None:
    infos = values.get(name, ())
    return None if not infos or infos[0].shape is None or not infos[0].shape else int(infos[0].shape[0])


def _batched_steps(c: Checker, loop: Loop, values: Values) -> int:
    """The loop's steps from its batches (0 where they cannot be known); errors for data that cannot batch."""
    batches = loop.batches
    assert batches is not None
    where = (*loop.path, "batches")
    rows = {name.rpartition("/")[2]: _rows(values, source.op) for name, source in batches.data}
    if any(n is None for n in rows.values()):
        unknown = [k for k, n in rows.items() if n is None]
        if batches.epochs is not None or loop.steps == 0:
            c.error("batches-rows", (*where, "data", unknown[0]),
                    f"the rows of '{unknown[0]}' are not known before the run, so the batches of '{loop.name}' "
                    f"per epoch are not either", "declare the data's shape (shape: on a load, output: on a call)",
                    key=True)
        return 0
    if len(set(rows.values())) > 1:
        shown = ", ".join(f"'{k}' has {n}" for k, n in rows.items())
        c.error("batches-rows", (*where, "data"), f"the datasets batched together must have the same rows: {shown}",
                "batch arrays of one length (rows are cut at the same places in each)")
        return 0
    n = next(iter(rows.values())) or 0
    if n == 0 or (batches.size > n and not batches.across_epochs):
        c.error("batches-size", (*where, "size"), f"a batch of {batches.size} rows is larger than the data "
                f"({n} rows)", f"size: {n} or less (a batch never crosses an epoch"
                + (")" if n == 0 else "; across_epochs: true lets it)"))
        return 0
    per_epoch = batches_per_epoch(n, batches.size, batches.drop_last)
    if batches.epochs is None:
        return loop.steps
    steps = batches_per_epoch(batches.epochs * n, batches.size, batches.drop_last) if batches.across_epochs \
        else batches.epochs * per_epoch
    made = f"{batches.epochs:,} epoch(s) of {n:,} rows in batches of {batches.size:,} across epochs" \
        if batches.across_epochs else f"{batches.epochs:,} epoch(s) of {per_epoch:,} batch(es)"
    if steps > MAX_STEPS:
        c.error("loop-steps", (*where, "epochs"), f"{made} are {steps:,} steps, more than the {MAX_STEPS:,} a loop "
                "may run", "fewer epochs or larger batches; a loop keeps one value of each metric per step on the "
                "client")
        return 0
    if loop.steps and loop.steps != steps:
        detail = "" if batches.across_epochs else f" ({n} rows in batches of {batches.size}" \
            f"{', the last partial one dropped' if batches.drop_last else ''})"
        c.error("batches-steps", (*loop.path, "steps"), f"steps: {loop.steps} does not match {made}{detail}: "
                f"{steps} steps", "leave steps out (it follows from epochs), or give steps without epochs")
        return 0
    return steps


def _check_training(c: Checker, loop: Loop, loops: Sequence[Loop]) -> None:
    inner = any(loop.name.startswith(other.name + "/") for other in loops if other is not loop)
    holds = any(other.name.startswith(loop.name + "/") for other in loops if other is not loop)
    if holds and (loop.evaluation or loop.stopping):
        c.error("loop-training", loop.path, f"'{loop.name}' holds another loop and runs step by step: "
                "evaluations and stopping are not supported on such a loop yet (checkpoints are)",
                "evaluate in a loop of ops only (the inner loop, made the outermost one)")
        return
    for field, present in (("checkpoint", loop.checkpoint), ("evaluate", loop.evaluation),
                           ("early_stop", any(r.patience is not None for r in loop.stopping)),
                           ("stop_when", any(r.patience is None for r in loop.stopping))):
        if present and inner:
            c.error("loop-training", (*loop.path, field), f"'{loop.name}' runs inside another loop, which runs it "
                    f"again from its start at each of its steps: {field} belongs to the outermost loop",
                    f"move {field} to the loop that holds '{loop.name}'", key=True)
            return
    for field, every in (("checkpoint", loop.checkpoint.every if loop.checkpoint else 0),
                         ("evaluate", loop.evaluation.every if loop.evaluation else 0)):
        if every and loop.steps and every > loop.steps and field == "checkpoint":
            c.error("loop-every", (*loop.path, field, "every"), f"a checkpoint every {every} steps of a loop of "
                    f"{loop.steps} steps would never be written (the loop's result is kept by the cache at its end)",
                    f"every: {loop.steps} or less")
        elif every and loop.steps and every % loop.window and loop.window % every and every < loop.steps:
            c.warn("loop-every", (*loop.path, field, "every"), f"{field} every {every} steps does not divide the "
                   f"windows of {loop.window} steps: the windows are cut at every {field} step as well",
                   f"window: {every} (or a multiple or divisor of it) keeps every window full")
    _check_stopping(c, loop)


def _check_stopping(c: Checker, loop: Loop) -> None:
    made = [name for name, _ in (loop.evaluation.metrics if loop.evaluation else ())] + \
        [name for name, _ in loop.metrics]
    for rule in loop.stopping:
        field = "early_stop" if rule.patience is not None else "stop_when"
        if loop.evaluation is None:
            c.error("loop-stopping", (*loop.path, field), f"{field} of '{loop.name}' is judged at its evaluations, "
                    "and the loop has none", "add evaluate: {every: N, body: [...], metrics: {...}}", key=True)
        elif rule.metric not in made:
            c.error("loop-stopping", (*loop.path, field, "metric"), f"{field} watches '{rule.metric}', which "
                    f"'{loop.name}' does not make (its metrics: {', '.join(made) or 'none'})",
                    did_you_mean(rule.metric, made) or "name a metric of evaluate: metrics or of metrics")
        if rule.patience is None and (rule.below is None) == (rule.above is None):
            c.error("loop-stopping", (*loop.path, field), f"stop_when of '{loop.name}' needs one bound",
                    "give below: X or above: X", key=True)
