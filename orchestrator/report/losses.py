"""The run's lost device workers in words: a line per loss for the run's closing summary.

Each line says when the worker was lost, what it was running and what the
run did; a loss the run re-planned without (``run.on_device_lost:
replan``) adds what the plan diff moved and removed, where each loop went
on from, the steps it ran again and the time it cost. Pure functions of the
run report's data; no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def loss_lines(run_report: Mapping[str, Any]) -> list[str]:
    """A line per device worker lost during the run: when, what it was running, what the run did."""
    lines = []
    for loss in run_report.get("losses") or ():
        steps = loss.get("steps")
        at = "" if not steps else f", step {steps[0]}" if steps[0] == steps[1] else f", steps {steps[0]}-{steps[1]}"
        at += f" of loop '{loss['loop']}'" if at else ""
        running = list(loss.get("running") or ())
        what = f"running {', '.join(running[:3])}{', ...' if len(running) > 3 else ''}" if running else "between tasks"
        lines.append(f"worker lost: {loss['device']} {float(loss['seconds']):.2f} s into the run{at} ({what}): "
                     f"{loss.get('outcome', '')}{replan_words(loss.get('replan'))}")
    return lines


def replan_words(replan: Mapping[str, Any] | None) -> str:
    """A re-plan's part of a loss's line: what the plan diff moved and removed, where each loop went on from,
    the steps it ran again and the time it cost (run.on_device_lost: replan)."""
    if not replan:
        return ""
    summary = (replan.get("diff") or {}).get("summary") or {}
    diff = f"{summary.get('moved', 0)} op(s) moved, {summary.get('removed', 0)} removed" if summary else "no diff"
    loops = [f"loop '{loop}' from step {step} ({replan.get('steps_redone', {}).get(loop, 0)} step(s) redone)"
             for loop, step in (replan.get("resumed_from_step") or {}).items()]
    cost = f"; back where it was {float(replan['seconds']):.2f} s after the loss" if "seconds" in replan else ""
    back = replan.get("back")
    used = f"; its worker back, used again from step {back['step']}" if back else ""
    return f" ({diff}{'; ' if loops else ''}{', '.join(loops)}{cost}{used})"
