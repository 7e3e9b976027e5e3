"""Renderers: diagnostics and plans as text, JSON, GitHub annotations, SARIF or Graphviz.

Renderers are chosen by name from registries (``DIAGNOSTIC_FORMATS``,
``PLAN_FORMATS``); each is a pure function from records to a string.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import Diagnostic, format_bytes, format_path
from ..paths import checkpoint_root, output_directory, safe_name
from ..plan.records import DeviceMemory, Partition, Placement, Plan
from ..ops import tf_name
from ..spec.params import describe
from .sarif import diagnostics_sarif
from .losses import loss_lines
from .sweeps import packing_dict, packing_lines, sweep_run_lines

PLAN_JSON_VERSION = 1


# --------------------------------------------------------------------------- diagnostics


Files = Sequence[tuple[str, Sequence[Diagnostic]]]


def _failed(diags: Sequence[Diagnostic], strict: bool) -> bool:
    return any(d.is_error or strict for d in diags)


def diagnostics_text(files: Files, strict: bool = False) -> str:
    lines = [d.render() for _, diags in files for d in diags]
    errors = sum(d.is_error for _, diags in files for d in diags)
    warnings = sum(not d.is_error for _, diags in files for d in diags)
    bad = sum(_failed(diags, strict) for _, diags in files)
    parts = [f"{bad} invalid" if bad else "all valid"]
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
    if warnings:
        parts.append(f"{warnings} warning{'s' if warnings != 1 else ''}" + (" (--strict: they fail)" if strict else ""))
    summary = f"{len(files)} file{'s' if len(files) != 1 else ''} checked: " + ", ".join(parts)
    return "\n".join([*lines, summary]) + "\n"


def diagnostics_json(files: Files, strict: bool = False) -> str:
    return json.dumps({
        "strict": strict,
        "files": [{"file": f, "valid": not _failed(diags, strict),
                   "diagnostics": [d.as_dict() for d in diags]} for f, diags in files],
        "errors": sum(d.is_error for _, diags in files for d in diags),
        "warnings": sum(not d.is_error for _, diags in files for d in diags),
    }, indent=2) + "\n"


def github_escape(text: str, prop: bool = False) -> str:
    """Escape text for a workflow command: its message (``prop=False``) or a property value such as ``file=``."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def diagnostics_github(files: Files, strict: bool = False) -> str:
    """GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per diagnostic."""
    out = []
    for _, diags in files:
        for d in diags:
            message = f"{d.message} ({d.hint})" if d.hint else d.message
            title = f"{d.code} at {format_path(d.path)}"
            out.append(f"::{d.severity} file={github_escape(d.file, True)},line={d.line},col={d.column},"
                       f"title={github_escape(title, True)}::{github_escape(message)}")
    return "\n".join(out) + ("\n" if out else "")


DIAGNOSTIC_FORMATS: Mapping[str, Callable[[Files, bool], str]] = {
    "text": diagnostics_text, "json": diagnostics_json, "github": diagnostics_github, "sarif": diagnostics_sarif,
}


# --------------------------------------------------------------------------- plans


def placement_line(p: Placement) -> str:
    """TF's graph-mode placement log line: ``name: (MatMul): /job:.../device:GPU:0``."""
    return f"{p.op}: ({tf_name(p.kind)}): {p.device_name}"


def _pct(m: DeviceMemory) -> str:
    return "-" if m.used_fraction is None else f"{100 * m.used_fraction:.1f}%"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def plan_text(plan: Plan) -> str:
    """A table per device (ops, peak vs limit, bytes in/out), then TF's placement log line per op, with why."""
    spec = plan.spec
    lines = [f"plan for '{spec.name}' ({spec.file}): {_count(len(plan.placements), 'op')} on "
             f"{len(plan.memory)} of {_count(len(spec.cluster.devices), 'device')}", ""]
    if spec.params:  # the effective values, and which of them an override set
        lines[-1:-1] = ["params: " + ", ".join(
            f"{p.name} = {describe(p.value)}" + (f" ({p.source})" if p.source != "default" else "")
            for p in spec.params)]
    header = ("device", "ops", "peak / limit", "used", "in", "out")
    rows = []
    for m in plan.memory:
        bound = "≥" if m.unknown else ""
        limit = format_bytes(m.limit) if m.limit is not None else "no limit"
        rows.append((m.device, str(len(m.ops)), f"{bound}{format_bytes(m.peak)} / {limit}", _pct(m),
                     format_bytes(m.bytes_in), format_bytes(m.bytes_out)))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    unknown = [m for m in plan.memory if m.unknown]
    for m in unknown:
        lines.append(f"  note: {len(m.unknown)} op(s) of unknown size on {m.device} "
                     f"({', '.join(m.unknown[:3])}{', ...' if len(m.unknown) > 3 else ''}): peak is a lower bound")
    for m in plan.memory:
        if m.device.endswith(":*"):
            lines.append(f"  note: Dask picks the GPU of {m.device} ops at run time; "
                         "their memory is counted as if on one GPU")
    lines += _tasks_text(plan) + packing_lines(plan)
    lines.append("")
    lines.append("placement (op: (Type): device  # why):")
    for p in plan.placements:
        lines.append(f"{placement_line(p)}  # {p.why()}")
        for t in p.transfers:
            size = "? bytes" if t.nbytes is None else format_bytes(t.nbytes)
            lines.append(f"    <- {t.ref} from {t.source} ({size})")
        weights = combine_weights(plan, p.op)
        if weights is not None:
            total = sum(weights["relative"])
            shares = ", ".join(str(Fraction(w, total)) if isinstance(total, int) else f"{w / total:.3g}"
                               for w in weights["relative"])
            lines.append(f"    weights {shares} ({_weighed_by(weights['split'])})")
    return "\n".join(lines) + "\n"


