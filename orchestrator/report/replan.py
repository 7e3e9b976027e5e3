"""Renderers of a re-plan (``orchestrate plan SPEC --without DEVICE``): text and JSON.

A re-plan is shown as what a run would need to know before it goes on
without those devices: which devices it is without, what stops it (an op
pinned to a lost device, a device whose peak no longer fits: the re-plan's
diagnostics, each at its line), the plan on the devices left, and what
changed from the full plan (the plan diff: ops removed and moved, transfers,
peak memory per device). Pure functions of the records; no state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Diagnostic
from ..plan.diff import PlanDiff
from ..plan.records import Plan
from .diff import plan_diff_dict, plan_diff_text
from .text import plan_dict, plan_text

REPLAN_JSON_VERSION = 1


@dataclass(frozen=True)
class ReplanView:
    """What the renderers read: the full plan, the devices taken out, the re-plan (when it placed every op),
    its diagnostics and its diff from the full plan."""

    full: Plan
    lost: tuple[str, ...]
    plan: Plan | None
    diagnostics: Sequence[Diagnostic]
    diff: PlanDiff | None

    @property
    def ok(self) -> bool:
        return self.diff is not None and not any(d.is_error for d in self.diagnostics)


def _heading(view: ReplanView) -> str:
    left = len(view.full.spec.cluster.devices) - len(view.lost)
    return (f"re-plan of '{view.full.spec.name}' ({view.full.spec.file}) without {', '.join(view.lost)}: "
            f"{left} of {len(view.full.spec.cluster.devices)} devices left")


def replan_text(view: ReplanView, with_plan: bool = True) -> str:
    """``with_plan``: the plan on the devices left too (``plan --without``); a run re-planning prints the rest."""
    lines = [_heading(view)]
    errors = [d for d in view.diagnostics if d.is_error]
    if errors:
        lines += ["", f"the re-plan does not hold ({len(errors)} error{'' if len(errors) == 1 else 's'}):"]
    lines += [d.render() for d in view.diagnostics]
    if view.diff is None or view.plan is None:
        lines += ["", "no diff: the re-plan could not place every op (above)"]
        return "\n".join(lines) + "\n"
    lines += ["", plan_text(view.plan).rstrip("\n"), ""] if with_plan else [""]
    lines.append(plan_diff_text(view.diff, f"what changed from the full plan (without {', '.join(view.lost)}):"))
    return "\n".join(lines).rstrip("\n") + "\n"


def replan_dict(view: ReplanView) -> dict[str, Any]:
    return {
        "format": REPLAN_JSON_VERSION,
        "name": view.full.spec.name,
        "file": view.full.spec.file,
        "without": list(view.lost),
        "ok": view.ok,
        "diagnostics": [d.as_dict() for d in view.diagnostics],
        "plan": plan_dict(view.plan) if view.plan is not None and view.diff is not None else None,
        "diff": plan_diff_dict(view.diff) if view.diff is not None else None,
    }


def replan_json(view: ReplanView) -> str:
    return json.dumps(replan_dict(view), indent=2) + "\n"


REPLAN_FORMATS: Mapping[str, Callable[[ReplanView], str]] = {"text": replan_text, "json": replan_json}
