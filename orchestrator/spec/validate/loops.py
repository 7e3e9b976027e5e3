"""Checks of ``iterate`` loops once shapes are known: an update keeps its state's shape and dtype, a metric
is one number per step (an evaluation metric one number per evaluation)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ...ops.values import ValueInfo
from ..records import Loop, OpRef
from .checker import Checker
from .graph import fmt_shape


def _info(values: Mapping[str, tuple[ValueInfo, ...]], ref: OpRef) -> ValueInfo | None:
    infos = values.get(ref.op, ())
    index = ref.output or 0
    return infos[index] if index < len(infos) else None


def check_loops(c: Checker, loops: Sequence[Loop], values: Mapping[str, tuple[ValueInfo, ...]]) -> None:
    """Step s+1 reads what step s's update made where step 1 read the initial value: they must agree.

    A different shape would make step 2 fail (or silently broadcast); a
    different dtype would change the state's precision after the first step,
    and the memory planner, which sized the state from its initial value,
    would be wrong.
    """
    for loop in loops:
        for var in loop.state:
            if var.update.op == var.placeholder:
                continue  # not updated: it stays the initial value
            start, update = _info(values, var.init), _info(values, var.update)
            if start is None or update is None or start.shape is None or update.shape is None:
                continue  # unknown sizes (a call without output): the run checks what it can
            same_dtype = start.dtype is None or update.dtype is None or start.dtype == update.dtype
            if start.shape == update.shape and same_dtype:
                continue
            c.error("loop-update", (*loop.path, "update", var.name),
                    f"the update '{_local(loop, var.update)}' of state '{var.name}' in '{loop.name}' is "
                    f"{fmt_shape(update.shape)} {update.dtype or '?'}, but the state is {fmt_shape(start.shape)} "
                    f"{start.dtype or '?'} (its initial value '{var.init}')",
                    "an update must keep its state's shape and dtype: reshape or cast it in the body", key=True)
        check_metrics(c, loop, values)


def check_metrics(c: Checker, loop: Loop, values: Mapping[str, tuple[ValueInfo, ...]]) -> None:
    """A metric's series keeps one value per step on the client (the bound on steps counts on it), and is
    written as a column: an array per step would grow the client by its size at every step."""
    evaluated = loop.evaluation.metrics if loop.evaluation is not None else ()
    for where, each, metrics in (("metrics", "step", loop.metrics), ("evaluate", "evaluation", evaluated)):
        for name, ref in metrics:
            info = _info(values, ref)
            if info is None or info.shape is None or info.shape == ():
                continue  # unknown until it runs (a call without output): the run checks every value
            local = _local(loop, ref, evaluated=where == "evaluate")
            path = (*loop.path, "metrics", name) if where == "metrics" else (*loop.path, "evaluate", "metrics", name)
            c.error("loop-metric", path, f"{'evaluation ' if where == 'evaluate' else ''}metric '{name}' of "
                    f"'{loop.name}' is '{local}', of shape {fmt_shape(info.shape)}; a metric is one number per {each}",
                    f"reduce it in the {'evaluation ' if where == 'evaluate' else ''}body, e.g. {{name: {name}_mean, "
                    f"op: mean, inputs: [{local}]}}, and make that the metric"
                    + (", or carry the array as a state" if where == "metrics" else ""))


def _local(loop: Loop, ref: OpRef, evaluated: bool = False) -> str:
    """The op as the user wrote it inside the body: ``w_next``, not ``train/w_next`` (``gap``, not
    ``train/eval/gap``, in the evaluation body)."""
    text, prefix = str(ref), loop.name + ("/eval/" if evaluated else "/")
    return text[len(prefix):] if text.startswith(prefix) else text
