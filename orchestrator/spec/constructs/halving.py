"""The rules that stop a sweep's copies of a training loop early: ``halving:`` and ``median:``.

Both are decided on all copies together at fixed steps of the copies' loop,
never "as each copy reports" (Ray Tune's ASHA, Optuna's pruners): the result
is the same whichever copy is faster, on any cluster.

* ``halving``: at each rung the copies still running are ranked by the
  loop's metric at that step, and the best ``keep`` of them go on. Rungs are
  written out (``rungs: [10, 30]``), every N steps (``every: 10``), or
  growing by a reduction factor from a first rung (``factor: 3`` with
  ``min_steps: 5``: 5, 15, 45, ...; ``keep`` is then 1/3 unless given), each
  before the loop's last step.
* ``median``: Optuna's MedianPruner. The first ``n_startup`` copies are the
  reference and always run on; from ``warmup_steps`` on, every ``every``
  steps, each other copy stops when its best value so far is worse than the
  median of the reference copies' values at that step.

The metric is a step metric of the loop (``metrics:``) or a metric of its
evaluation (``evaluate: metrics:``), known only at evaluation steps: the
rules then decide at evaluation steps only, which ``validate`` checks once
the evaluation's steps are known (``every: {epochs: N}`` is settled from the
data). This module reads and checks what the body alone tells; the run's
driver (``execute.halving``) decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import YamlPath, did_you_mean
from ..searches import Halving, Median, median_steps
from .base import Expander


def read_rules(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str,
               copies: int) -> tuple[Halving | None, Median | None]:
    """The sweep's halving and median rule, each checked against its body; None (with a diagnostic) when it
    cannot be. One sweep has one of them at most."""
    if "halving" in spec and "median" in spec:
        ex.diagnostics.append(ex.doc.diagnostic(
            "median", (*spath, "median"), f"sweep '{name}' gives both halving and median: each stops copies "
            "by its own rule, and a copy can only stop once", "keep one of them", key=True))
        return None, None
    return read_halving(ex, spec, spath, name), read_median(ex, spec, spath, name, copies)


def read_halving(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str) -> Halving | None:
    """The sweep's halving, checked against its body; None (with a diagnostic) when it cannot be."""
    written = spec.get("halving")
    if written is None:
        return None
    hpath = (*spath, "halving")
    found = _watched(ex, spec, written, hpath, name, "halving")
    if found is None:
        return None
    loop_name, metric, loop, evaluated = found
    if "steps" not in loop:
        _error(ex, (*hpath, "metric"), f"halving of sweep '{name}': loop '{loop_name}' is counted in "
               "epochs; its rungs need its steps", f"give '{loop_name}' steps: N")
        return None
    rungs = _rungs(written, int(loop["steps"]))
    if not rungs:
        _error(ex, hpath, f"halving of sweep '{name}' has no rung before step {loop['steps']}, the last of "
               f"loop '{loop_name}'", "give rungs (steps) between 1 and the loop's steps", key=True)
        return None
    keep = float(written.get("keep", 1 / float(written["factor"]) if "factor" in written else 0.5))
    by = next(key for key in ("rungs", "every", "factor") if key in written)
    return Halving(loop_name, metric, str(written.get("mode", "min")), keep, rungs, hpath, evaluated, by)


def read_median(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str, copies: int) -> Median | None:
    """The sweep's median rule, checked against its body; its decision steps when the loop's steps are known
    (else ``validate`` settles them)."""
    written = spec.get("median")
    if written is None:
        return None
    mpath = (*spath, "median")
    found = _watched(ex, spec, written, mpath, name, "median")
    if found is None:
        return None
    loop_name, metric, loop, evaluated = found
    n_startup = int(written.get("n_startup", 5))
    if n_startup >= copies:
        _error(ex, (*mpath, "n_startup") if "n_startup" in written else mpath,
               f"median of sweep '{name}': its first {n_startup} copies are the reference, which the rule "
               f"never stops, and the sweep has {copies}: no copy is left to judge",
               f"n_startup: {max(1, copies // 2)}, fewer than the copies", key="n_startup" not in written)
        return None
    every = int(written["every"]) if "every" in written else _default_every(loop, evaluated)
    warmup = int(written.get("warmup_steps", 0))
    steps = int(loop.get("steps", 0))
    return Median(loop_name, metric, str(written.get("mode", "min")), n_startup, warmup, every,
                  median_steps(warmup, every, steps) if steps and every else (), mpath, evaluated)


def _default_every(loop: Mapping[str, Any], evaluated: bool) -> int:
    """Every evaluation for an evaluation metric (0 while counted in epochs: settled with them), else every
    window (the driver reads the loop there anyway)."""
    if evaluated:
        every = (loop.get("evaluate") or {}).get("every")
        return int(every) if isinstance(every, int) else 0
    return int(loop.get("window", 50))


def _watched(ex: Expander, spec: Mapping[str, Any], written: Mapping[str, Any], where: YamlPath, name: str,
             rule: str) -> tuple[str, str, Mapping[str, Any], bool] | None:
    """(loop, metric, the loop as written, whether the metric is its evaluation's) of ``LOOP.METRIC``."""
    loop_name, _, metric = str(written["metric"]).rpartition(".")
    loops = {str(item["name"]): item["iterate"] for item in spec["body"]
             if isinstance(item, dict) and "iterate" in item and "name" in item}
    mpath = (*where, "metric")
    if loop_name not in loops:
        hint = did_you_mean(loop_name, loops) or (f"its loops: {', '.join(f'{n}.METRIC' for n in loops)}" if loops
                                                 else f"{rule} stops copies of a training loop: put an iterate in "
                                                      "the body")
        _error(ex, mpath, f"{rule} of sweep '{name}' watches '{written['metric']}', but its body has no loop "
               f"'{loop_name}'", hint)
        return None
    loop = loops[loop_name]
    stepped = [str(m) for m in (loop.get("metrics") or {})]
    evaluated = [str(m) for m in ((loop.get("evaluate") or {}).get("metrics") or {})]
    if metric not in stepped + evaluated:
        made = stepped + evaluated
        _error(ex, mpath, f"{rule} of sweep '{name}' watches metric '{metric}', which loop '{loop_name}' does not "
               "make", did_you_mean(metric, made) or (f"its metrics: {', '.join(made)}" if made else
                                                      f"give '{loop_name}' metrics: {{loss: OP}}"))
        return None
    if any(isinstance(item, dict) and "iterate" in item for item in loop.get("body") or []):
        _error(ex, mpath, f"{rule} of sweep '{name}': loop '{loop_name}' holds a loop of its own, whose copies "
               "cannot be paused at a decision step", f"use {rule} over a loop of ops")
        return None
    return loop_name, metric, loop, metric not in stepped


def _rungs(written: Mapping[str, Any], steps: int) -> tuple[int, ...]:
    if "rungs" in written:
        found: Sequence[int] = [int(r) for r in written["rungs"]]
    elif "every" in written:
        found = list(range(int(written["every"]), steps, int(written["every"])))
    else:
        found, rung = [], int(written.get("min_steps", 1))
        while rung < steps:
            found.append(rung)
            rung = max(rung + 1, int(round(rung * float(written["factor"]))))
    return tuple(sorted({r for r in found if 0 < r < steps}))


def _error(ex: Expander, path: YamlPath, message: str, hint: str, key: bool = False) -> None:
    """Say what is wrong; no rule."""
    code = "median" if "median" in path else "halving"  # (the sweep's own keys: graph items are numbered)
    ex.diagnostics.append(ex.doc.diagnostic(code, path, message, hint, key=key))
    return None
