"""Run every benchmark (``make bench``), each in its own process with a time budget.

B1 run overhead, B2 compile speed, B3 transfers, B4 data-parallel scaling,
B5 start-up, the client memory of a long loop, B7 polyfit and the B4 towers
across two simulated hosts (network namespaces; skipped without root), B8 the
cost of checkpoints in polyfit's loop, B9 a 64-copy search packed on 2 simulated
GPUs beside one at a time and Ray, B11 validate of a search by its copies, B10 the
recovery from a lost device worker, and B6
the polyfit example's training loop beside hand-written Dask futures, Ray and
TensorFlow (Ray and TensorFlow only where installed: ``pip install -e '.[anchors]'``). Each
benchmark prints its own figures and writes ``benchmarks/results/<name>.json``;
this script then writes ``benchmarks/results/summary.json``, draws
``benchmarks/results/scaling.png`` (B1 vs number of ops, B4 vs devices),
rewrites the figures table of ``benchmarks/README.md`` and prints it.

The whole run is kept under 13 minutes: a benchmark gets its own budget or
what is left of the total (less a reserve for those after it), whichever is
less; one that runs out of time is stopped (its whole process group: clusters
included) and reported as such, keeping the sizes it had finished (each
benchmark writes its JSON after every size).
Because benchmarks measure time, this script also measures how busy the
machine was with *other* processes while each one ran (CPU time of the whole
machine minus that of the benchmark's own processes): figures taken on a busy
2-core machine are pessimistic, and the table says so.

    python benchmarks/run_all.py [--quick] [--only B1,B3]

``--only`` writes ``summary-partial.json`` and leaves the summary, the plot and
the README table of the last full run alone.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
README = os.path.join(HERE, "README.md")
TOTAL_BUDGET = 13 * 60.0  # seconds for all benchmarks; `make bench` (installing included) must take <= 15 minutes
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


@dataclass(frozen=True)
class Bench:
    id: str
    title: str
    script: str
    result: str  # file name in results/
    budget: float  # seconds at most
    reserve: float  # seconds kept for it while the benchmarks before it run (about its time on an idle machine)


# reserves: about 1.5x each one's time in the last full run on the 2-core machine (B1 39 s, B2 26, B3 6, B4 39,
# B5 19, L 3, B7 111, B8 23, B6 143); their sum must leave the first ones room to run at all
BENCHES = (
    Bench("B1", "run overhead", "bench_run.py", "run_overhead.json", 380, 60),
    Bench("B2", "compile speed", "bench_compile.py", "compile.json", 160, 40),
    Bench("B3", "transfers", "bench_transfers.py", "transfers.json", 120, 20),
    Bench("B4", "data-parallel scaling", "bench_scaling.py", "scaling.json", 150, 60),
    Bench("B5", "start-up", "bench_startup.py", "startup.json", 120, 30),
    Bench("L", "loop memory", "bench_loop_memory.py", "loop_memory.json", 130, 20),
    # fits its second round only if the budget allows (see bench_hosts.py); skips without root
    Bench("B7", "across two simulated hosts", "bench_hosts.py", "hosts.json", 270, 120),
    # polyfit with a checkpoint every 100 steps and without, alternating (rounds as the budget allows)
    Bench("B8", "checkpoint cost", "bench_checkpoints.py", "checkpoints.json", 150, 40),
    # the search issue names its benchmark B8, which the checkpoint cost had taken: this one is B9
    Bench("B9", "64-copy search packed vs one at a time and Ray", "bench_search.py", "search.json", 110, 60),
    # validate of a search by its copies (the most a spec may make, 20k) and the refusal of 250k
    Bench("B11", "validate of a search by copies", "bench_validate_copies.py", "validate_copies.json", 90, 30),
    # a device worker killed mid-loop with run.on_device_lost: wait, beside a clean run (rounds as the budget allows)
    Bench("B10", "recovery from a lost device worker", "bench_recovery.py", "recovery.json", 200, 90),
    # last: it fits as many rounds as its budget allows (see bench_polyfit.py), so it takes what the others left
    Bench("B6", "polyfit loop vs Dask, Ray, TF", "bench_polyfit.py", "polyfit.json", 360, 150),
)


@dataclass(frozen=True)
class Figure:
    bench: str
    name: str
    measured: float | None
    shown: str
    goal: str
    met: bool | None
    why: str = ""  # why there is no measurement, when there is none and the benchmark itself ran


# --------------------------------------------------------------------------- running


def cpu_jiffies() -> tuple[float, float]:
    """(busy, total) seconds of CPU over the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as handle:
        fields = [float(x) for x in handle.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_one(bench: Bench, quick: bool, timeout: float) -> dict[str, Any]:
    path = os.path.join(RESULTS, bench.result)
    if os.path.exists(path):
        os.remove(path)  # never report a figure from an earlier run
    cmd = [sys.executable, os.path.join(HERE, bench.script), *(["--quick"] if quick else []),
           "--budget", f"{timeout:.0f}"]
    print(f"\n=== {bench.id} {bench.title}: {' '.join(os.path.relpath(c) for c in cmd[1:])} "
          f"(budget {timeout:.0f} s) ===", flush=True)
    busy0, _ = cpu_jiffies()
    ours0 = children_cpu()
    started = time.perf_counter()
    # its own session, so a timeout can stop the whole group: Nanny-managed workers included
    process = subprocess.Popen(cmd, cwd=os.path.dirname(HERE), start_new_session=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    status = "ok"
    try:
        code = process.wait(timeout=timeout)
        if code != 0:
            status = f"failed (exit {code})"
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout:.0f} s"  # (its stopped workers' CPU then counts as "other processes")
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    seconds = time.perf_counter() - started
    busy1, _ = cpu_jiffies()
    ours = children_cpu() - ours0
    others = max(0.0, (busy1 - busy0) - ours)
    data = None
    if os.path.exists(path):  # a benchmark stopped by its budget may have written what it measured so far
        try:
            with open(path) as handle:
                data = json.load(handle)
        except ValueError:
            data = None
        if status != "ok" and data:
            status += " (partial results kept)"
    if status == "ok" and data is None:
        status = f"wrote no {bench.result}"
    print(f"--- {bench.id}: {status} in {seconds:.1f} s; other processes used {others / seconds:.2f} "
          f"of the machine's {os.cpu_count()} cores meanwhile", flush=True)
    return {"id": bench.id, "title": bench.title, "script": bench.script, "status": status, "seconds": seconds,
            "cpu_seconds": ours, "other_processes_cores": others / seconds, "data": data}


# --------------------------------------------------------------------------- figures


def _fig(bench: str, name: str, value: float | None, fmt: str, goal: str, test: Callable[[float], bool],
         note: str = "") -> Figure:
    if value is None:
        return Figure(bench, name, None, "—", goal, None)
    return Figure(bench, name, value, fmt.format(value) + (f" ({note})" if note else ""), goal, bool(test(value)))


def figures(runs: dict[str, dict[str, Any]]) -> list[Figure]:
    def data(bench: str) -> dict[str, Any]:
        return (runs.get(bench) or {}).get("data") or {}

    def get(d: dict[str, Any], *path: str) -> Any:
        for p in path:
            if not isinstance(d, dict) or p not in d:
                return None
            d = d[p]
        return d

    out: list[Figure] = []
    b1 = data("B1")
    for n, label in (("1000", "1k"), ("10000", "10k")):
        cpu = get(b1, n, "cpu", "ratio")
        out.append(_fig("B1", f"run overhead, {label} tiny ops: orchestrate run (partitions) ÷ hand-written Dask "
                              "(a task per op)",
                        get(b1, n, "ratio"), "{:.3f}", "≤ 0.1", lambda v: v <= 0.1,
                        f"CPU time: {cpu:.3f}" if cpu is not None else ""))
    for n, label in (("1000", "1k"), ("10000", "10k")):
        cpu = get(b1, n, "cpu", "ratio_op")
        out.append(_fig("B1", f"run overhead, {label} tiny ops: orchestrate run --granularity op ÷ hand-written Dask",
                        get(b1, n, "ratio_op"), "{:.3f}", "≤ 1.05", lambda v: v <= 1.05,
                        f"CPU time: {cpu:.3f}" if cpu is not None else ""))
    b2 = data("B2")
    for n, label in (("10000", "10k"), ("100000", "100k")):
        out.append(_fig("B2", f"compile speed, {label} ops: validate+place+plan+compile ÷ libyaml parse (CPU time)",
                        get(b2, n, "cpu", "stages_over_parse"), "{:.2f}", "≤ 1.5", lambda v: v <= 1.5))
    out.append(_fig("B2", "compile growth: 100k ÷ 10k ops (CPU time)", get(b2, "growth_100k_over_10k"), "{:.2f}",
                    "≤ 11", lambda v: v <= 11))
    b3 = data("B3")
    for granularity in ("partition", "op"):
        out.append(_fig("B3", f"transfers: bytes moved between workers ÷ plan minimum, {granularity} granularity",
                        get(b3, granularity, "summary", "worst_ratio"), "{:.4f}", "1.00",
                        lambda v: round(v, 2) == 1.00))
    b4 = data("B4")
    raw = get(b4, "raw_numpy", "speedup")
    out.append(_fig("B4", "data-parallel scaling: 2 simulated devices ÷ 1 (compute-bound towers)",
                    get(b4, "speedup_2_over_1"), "{:.2f}×", "≥ 1.7", lambda v: v >= 1.7,
                    f"2 plain NumPy processes meanwhile: {raw:.2f}×" if raw is not None else ""))
    b5 = data("B5")
    configs = get(b5, "configs") or {}
    out.append(_fig("B5", "start-up: embedded cluster ready ÷ LocalCluster (same workers)", get(b5, "ratio"),
                    "{:.3f}", "≤ 1.1", lambda v: v <= 1.1,
                    ", ".join(f"{k} workers: {v['embedded_s']:.2f} s vs {v['local_s']:.2f} s" for k, v in configs.items())))
    loop = data("L")
    growth = get(loop, "growth")
    steps = get(loop, "steps")
    out.append(_fig("L", f"loop memory: client RSS after {steps or 'N'} steps ÷ after 100, − 1",
                    None if growth is None else 100 * growth, "{:+.1f}%", "within ±20%", lambda v: abs(v) <= 20))
    out += polyfit_figures(data("B6"))
    out += hosts_figures(data("B7"))
    b8 = data("B8")
    every, none = get(b8, "sides", "every", "loop_s"), get(b8, "sides", "none", "loop_s")
    out.append(_fig("B8", f"polyfit, {b8.get('steps') or 2000} steps: checkpoints every {b8.get('every') or 100} "
                          "steps ÷ none, training loop", get(b8, "ratio"), "{:.3f}", "≤ 1.05", at_most(1.05),
                    f"{every:.2f} s vs {none:.2f} s, medians of {b8.get('rounds_done')}" if every and none else ""))
    out += search_figures(data("B9"))
    out += validate_copies_figures(data("B11"))
    b10 = data("B10")
    out.append(_fig("B10", "a device worker killed mid-loop (on_device_lost: wait): kill to its work redone, s",
                    b10.get("median_recovery_s"), "{:.2f}", "< 10", lambda v: v < 10,
                    f"every step's loss equal to a clean run's: {b10.get('all_equal')}" if b10 else ""))
    out.append(_fig("B10", "that run's whole time ÷ a clean run's", b10.get("median_ratio"), "{:.2f}", "reported",
                    lambda v: True, f"{len(b10.get('rounds') or [])} round(s), {b10.get('steps')} steps" if b10 else ""))
    return out


def validate_copies_figures(b11: dict[str, Any]) -> list[Figure]:
    """B11: validate of the largest search a spec may hold, its growth per copy, and the refusal of 250k."""
    copies = b11.get("copies") or {}
    largest = copies.get(max(copies, key=int)) if copies else None
    refused = b11.get("refused_250k") or {}
    return [
        _fig("B11", f"orchestrate validate, a search of {max(copies, key=int) if copies else '20000'} copies "
                    "(the most a spec may make), wall s", (largest or {}).get("wall_s"), "{:.1f}", "< 30",
             lambda v: v < 30, f"{largest['cpu_s']:.1f} s CPU" if largest else ""),
        _fig("B11", "validate per copy beyond start-up: largest ÷ 1k copies (linear in copies)", b11.get("linearity"),
             "{:.2f}", "≤ 1.5", at_most(1.5)),
        _fig("B11", "orchestrate validate, 250k copies: refused (exit 1), wall s", refused.get("wall_s"), "{:.1f}",
             "< 30", lambda v: v < 30, f"exit {refused.get('exit_codes')}" if refused else ""),
    ]


def search_figures(b9: dict[str, Any]) -> list[Figure]:
    """B9: packed ÷ one at a time and packed ÷ Ray, for the latency-bound and the compute-bound model."""
    out: list[Figure] = []
    done = b9.get("rounds_done")
    for variant, v in (b9.get("variants") or {}).items():
        sides = v.get("sides") or {}
        packed, alone = (sides.get("packed") or {}).get("run_s"), (sides.get("one_at_a_time") or {}).get("run_s")
        ray = (v.get("ray") or {}).get("run_s")
        name = f"64-copy search on 2 simulated GPUs, {variant}-bound model"
        planned = next(iter((v.get("planned") or {}).values()), None)
        if variant == "sizes":  # copies of four sizes sharing their data (issue 26)
            name = "64 copies of 4 sizes sharing their data on 2 simulated GPUs"
        note = f"; {planned['at_once']} at once at most, {planned['padded_at_once']} if each were the largest" \
            if planned else ""
        out.append(_fig("B9", f"{name}: packed ÷ one at a time", v.get("packed_over_one_at_a_time"), "{:.3f}",
                        "≤ 0.5", at_most(0.5), f"{packed:.3f} s vs {alone:.3f} s, medians of {done}; no GPU over "
                        f"its cap{note}" if packed and alone else ""))
        if v.get("ray_note"):
            continue  # no Ray side for this case: said in its own note
        if ray is None:
            out.append(Figure("B9", f"{name}: packed ÷ Ray (fractional num_gpus)", None, "—", "≤ 1.0", None,
                              why=str(b9.get("ray_note") or "Ray left out")))
        else:
            out.append(_fig("B9", f"{name}: packed ÷ Ray (fractional num_gpus)", v.get("packed_over_ray"), "{:.3f}",
                            "≤ 1.0", at_most(1.0), f"{packed:.3f} s vs {ray:.3f} s"))
    return out


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def _polyfit_layout(b6: dict[str, Any], ours: dict[str, Any], ratios: dict[str, Any], head: str) -> list[Figure]:
    """One of our sides (a process layout) ÷ each anchor, loop and whole process, and its loop ÷ plain NumPy's."""
    out: list[Figure] = []
    sides = b6.get("sides") or {}
    goals = {"ray": 1.0, "dask-futures": 0.25, "tensorflow": 0.7}  # TF: issue 30's (issue 19 asked for 1.0)
    names = {"ray": "Ray", "dask-futures": "hand-written Dask futures", "tensorflow": "TensorFlow"}
    done = b6.get("rounds_done")
    rounds = f", medians of {done}" if done and done > 1 else (", 1 round" if done == 1 else "")
    for anchor in ("ray", "dask-futures", "tensorflow"):
        r = ratios.get(anchor) or {}
        theirs = sides.get(anchor) or {}
        goal = goals[anchor]
        name = f"{head} ÷ {names[anchor]}"
        if r.get("skipped"):
            out.append(Figure("B6", name, None, "—", f"≤ {goal}", None, why=f"skipped: {r['skipped']}"))
            continue
        if not r:
            continue
        for kind, label in (("loop", "training loop"), ("whole", "whole process")):
            a, b = ours.get(f"{kind}_s"), theirs.get(f"{kind}_s")
            out.append(_fig("B6", f"{name}, {label}", r.get(kind), "{:.3f}", f"≤ {goal}", at_most(goal),
                            f"{a:.1f} s vs {b:.1f} s{rounds}" if a is not None and b is not None else ""))
    numpy_side = sides.get("numpy") or {}
    if ours.get("loop_s") is not None and numpy_side.get("loop_s"):
        ratio = ours["loop_s"] / numpy_side["loop_s"]
        out.append(_fig("B6", f"{head} ÷ plain NumPy in one process, training loop", ratio, "{:.1f}", "≤ 5",
                        at_most(5.0), f"{ours['loop_s']:.2f} s vs {numpy_side['loop_s']:.2f} s{rounds}"))
    return out


def polyfit_figures(b6: dict[str, Any]) -> list[Figure]:
    """B6: each of our layouts ÷ each anchor, loop and whole process, and ÷ plain NumPy; and whether every side's
    w converged."""
    out: list[Figure] = []
    steps = b6.get("steps")
    sides = b6.get("sides") or {}
    for ours, key, label in (("orchestrate", "ratios", "orchestrate run (as written: processes: host)"),
                             ("orchestrate-device", "ratios_device", "orchestrate run, processes: device")):
        if ours in sides:
            out += _polyfit_layout(b6, sides[ours], b6.get(key) or {}, f"polyfit, {steps or 2000} steps: {label}")
    measured = {k: v for k, v in sides.items() if isinstance(v, dict) and v.get("w") is not None}
    worst = None
    if measured:
        worst = max(max(abs(x - t) for x, t in zip(v["w"], (5.0, 0.0, 3.0), strict=True)) for v in measured.values())
    tolerance = float(b6.get("tolerance", 0.05))
    name = (f"polyfit, {steps or 2000} steps: largest error of a final w vs [5, 0, 3], any side "
            f"({', '.join(sorted(measured)) or 'none'})")
    if worst is not None and steps is not None and steps < 2000:  # (--quick) too few steps to get there
        out.append(Figure("B6", name, worst, f"{worst:.4f}", f"≤ {tolerance:g} after 2000 steps", None))
    else:
        out.append(_fig("B6", name, worst, "{:.4f}", f"≤ {tolerance:g}", lambda v: v <= tolerance))
    return out


def hosts_figures(b7: dict[str, Any]) -> list[Figure]:
    """B7: polyfit across 2 hosts ÷ 1 host, B4's towers across 2 hosts vs 1 device, and the lost link."""
    names = [f"polyfit, {b7.get('steps') or 2000} steps: 2 hosts ÷ 1 host, training loop",
             f"polyfit, {b7.get('steps') or 2000} steps: 2 hosts ÷ 1 host, whole process",
             "towers (B4) across 2 hosts ÷ 1 device (compute span)",
             "a link lost mid-loop: seconds from the cut to a one-line error"]
    goals = ["≤ 2.0 at 0.5 ms", "≤ 2.0 at 0.5 ms", "≥ 1.7", "≤ 10 s"]
    if b7.get("skipped"):
        return [Figure("B7", n, None, "—", g, None, why=f"skipped: {b7['skipped']}") for n, g in zip(names, goals)]
    poly, towers, lost = b7.get("polyfit") or {}, b7.get("towers") or {}, b7.get("lost_link") or {}
    link = b7.get("link") or {}
    one, two = poly.get("1 host") or {}, poly.get("2 hosts") or {}
    delay = "0.5 ms delay" if link.get("netem") else "no netem here: no delay"
    estimate = (poly.get("estimate_with_delay") or {}).get("ratio_loop")
    out = []
    for name, kind in zip(names[:2], ("loop", "whole")):
        a, b = two.get(f"{kind}_s"), one.get(f"{kind}_s")
        note = f"{a:.2f} s vs {b:.2f} s, {delay}" if a is not None and b is not None else delay
        if kind == "loop" and estimate is not None:
            note += f"; estimated with 0.5 ms: {estimate:.2f}"
        figure = _fig("B7", name, poly.get(f"ratio_{kind}"), "{:.3f}", "≤ 2.0 at 0.5 ms", at_most(2.0), note)
        # the goal is set at 0.5 ms of delay: a figure taken without it can be shown, not judged
        out.append(figure if link.get("netem") else replace(figure, met=None))
    raw, cpu = towers.get("plain_numpy_speedup"), towers.get("cpu_2_hosts_over_1_device")
    notes = ([f"2 plain NumPy processes meanwhile: {raw:.2f}×"] if raw is not None else []) + \
        ([f"CPU time 2 hosts ÷ 1 device: {cpu:.2f}"] if cpu is not None else [])
    out.append(_fig("B7", names[2], towers.get("speedup_2_hosts"), "{:.2f}×", "≥ 1.7", lambda v: v >= 1.7,
                    ", ".join(notes)))
    if lost.get("skipped") or not lost:
        out.append(Figure("B7", names[3], None, "—", goals[3], None, why=lost.get("skipped", "not measured")))
    elif lost.get("hung"):
        out.append(Figure("B7", names[3], float(lost["limit_s"]), f"hung (killed after {lost['limit_s']:g} s)",
                          goals[3], False))
    else:
        met = bool(lost.get("within_goal"))
        out.append(Figure("B7", names[3], lost["seconds_to_exit"], f"{lost['seconds_to_exit']:.1f} s (exit "
                          f"{lost['exit_code']}{', traceback' if lost.get('traceback') else ''})", goals[3], met))
    return out


def missing(f: Figure, runs: dict[str, dict[str, Any]]) -> str:
    status = (runs.get(f.bench) or {}).get("status", "not run")
    if status == "ok":
        return f.why or "not measured at this size"
    return status


def table_lines(figs: list[Figure], runs: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| | figure | measured | goal | met? |", "|---|---|---|---|---|"]
    for f in figs:
        measured = f.shown if f.measured is not None else f"— ({missing(f, runs)})"
        met = "yes" if f.met else ("no" if f.met is not None else "—")
        lines.append(f"| {f.bench} | {f.name} | {measured} | {f.goal} | {met} |")
    return lines


def text_table(figs: list[Figure], runs: dict[str, dict[str, Any]]) -> str:
    rows = [("", "figure", "measured", "goal", "met?")]
    for f in figs:
        rows.append((f.bench, f.name, f.shown if f.measured is not None else f"— ({missing(f, runs)})", f.goal,
                     "yes" if f.met else ("no" if f.met is not None else "—")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# --------------------------------------------------------------------------- plot


def plot(runs: dict[str, dict[str, Any]], path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    b1 = (runs.get("B1") or {}).get("data") or {}
    b4 = (runs.get("B4") or {}).get("data") or {}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = sorted((v for v in b1.values() if isinstance(v, dict) and "ops" in v), key=lambda v: v["ops"])
    if sizes:
        ops = [v["ops"] for v in sizes]
        left.plot(ops, [v["orchestrator_ms_per_op"] for v in sizes], "o-", label="orchestrate run (partitions)")
        if all("op_ms_per_op" in v for v in sizes):
            left.plot(ops, [v["op_ms_per_op"] for v in sizes], "^-", label="orchestrate run --granularity op")
        left.plot(ops, [v["dask_ms_per_op"] for v in sizes], "s--", label="hand-written Dask (a task per op)")
        for v in sizes:
            left.annotate(f"×{v['ratio']:.2f}", (v["ops"], v["orchestrator_ms_per_op"]), textcoords="offset points",
                          xytext=(0, 8), ha="center", fontsize=8)
        left.set_xscale("log")
        top = max(max(v["orchestrator_ms_per_op"], v.get("op_ms_per_op", 0), v["dask_ms_per_op"]) for v in sizes)
        left.set_ylim(0, top * 1.15)  # room for the ratio labels
        left.legend()
    else:
        left.text(0.5, 0.5, "B1 did not run", ha="center", transform=left.transAxes)
    left.set_xlabel("ops in the graph (tiny adds, 100 chains, 2 devices)")
    left.set_ylabel("milliseconds per op (median wall time ÷ ops)")
    left.set_title("B1 run overhead vs graph size")
    left.grid(True, alpha=0.3)
    curve = b4.get("curve") or []
    if curve:
        devices = [c["devices"] for c in curve]
        cores = int(b4.get("cores") or os.cpu_count() or 2)
        right.plot(devices, devices, ":", color="gray", label="ideal")
        right.plot(devices, [min(d, cores) for d in devices], "--", color="lightgray",
                   label=f"bound of this machine ({cores} cores)")
        right.plot(devices, [c["speedup"] for c in curve], "o-", label="measured (compute span)")
        right.plot(devices, [c["speedup_wall"] for c in curve], "x-", alpha=0.6, label="measured (run_plan wall)")
        raw = b4.get("raw_numpy") or {}
        if raw.get("speedup"):
            right.plot([2], [raw["speedup"]], "D", color="green", label="plain NumPy, 2 processes (no Dask)")
        if max(devices) > cores:
            right.axvspan(cores + 0.5, max(devices) + 0.3, color="orange", alpha=0.08, label="more devices than cores")
        right.set_xticks(devices)
        right.set_ylim(bottom=0)
        right.legend(fontsize=8)
    else:
        right.text(0.5, 0.5, "B4 did not run", ha="center", transform=right.transAxes)
    right.set_xlabel("simulated devices (one worker process each)")
    right.set_ylabel("speed-up over 1 device")
    right.set_title("B4 data-parallel scaling (fixed total work)")
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- README


def rewrite_readme(lines: list[str], summary: dict[str, Any]) -> bool:
    if not os.path.exists(README):
        return False
    with open(README) as handle:
        text = handle.read()
    if START not in text or END not in text:
        return False
    m = summary["machine"]
    busy = max((r["other_processes_cores"] for r in summary["benchmarks"].values()), default=0.0)
    block = [START, "",
             f"Latest `make bench`: {summary['finished']} on {m['cores']} cores ({m['cpu']}), no GPU (simulated GPUs), "
             f"Python {m['python']}, Dask {m['dask']}; all benchmarks took {summary['seconds']:.0f} s"
             f"{'' if not summary['quick'] else ' (--quick)'}.",
             ""] + lines + [""]
    loads = ", ".join(f"{k} {r['other_processes_cores']:.2f}" for k, r in summary["benchmarks"].items())
    block += [f"Cores of the {m['cores']} used by other processes while each benchmark ran: {loads}."
              + (" Timings taken on a busy machine are pessimistic (see *The machine* above)." if busy >= 0.25 else ""),
              ""]
    block.append(END)
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: "\n".join(block), text, flags=re.S)
    with open(README, "w") as handle:
        handle.write(new)
    return True


def machine() -> dict[str, Any]:
    import dask
    import distributed
    import numpy

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "dask": dask.__version__,
            "distributed": distributed.__version__, "numpy": numpy.__version__, "gpus": "none (simulated)"}


def main() -> int:
    quick = "--quick" in sys.argv
    only = None
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].upper().split(","))
    os.makedirs(RESULTS, exist_ok=True)
    started = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    chosen = [b for b in BENCHES if only is None or b.id in only]
    for i, bench in enumerate(chosen):
        later = sum(b.reserve for b in chosen[i + 1:])
        left = TOTAL_BUDGET - (time.perf_counter() - started) - later
        if left < 20:
            runs[bench.id] = {"id": bench.id, "title": bench.title, "status": "skipped: out of time", "seconds": 0.0,
                              "other_processes_cores": 0.0, "data": None}
            print(f"\n=== {bench.id} {bench.title}: skipped, out of time", flush=True)
            continue
        runs[bench.id] = run_one(bench, quick, min(bench.budget, left))
    seconds = time.perf_counter() - started
    figs = figures(runs)
    summary = {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": seconds, "quick": quick, "machine": machine(),
        "figures": [f.__dict__ for f in figs],
        "benchmarks": {k: {kk: vv for kk, vv in v.items() if kk != "data"} for k, v in runs.items()},
    }
    # a partial run (--only) leaves the summary of the last full run alone
    with open(os.path.join(RESULTS, "summary.json" if only is None else "summary-partial.json"), "w") as handle:
        json.dump(summary, handle, indent=2)
    problem = plot(runs, os.path.join(RESULTS, "scaling.png")) if only is None else "not redrawn by a partial run"
    lines = table_lines(figs, runs)
    readme = rewrite_readme(lines, summary) if only is None else False
    print("\n" + "=" * 100)
    print(text_table(figs, runs))
    print("=" * 100)
    for r in runs.values():
        print(f"{r['id']:>3} {r['title']:<24} {r['status']:<28} {r['seconds']:6.1f} s   other processes: "
              f"{r['other_processes_cores']:.2f} cores")
    print(f"all benchmarks: {seconds:.0f} s ({seconds / 60:.1f} min); results in {os.path.relpath(RESULTS)}/: "
          f"summary.json, {'scaling.png' if problem is None else 'no plot: ' + problem}"
          f"{'; README table updated' if readme else ''}")
    return 0 if all(r["status"] == "ok" for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
