"""``halving:`` of a sweep whose body is a training loop: successive halving, decided rung by rung.

At each rung (a step of the copies' loop) the copies still running are
ranked by the loop's metric at that step, all of them together, and the
best ``keep`` of them go on; the rest stop there. Deciding on all copies at
once, rather than as each reports (Ray Tune's ASHA, Optuna's pruners), makes
the result the same whichever copy finished its steps first, on any cluster.

Rungs are written out (``rungs: [10, 30]``), every N steps (``every: 10``),
or growing by a reduction factor from a first rung (``factor: 3`` with
``min_steps: 5``: 5, 15, 45, ...; ``keep`` is then 1/3 unless given), each
before the loop's last step. This module reads and checks them; the run's
driver (``execute.halving``) decides at them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import YamlPath, did_you_mean
from ..searches import Halving
from .base import Expander


def read_halving(ex: Expander, spec: Mapping[str, Any], spath: YamlPath, name: str) -> Halving | None:
    """The sweep's halving, checked against its body; None (with a diagnostic) when it cannot be."""
    written = spec.get("halving")
    if written is None:
        return None
    hpath = (*spath, "halving")
    loop_name, _, metric = str(written["metric"]).rpartition(".")
    loops = {str(item["name"]): item["iterate"] for item in spec["body"]
             if isinstance(item, dict) and "iterate" in item and "name" in item}
    where = (*hpath, "metric")
    if loop_name not in loops:
        hint = did_you_mean(loop_name, loops) or (f"its loops: {', '.join(f'{n}.METRIC' for n in loops)}" if loops
                                                 else "halving stops copies of a training loop: put an iterate in the body")
        return _error(ex, where, f"halving of sweep '{name}' watches '{written['metric']}', but its body has no loop "
                      f"'{loop_name}'", hint)
    loop = loops[loop_name]
    metrics = [str(m) for m in (loop.get("metrics") or {})]
    if metric not in metrics:
        return _error(ex, where, f"halving of sweep '{name}' watches metric '{metric}', which loop '{loop_name}' "
                      "does not make", did_you_mean(metric, metrics) or
                      (f"its metrics: {', '.join(metrics)}" if metrics else f"give '{loop_name}' metrics: {{loss: OP}}"))
    if "steps" not in loop:
        return _error(ex, where, f"halving of sweep '{name}': loop '{loop_name}' is counted in epochs; its rungs "
                      "need its steps", f"give '{loop_name}' steps: N")
    if any(isinstance(item, dict) and "iterate" in item for item in loop.get("body") or []):
        return _error(ex, where, f"halving of sweep '{name}': loop '{loop_name}' holds a loop of its own, whose "
                      "copies cannot be paused at a rung", "halve over a loop of ops")
    rungs = _rungs(written, int(loop["steps"]))
    if not rungs:
        return _error(ex, hpath, f"halving of sweep '{name}' has no rung before step {loop['steps']}, the last of "
                      f"loop '{loop_name}'", "give rungs (steps) between 1 and the loop's steps", key=True)
    keep = float(written.get("keep", 1 / float(written["factor"]) if "factor" in written else 0.5))
    return Halving(loop_name, metric, str(written.get("mode", "min")), keep, rungs, hpath)


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


def _error(ex: Expander, path: YamlPath, message: str, hint: str, key: bool = False) -> Halving | None:
    """Say what is wrong; no halving."""
    ex.diagnostics.append(ex.doc.diagnostic("halving", path, message, hint, key=key))
    return None