def combine_weights(plan: Plan, name: str) -> dict[str, Any] | None:
    """How a replicate's ``combine: mean`` weighs its copies, as validation fixed it; None for other ops."""
    op = plan.spec.op(name)
    if op.kind != "mean_n" or "weights" not in op.params:
        return None
    relative = [w if isinstance(w, float) else int(w) for w in op.params["weights"]]  # a sweep's may be any number
    return {"copies": [w / sum(relative) for w in relative], "relative": relative,
            "split": [str(s) for s in op.params.get("split", ())]}


def _weighed_by(split: Sequence[str]) -> str:
    if not split:
        return "equal: nothing is split"
    return f"the rows of each copy's piece of {', '.join(split)}"


def outer_partitions(plan: Plan) -> tuple[Partition, ...]:
    """The device partitions of the ops outside loops, as planned: one Dask task each at the default granularity."""
    return plan.partitions


def _tasks_text(plan: Plan) -> list[str]:
    parts = outer_partitions(plan)
    ops = sum(len(p.ops) for p in parts)
    lines = [f"tasks: {_count(len(parts), 'device partition')} for {_count(ops, 'op')} outside loops "
             "(one Dask task each; run --granularity op for one per op)"]
    for loop in plan.spec.loops:
        lines.append(f"loop '{loop.name}': {plan.loop_mode(loop.name).describe()}")
        if loop.checkpoint is not None:
            lines.append(f"  {checkpoint_line(plan, loop.name)}")
    return lines


def checkpoint_line(plan: Plan, name: str) -> str:
    """Where a loop's checkpoints go (with the spec's own output directory and the default cache directory) and
    what moves them."""
    spec = plan.spec
    loop = next(lp for lp in spec.loops if lp.name == name)
    checkpoint = loop.checkpoint
    assert checkpoint is not None
    base = spec.document.directory
    root = checkpoint_root(base, spec.name, checkpoint.path, output_directory(base, None, spec.run.output_dir))
    moved = "under the output directory: --output-dir moves it" if checkpoint.path is not None else \
        "in the cache directory: --cache-dir moves it"
    best = f", only when {checkpoint.monitor} improves ({checkpoint.mode})" if checkpoint.best_only else ""
    return (f"checkpoints every {checkpoint.every} steps{best}, the newest {checkpoint.keep} of its revision kept, in "
            f"{os.path.relpath(os.path.join(root, safe_name(loop.name)))}{os.sep} ({moved})")


def plan_dict(plan: Plan) -> dict[str, Any]:
    spec = plan.spec
    return {
        "format": PLAN_JSON_VERSION,
        "name": spec.name,
        "file": spec.file,
        "cluster": {"devices": [d.name for d in spec.cluster.devices], "default_job": spec.cluster.default_job},
        "devices": [{
            "device": m.device, "ops": list(m.ops), "peak_bytes": m.peak, "peak_op": m.peak_op,
            "limit_bytes": m.limit, "used": m.used_fraction, "unknown_size_ops": list(m.unknown),
            "bytes_in": m.bytes_in, "bytes_out": m.bytes_out, "over_limit_op": m.over_op,
            "largest_at_peak": [{"value": what, "bytes": size} for what, size in m.largest],
        } for m in plan.memory],
        "ops": [_op_dict(plan, p) for p in plan.placements],
        "partitions": [{"device": p.device.to_string(), "ops": list(p.ops)} for p in outer_partitions(plan)],
        "loops": {loop.name: {"mode": plan.loop_mode(loop.name).mode, "why": plan.loop_mode(loop.name).why}
                  for loop in spec.loops},
        "params": [p.as_dict() for p in spec.params],
        "sweeps": packing_dict(plan),
        "diagnostics": [d.as_dict() for d in plan.diagnostics],
    }


