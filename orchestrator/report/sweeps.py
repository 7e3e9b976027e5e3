"""Sweeps in words: the plan's packing (which copy, which device, which wave) and what a run saw."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..devices import DeviceSpec
from ..errors import DeviceSpecError, format_bytes
from ..plan.records import Plan


def short_device(name: str) -> str:
    """``/job:w/replica:0/task:1/device:GPU:0`` as ``w/1/GPU:0``: a table of copies stays readable."""
    try:
        device = DeviceSpec.parse(name)
    except DeviceSpecError:  # not a device (a report of another tool's): as written
        return name
    return f"{device.job or '?'}/{'?' if device.task is None else device.task}/{device.short() or '?'}"


def _values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def packing_lines(plan: Plan) -> list[str]:
    """Per sweep: each device's copies at once and why, then a row per copy (its id, values, device, wave)."""
    lines: list[str] = []
    for search in plan.spec.sweeps:
        packing = plan.packing_of(search.name)
        if packing is None:
            continue
        lines.append(f"sweep '{search.name}': {len(search.copies)} copies on {len(packing.devices)} device"
                     f"{'s' if len(packing.devices) != 1 else ''}")
        for d in packing.devices:
            sizes = {s.size for s in packing.copies if s.device == d.device}
            per_copy = "unknown" if d.per_copy is None else format_bytes(d.per_copy) if len(sizes) == 1 else \
                f"up to {format_bytes(d.per_copy)}"
            lines.append(f"  {short_device(d.device)}: {d.copies} copies, {d.at_once} at once in {d.waves} wave"
                         f"{'s' if d.waves != 1 else ''}, {per_copy} per copy: {d.why}")
            if d.shared_values:
                values = ", ".join(f"{name} {format_bytes(size)}" for name, size in d.shared_values)
                lines.append(f"    shared by its copies, held once: {values}")
        rows = [("copy", "id", "values", "device", "wave")]
        rows += [(str(s.index), s.id, _values(search.copies[s.index].values), short_device(s.device), str(s.wave))
                 for s in packing.copies]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return lines


def packing_dict(plan: Plan) -> dict[str, Any]:
    """The packing for ``plan --format json``."""
    return {search.name: {
        "params": list(search.params),
        "devices": [{"device": d.device, "copies": d.copies, "at_once": d.at_once, "waves": d.waves,
                     "per_copy_bytes": d.per_copy, "shared_bytes": d.shared, "kept_bytes": d.kept,
                     "shared_values": [{"value": name, "bytes": size} for name, size in d.shared_values],
                     "peak_alone_bytes": d.peak_alone, "peak_bytes": d.peak, "limit_bytes": d.limit,
                     "threads": d.threads, "why": d.why} for d in packing.devices],
        "side_by_side_loops": list(packing.side_by_side),
        "copies": [{"index": s.index, "id": s.id, "values": dict(search.copies[s.index].values),
                    "device": s.device, "wave": s.wave, "bytes": s.size, "slots": s.slots}
                   for s in packing.copies],
    } for search in plan.spec.sweeps if (packing := plan.packing_of(search.name)) is not None}


def failed_copies(run_report: Mapping[str, Any]) -> tuple[list[str], bool]:
    """A line per sweep with failed copies (each named with its values and error), and whether the run fails:
    it does unless every such sweep allows failures."""
    lines, fatal = [], False
    for name, sweep in (run_report.get("sweeps") or {}).items():
        failed = [c for c in sweep["copies"] if c["status"] == "failed"]
        if not failed:
            continue
        allowed = bool(sweep.get("allow_failures"))
        fatal = fatal or not allowed
        lines.append(f"{'warning' if allowed else 'error'}: sweep '{name}': {len(failed)} of {len(sweep['copies'])} "
                     f"copies failed{' (allow_failures: true)' if allowed else ''}; the others finished and no "
                     "failed copy was selected; run again with --resume to rerun only these:")
        lines += [f"  copy {c['index']} ({_values(c['params'])}, id {c['id']}) on {short_device(c['device'])}: "
                  f"{c.get('error', '?')}" for c in failed]
    return lines, fatal


def sweep_run_lines(run_report: Mapping[str, Any]) -> list[str]:
    """After a run: per sweep and device, copies planned and seen at once, and the peak seen under the cap."""
    lines = []
    for name, sweep in (run_report.get("sweeps") or {}).items():
        done = sum(1 for c in sweep["copies"] if c["status"] in ("finished", "reused"))
        stopped = sum(1 for c in sweep["copies"] if c["status"] == "stopped")
        rule = (sweep.get("rule") or {}).get("kind", "its rule")
        parts = []
        for device, d in sweep["devices"].items():
            seen = d.get("peak_bytes_seen")
            memory = f", peak {format_bytes(seen)} of {format_bytes(d['limit_bytes'])}" \
                if seen is not None and d.get("limit_bytes") else ""
            parts.append(f"{short_device(device)} {d['at_once']} at once planned, {d['most_at_once_seen']} seen"
                         f"{memory}")
        failed = sum(1 for c in sweep["copies"] if c["status"] == "failed")
        lines.append(f"sweep '{name}': {done} of {len(sweep['copies'])} copies finished"
                     f"{f', {stopped} stopped early ({rule})' if stopped else ''}"
                     f"{f', {failed} failed' if failed else ''}; " + "; ".join(parts))
    return lines
