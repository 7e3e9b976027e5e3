"""Renderers of a :class:`~orchestrator.plan.diff.PlanDiff`: text, JSON, GitHub annotations plus markdown.

``PLAN_DIFF_FORMATS`` is the registry ``orchestrate plan --diff --format``
offers. Each renderer is a pure function from the diff to a string; the
GitHub one reuses the workflow-command escaping of ``orchestrator.report``
(which is why this module sits one layer above it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import format_bytes
from ..ops import tf_name
from ..plan.diff import MemoryChange, PlanDiff, PlannedMove
from .text import github_escape

PLAN_DIFF_JSON_VERSION = 1


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _signed(n: int) -> str:
    return "0 B" if n == 0 else ("+" if n > 0 else "-") + format_bytes(abs(n))


def _peak(value: int | None, lower_bound: bool) -> str:
    """A planned peak as the plan shows it: ``≥`` when ops of unknown size make it a lower bound."""
    return "-" if value is None else ("≥" if lower_bound else "") + format_bytes(value)


def _limit(value: int | None) -> str:
    return "no limit" if value is None else format_bytes(value)


def _note(m: MemoryChange) -> str:
    """What the numbers alone do not say: the device is new or gone, or its limit changed."""
    if m.before is None:
        return "newly used"
    if m.after is None:
        return "no longer used"
    if m.limit_before != m.limit_after:
        return f"limit {_limit(m.limit_before)} -> {_limit(m.limit_after)}"
    return ""


def _change(m: MemoryChange) -> str:
    """``+24 B`` or ``-24 B, no longer used``."""
    return ", ".join(part for part in (_signed(m.delta), _note(m)) if part)


def summary_line(diff: PlanDiff) -> str:
    """One line of counts, or that nothing changed."""
    if diff.empty:
        return "no changes: the same ops on the same devices, the same transfers, the same peak memory"
    memory = diff.memory_changes
    grew = f" ({len(diff.memory_grown)} grew)" if diff.memory_grown else ""
    peaks = f"peak memory changed on {_count(len(memory), 'device')}{grew}" if memory else "peak memory unchanged"
    return (f"{_count(len(diff.moved), 'op')} moved, {len(diff.added)} added, {len(diff.removed)} removed; "
            f"{_count(len(diff.transfers_added), 'transfer')} added, {len(diff.transfers_removed)} removed; {peaks}")


def _title(diff: PlanDiff) -> str:
    name = f"'{diff.new_name}'" if diff.old_name == diff.new_name else f"'{diff.old_name}' -> '{diff.new_name}'"
    return f"plan diff for {name}: {diff.old_file} -> {diff.new_file}"


def _transfer(t: PlannedMove) -> str:
    size = "? bytes" if t.nbytes is None else format_bytes(t.nbytes)
    return f"{t.value} from {t.source} to {t.target} ({size})"


def plan_diff_text(diff: PlanDiff, title: str | None = None) -> str:
    """The title, a summary line, then one section per kind of change (sections with nothing are left out)."""
    lines = [title or _title(diff), summary_line(diff)]
    if diff.moved:
        lines += ["", "moved (op: (Type): before -> after  # why, in the new plan):"]
        lines += [f"  {m.op}: ({tf_name(m.kind)}): {m.before} -> {m.after}  # {m.why}" for m in diff.moved]
    if diff.added:
        lines += ["", "added (op: (Type): device  # why):"]
        lines += [f"  {e.op}: ({tf_name(e.kind)}): {e.device}  # {e.why}" for e in diff.added]
    if diff.removed:
        lines += ["", "removed (op: (Type): device it had):"]
        lines += [f"  {e.op}: ({tf_name(e.kind)}): {e.device}" for e in diff.removed]
    if diff.transfers_added or diff.transfers_removed:
        lines += ["", "transfers (value from device to device):"]
        lines += [f"  + {_transfer(t)}" for t in diff.transfers_added]
        lines += [f"  - {_transfer(t)}" for t in diff.transfers_removed]
    changes = diff.memory_changes
    if changes:
        lines += ["", "peak memory per device (before -> after, change):"]
        rows = [(m.device, _peak(m.before, m.lower_bound_before), _peak(m.after, m.lower_bound_after),
                 _signed(m.delta), _note(m)) for m in changes]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for device, before, after, delta, note in rows:
            lines.append(f"  {device.ljust(widths[0])}  {before.rjust(widths[1])} -> {after.rjust(widths[2])}  "
                         f"{delta.rjust(widths[3])}{f' ({note})' if note else ''}")
        if len(changes) < len(diff.memory):
            lines.append(f"  ({_count(len(diff.memory) - len(changes), 'other device')} unchanged)")
    return "\n".join(lines) + "\n"


def plan_diff_dict(diff: PlanDiff) -> dict[str, Any]:
    """The diff as plain data; documented in docs/ci.md (``format`` changes only on breaking edits)."""
    def where(file: str, line: int, column: int) -> dict[str, Any]:
        return {"file": file, "line": line, "column": column}

    def transfer(t: PlannedMove) -> dict[str, Any]:
        return {"value": t.value, "from": t.source, "to": t.target, "bytes": t.nbytes}

    return {
        "format": PLAN_DIFF_JSON_VERSION,
        "old": {"file": diff.old_file, "name": diff.old_name},
        "new": {"file": diff.new_file, "name": diff.new_name},
        "changed": not diff.empty,
        "summary": {"moved": len(diff.moved), "added": len(diff.added), "removed": len(diff.removed),
                    "transfers_added": len(diff.transfers_added), "transfers_removed": len(diff.transfers_removed),
                    "memory_changed": len(diff.memory_changes), "memory_grew": len(diff.memory_grown)},
        "moved": [{"name": m.op, "op": m.kind, "before": m.before, "after": m.after, "why": m.why,
                   "why_before": m.why_before, **where(m.file, m.line, m.column)} for m in diff.moved],
        "added": [{"name": e.op, "op": e.kind, "device": e.device, "why": e.why,
                   **where(e.file, e.line, e.column)} for e in diff.added],
        "removed": [{"name": e.op, "op": e.kind, "device": e.device, "why": e.why,
                     **where(e.file, e.line, e.column)} for e in diff.removed],
        "transfers_added": [transfer(t) for t in diff.transfers_added],
        "transfers_removed": [transfer(t) for t in diff.transfers_removed],
        "memory": [{"device": m.device, "before_bytes": m.before, "after_bytes": m.after, "delta_bytes": m.delta,
                    "limit_before_bytes": m.limit_before, "limit_after_bytes": m.limit_after,
                    "lower_bound_before": m.lower_bound_before, "lower_bound_after": m.lower_bound_after,
                    "peak_op": m.peak_op, "changed": m.changed} for m in diff.memory],
    }


def plan_diff_json(diff: PlanDiff) -> str:
    return json.dumps(plan_diff_dict(diff), indent=2) + "\n"


def _annotation(level: str, title: str, message: str, file: str | None = None, line: int = 0, col: int = 0) -> str:
    where = f"file={github_escape(file, True)},line={line},col={col}," if file else ""
    return f"::{level} {where}title={github_escape(title, True)}::{github_escape(message)}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(diff: PlanDiff) -> list[str]:
    """The summary a pull-request comment shows: tables of moved ops and memory, lists of the rest."""
    lines = [f"### Plan diff: `{diff.old_file}` → `{diff.new_file}`", "", summary_line(diff)]
    if diff.moved:
        lines += ["", "| moved op | type | before | after | why (new plan) |", "|---|---|---|---|---|"]
        lines += [f"| `{m.op}` | {tf_name(m.kind)} | `{m.before}` | `{m.after}` | {_cell(m.why)} |" for m in diff.moved]
    if diff.added:
        lines += ["", "Added: " + ", ".join(f"`{e.op}` ({tf_name(e.kind)}) on `{e.device}`" for e in diff.added)]
    if diff.removed:
        lines += ["", "Removed: " + ", ".join(f"`{e.op}` ({tf_name(e.kind)}) from `{e.device}`"
                                            for e in diff.removed)]
    if diff.transfers_added or diff.transfers_removed:
        lines += ["", "Transfers:"]
        lines += [f"- added: `{t.value}` `{t.source}` → `{t.target}`" for t in diff.transfers_added]
        lines += [f"- removed: `{t.value}` `{t.source}` → `{t.target}`" for t in diff.transfers_removed]
    if diff.memory_changes:
        lines += ["", "| device | peak before | peak after | change |", "|---|---:|---:|---:|"]
        lines += [f"| `{m.device}` | {_peak(m.before, m.lower_bound_before)} | {_peak(m.after, m.lower_bound_after)} "
                  f"| {_cell(_change(m))} |" for m in diff.memory_changes]
    return lines


def plan_diff_github(diff: PlanDiff) -> str:
    """Workflow-command annotations (``::warning`` for moved ops and memory growth, ``::notice`` for the
    rest), then a markdown summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.

    Annotations point into the new spec; what only the old spec had (a removed op, a device no longer
    used) gets none of its place, since the old spec is often a copy outside the checkout.
    """
    out = []
    for m in diff.moved:
        out.append(_annotation("warning", f"op moved: {m.op}",
                               f"{m.op} ({tf_name(m.kind)}) moved from {m.before} to {m.after} ({m.why})",
                               m.file, m.line, m.column))
    for e in diff.added:
        out.append(_annotation("notice", f"op added: {e.op}", f"{e.op} ({tf_name(e.kind)}) on {e.device} ({e.why})",
                               e.file, e.line, e.column))
    for e in diff.removed:
        out.append(_annotation("notice", f"op removed: {e.op}",
                               f"{e.op} ({tf_name(e.kind)}) was on {e.device} in {e.file}"))
    for c in diff.memory_changes:
        text = (f"peak memory of {c.device}: {_peak(c.before, c.lower_bound_before)} -> "
                f"{_peak(c.after, c.lower_bound_after)} ({_change(c)})")
        if c.after is not None and c.peak_op:
            text += f"; the op at the peak is '{c.peak_op}'"
        level, title = ("warning", "peak memory grew") if c.grew else ("notice", "peak memory changed")
        if c.after is None:
            out.append(_annotation(level, title, text))
        else:
            out.append(_annotation(level, title, text, c.file, c.line, c.column))
    return "\n".join([*out, *_markdown(diff)]) + "\n"


PLAN_DIFF_FORMATS: Mapping[str, Callable[[PlanDiff], str]] = {
    "text": plan_diff_text, "json": plan_diff_json, "github": plan_diff_github,
}