def _op_dict(plan: Plan, p: Placement) -> dict[str, Any]:
    entry = {
        "name": p.op, "op": p.kind, "device": p.device_name,
        "sources": {field: source for field, source in p.sources},
        "why": p.why(), "soft_fallback": p.fallback or None, "out_bytes": p.out_bytes,
        "inputs": [str(r) for r in plan.spec.op(p.op).inputs],
        "transfers": [{"input": str(t.ref), "from": t.source, "to": t.target, "bytes": t.nbytes}
                      for t in p.transfers],
    }
    weights = combine_weights(plan, p.op)
    if weights is not None:  # only a combine: mean has weights; other ops keep their fields
        entry["weights"] = weights
    return entry


def plan_json(plan: Plan) -> str:
    return json.dumps(plan_dict(plan), indent=2) + "\n"


_PALETTE = ("#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99", "#1f78b4", "#33a02c",
            "#e31a1c", "#ff7f00", "#6a3d9a", "#b15928")


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(*lines: str) -> str:
    """A quoted DOT label of several lines, joined by ``\\n`` (Graphviz's centred line break)."""
    return '"' + "\\n".join(_q(line)[1:-1] for line in lines) + '"'


def plan_dot(plan: Plan) -> str:
    """Graphviz DOT: one cluster per used device, inside it one per device partition (a Dask task),
    cross-device edges labelled with their bytes."""
    spec = plan.spec
    ops_on: dict[str, list[str]] = {m.device: [] for m in plan.memory}  # the memory plan's order, if any
    for p in plan.placements:
        ops_on.setdefault(p.device_name, []).append(p.op)
    task_of = {name: part for part in outer_partitions(plan) for name in part.ops}
    lines = [f"digraph {_q(spec.name)} {{", "  rankdir=LR;", "  node [shape=box, style=filled, fontsize=10];"]
    for i, (device, names) in enumerate((d, n) for d, n in ops_on.items() if n):
        colour = _PALETTE[i % len(_PALETTE)]
        lines.append(f"  subgraph {_q('cluster_' + str(i))} {{")
        lines.append(f"    label={_q(device)}; style=rounded; color={_q(colour)};")
        drawn: set[int] = set()
        for name in names:
            part = task_of.get(name)
            if part is not None and len(part.ops) > 1 and part.index not in drawn:
                drawn.add(part.index)
                lines.append(f"    subgraph {_q(f'cluster_{i}_task_{part.index}')} {{")
                lines.append(f"      label={_q('task ' + part.label)}; style=dashed; color=gray40; fontsize=9;")
                for member in part.ops:
                    lines.append(f"      {_q(member)} [label={_label(member, tf_name(spec.op(member).kind))}, "
                                 f"fillcolor={_q(colour)}];")
                lines.append("    }")
            elif part is None or len(part.ops) == 1:
                lines.append(f"    {_q(name)} [label={_label(name, tf_name(spec.op(name).kind))}, "
                             f"fillcolor={_q(colour)}];")
        lines.append("  }")
    device_of = {p.op: p.device_name for p in plan.placements}
    for p in plan.placements:
        op = spec.op(p.op)
        for ref in dict.fromkeys(op.inputs):  # add(a, a) draws one edge
            if device_of.get(ref.op) != p.device_name:
                size = spec.value(ref).nbytes
                label = "?" if size is None else format_bytes(size)
                lines.append(f"  {_q(ref.op)} -> {_q(p.op)} [label={_q(label)}, color=red, fontcolor=red];")
            else:
                lines.append(f"  {_q(ref.op)} -> {_q(p.op)};")
        for name in dict.fromkeys(op.after):
            lines.append(f"  {_q(name)} -> {_q(p.op)} [style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"


PLAN_FORMATS: Mapping[str, Callable[[Plan], str]] = {"text": plan_text, "json": plan_json, "dot": plan_dot}


# --------------------------------------------------------------------------- runs


def _startup(run_report: Mapping[str, Any]) -> str:
    """The start-up apart from the compute: a cluster start (1.5-7 s) once hid in the figure or was left out."""
    startup = float(run_report.get("startup_seconds") or 0.0)
    return f" after {startup:.2f} s of start-up (cluster and device workers)" if startup else ""


def placement_summary(run_report: Mapping[str, Any]) -> str:
    """The end-of-run summary: ops and output bytes per device, then totals."""
    rows = sorted(run_report["placement"].items())
    width = max([len(device) for device, _ in rows] + [6])
    lines = ["", "placement summary:", f"  {'device'.ljust(width)}  {'ops':>5}  {'output bytes':>12}"]
    for device, slot in rows:
        lines.append(f"  {device.ljust(width)}  {slot['ops']:>5}  {format_bytes(slot['bytes']):>12}")
    totals = run_report["totals"]
    exchanged = int(totals.get("bytes_exchanged", 0))
    dask_moved = int(totals["bytes_moved"]) - exchanged
    sent = f", loop windows sent {format_bytes(exchanged)} worker to worker" if exchanged else ""
    reused = sum(1 for op in run_report["ops"] if str(op.get("cache", "")).startswith("reused"))
    cached = f", {_count(reused, 'op')} from the cache" if reused else ""
    if run_report.get("mode") == "sync":  # run --sync: no cluster, no Dask transfers to speak of
        lines.append(f"  {_count(totals['ops'], 'op')} ({_count(totals['tasks'], 'task')}, "
                     f"{run_report.get('granularity', 'partition')} granularity{cached}) in "
                     f"{run_report['elapsed_seconds']:.2f} s in this process (--sync: no cluster); "
                     f"{_count(totals['moves'], 'planned transfer')}, {format_bytes(int(totals['bytes_moved']))} "
                     f"copied between devices; placement verified against the plan")
        return "\n".join(lines) + "\n"
    lines.append(f"  {_count(totals['ops'], 'op')} ({_count(totals['tasks'], 'Dask task')}, "
                 f"{run_report.get('granularity', 'partition')} granularity{cached}) in "
                 f"{run_report['elapsed_seconds']:.2f} s{_startup(run_report)}; "
                 f"{_count(totals['moves'], 'planned transfer')}, "
                 f"Dask moved {format_bytes(dask_moved)} in {totals.get('transfers_seen', 0)}{sent}; "
                 f"placement verified against the plan")
    lines += ["  " + line for line in [*loop_step_lines(run_report), *sweep_run_lines(run_report),
                                       *loss_lines(run_report)]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- loop steps

# The report's transport (how loop windows' values went between device workers) in words.
TRANSPORT_WORDS = {"links": "values over direct links", "dask-comms": "values over Dask's comms (TLS)",
                   "in-process": "values handed over in one process"}
# A critical path's segment kinds in the order its summary names them, and their words ("op" is compute).
PATH_KINDS = (("op", "compute"), ("transit", "transit"), ("wait", "wait"), ("send", "send"),
              ("overhead", "overhead"))


def milliseconds(value: float) -> str:
    """``0.31 ms``; ``<0.01 ms`` for a time that is there but would read as none."""
    return "<0.01 ms" if 0 < value < 5e-6 else f"{value * 1e3:.2f} ms"


def path_by_kind(segments: Iterable[tuple[str, float]]) -> dict[str, float]:
    """A critical path's seconds summed per segment kind: PATH_KINDS's order, then any other kind."""
    sums: dict[str, float] = {kind: 0.0 for kind, _ in PATH_KINDS}
    seen: set[str] = set()
    for kind, seconds in segments:
        sums[kind] = sums.get(kind, 0.0) + seconds
        seen.add(kind)
    return {kind: total for kind, total in sums.items() if kind in seen}


def step_line(loop: str, seconds: float, by_kind: Mapping[str, float], sampled: int, transport: str) -> str:
    """``train: a step 1.07 ms on the critical path (compute 0.31 ms, ...; 10 steps sampled; values over ...)``."""
    words = dict(PATH_KINDS)
    parts = ", ".join(f"{words.get(kind, kind)} {milliseconds(total)}" for kind, total in by_kind.items())
    tail = [f"{_count(sampled, 'step')} sampled"]
    if transport:
        tail.append(TRANSPORT_WORDS.get(transport, f"values over {transport}"))
    return f"{loop}: a step {milliseconds(seconds)} on the critical path ({parts}; {'; '.join(tail)})"


def loop_step_lines(run_report: Mapping[str, Any]) -> list[str]:
    """A line per loop whose steps the run pictured (gang windows): its critical path, by kind."""
    lines = []
    for loop, picture in sorted((run_report.get("loop_steps") or {}).items()):
        path = picture.get("critical_path") or {}
        segments = path.get("segments") or []
        if segments:
            by_kind = path_by_kind((str(s["kind"]), float(s["seconds"])) for s in segments)
            lines.append(step_line(loop, float(path.get("seconds") or 0.0), by_kind,
                                   len(picture.get("sampled_steps") or ()), str(run_report.get("transport") or "")))
    return lines
