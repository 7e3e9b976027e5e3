"""B7: loop steps and towers across two simulated hosts, beside the same runs on one host.

The hosts are two Linux network namespaces joined by a veth pair shaped to
1 Gbit/s and, where the kernel has netem, 0.5 ms each way (:mod:`netns`).
Host A runs ``dask scheduler``, the client (``orchestrate run --scheduler``)
and the first task; host B the other task, each task an ``orchestrate
worker``. "One host" is the very same processes all on host A, so only the
link differs.

* polyfit (``examples/polyfit.yaml`` with every job in ``processes: device``,
  ``lost_link.polyfit_spec``; 2000 steps; 400 with ``--quick``): the
  ps task on host A, the worker task (2 GPUs) on host B. Loop = the run
  report's ``phases_seconds["compute"]``; whole = ``orchestrate run`` from
  start to exit. Goal: 2 hosts ÷ 1 host ≤ 2.0 (the issue says at 0.5 ms of
  delay; without netem the delay is missing, and an estimate adds one round
  trip of it per step: the gradient to the ps and the weights back).
* towers (B4's [4800, 2000] @ [2000, 2000] float64 split by rows, each tower
  making its operands on its device): a job of two tasks with one GPU each,
  task 0 on host A and task 1 on host B. 2 hosts = a tower on each task's
  GPU; 1 device = both towers on task 0's GPU, one after the other (B4's
  baseline), in the same blocks. The time is the compute span the workers
  recorded (first op start → last op end). Goal: 1 device ÷ 2 hosts ≥ 1.7.
* a lost link: :mod:`lost_link` (goal: a one-line error within 10 s).

The lost link comes first. Then every configuration runs in blocks: start
its scheduler and workers, one untimed warm-up, 3 timed runs (1 with
``--quick``), stop everything; polyfit's blocks alternate the layouts (1 host,
2 hosts, then 2, 1) so drift and load fall on both, the towers' runs
alternate 1 device and 2 devices inside each block; medians. A second round
runs only as far as ``--budget`` allows. Each
run also records the CPU seconds of all its processes (client, scheduler,
workers) and how many cores *other* processes used meanwhile (the machine
has 2, shared with other sessions), as run_all.py does per benchmark.
Results in ``benchmarks/results/hosts.json``, written after every block.
Where namespaces cannot be made (not root, no iproute2) it writes
``{"skipped": why}`` and exits 0.

    python benchmarks/bench_hosts.py [--quick] [--rounds R] [--steps N] [--budget SECONDS] [--no-lost-link]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lost_link import describe, lose_link_mid_run, polyfit_spec  # noqa: E402
from netns import DELAY_MS, Cluster, Hosts, cpu_seconds, probe_link, run_client, unavailable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYOUTS = {  # (job, task) -> host (0: A, 1: B)
    "polyfit": {"1 host": {("ps", 0): 0, ("worker", 0): 0}, "2 hosts": {("ps", 0): 0, ("worker", 0): 1}},
    "towers": {"1 host": {("worker", 0): 0, ("worker", 1): 0}, "2 hosts": {("worker", 0): 0, ("worker", 1): 1}},
}
GOALS = {"polyfit_at_most": 2.0, "towers_at_least": 1.7, "lost_link_s": 10.0}
N, ROWS = 2000, 4800
TOWERS = """\
version: 1
name: b7-towers-{label}
cluster:
  jobs:
    worker: {{tasks: 2, gpus: 1}}
graph:
  - name: towers
    replicate:
      devices: [/job:worker/task:0/gpu:0, /job:worker/task:{second}/gpu:0]
      body:
        - {{name: w, op: random.uniform, shape: [{n}, {n}], seed: 1}}
        - {{name: x, op: random.uniform, shape: [{rows}, {n}], seed: 2}}
        - {{name: y, op: matmul, inputs: [x, w]}}
        - {{name: s, op: sum, inputs: [y]}}
      combine: {{s: add_n}}
      combine_device: /job:worker/task:0/cpu:0
outputs:
  towers.s: "-"
"""


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def machine_busy() -> float:
    """CPU seconds the whole machine was busy since boot (/proc/stat, idle and iowait left out)."""
    with open("/proc/stat") as handle:
        fields = [float(x) for x in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0.0)) / os.sysconf("SC_CLK_TCK")


def measured_run(hosts: Hosts, args: list[str], timeout: float) -> dict[str, Any]:
    """One ``orchestrate run`` on host A, with the CPU of our processes and the cores others used meanwhile."""
    def ours() -> float:  # the cluster's live processes, and the finished client (a child of ours)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cpu_seconds(hosts.pids()) + usage.ru_utime + usage.ru_stime

    busy0, ours0 = machine_busy(), ours()
    wall, code, out = run_client(hosts, args, timeout)
    cpu = ours() - ours0
    if code != 0:
        raise RuntimeError(f"orchestrate {' '.join(args)} exited {code}:\n{out[-3000:]}")
    return {"whole_s": wall, "cpu_s": cpu, "other_cores": max(0.0, machine_busy() - busy0 - cpu) / wall,
            "output": out}


def report_of(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return dict(json.load(handle))


def polyfit_run(hosts: Hosts, cluster: Cluster, steps: int, logs: str, timeout: float) -> dict[str, Any]:
    report = os.path.join(logs, "polyfit-run.json")
    args = ["run", polyfit_spec(), "--scheduler", cluster.address, "--set", f"steps={steps}",
            "--set", f"window={min(100, steps)}", "--report", report, "--output-dir", os.path.join(logs, "out")]
    r = measured_run(hosts, args, timeout)
    data = report_of(report)
    w = _parse_w(r.pop("output"))
    return {**r, "loop_s": (data.get("phases_seconds") or {}).get("compute"), "w": w,
            "transport": data.get("transport")}


def _parse_w(out: str) -> list[float] | None:
    from bench_polyfit import parse_w

    return parse_w(out)


def towers_spec(logs: str, second: int) -> str:
    """The towers on task 0's GPU and task ``second``'s (0: one device does both halves)."""
    path = os.path.join(logs, f"towers-{second}.yaml")
    with open(path, "w") as handle:
        handle.write(TOWERS.format(label="1dev" if second == 0 else "2tasks", second=second, n=N, rows=ROWS // 2))
    return path


def towers_run(hosts: Hosts, cluster: Cluster, spec: str, logs: str, timeout: float) -> dict[str, Any]:
    report = os.path.join(logs, "towers-run.json")
    r = measured_run(hosts, ["run", spec, "--scheduler", cluster.address, "--report", report,
                             "--output-dir", os.path.join(logs, "out")], timeout)
    ops = [o for o in report_of(report)["ops"] if o.get("start") is not None]
    span = max(o["start"] + o["duration"] for o in ops) - min(o["start"] for o in ops)
    lines = r.pop("output").splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("towers.s =")), None)
    value = None if at is None else (lines[at].split("=", 1)[1].strip() or lines[at + 1].strip())
    devices = sorted({o["worker"] for o in ops if o["name"].endswith("/y")})
    return {**r, "compute_s": span, "value": value, "tower_devices": devices}


# --------------------------------------------------------------------------- blocks


BLOCK_GUESS = {"polyfit": 30.0, "towers": 40.0}  # seconds a block takes on the idle 2-core machine, before one ran


class Budget:
    """Seconds left of ``--budget`` (less a margin to save and exit), and what a block was seen to take."""

    MARGIN = 25.0

    def __init__(self, seconds: float | None):
        self.deadline = None if seconds is None else time.monotonic() + seconds - self.MARGIN
        self.took: dict[str, float] = {}

    def left(self) -> float:
        return 600.0 if self.deadline is None else self.deadline - time.monotonic()  # (a run past 10 min is stuck)

    def allows(self, what: str, guess: float) -> bool:
        return self.left() > 1.2 * self.took.get(what, guess)


def polyfit_block(hosts: Hosts, layout: str, steps: int, runs: int, out: list[dict[str, Any]],
                  budget: Budget) -> None:
    logs = tempfile.mkdtemp(prefix="b7-polyfit-")
    with _removed(logs), Cluster(hosts, polyfit_spec(), LAYOUTS["polyfit"][layout], logs) as cluster:
        polyfit_run(hosts, cluster, min(steps, 200), logs, budget.left())  # warm-up: imports, disk cache
        for _ in range(runs):
            r = polyfit_run(hosts, cluster, steps, logs, budget.left())
            out.append({"layout": layout, **r})
            print(f"B7 polyfit {layout:<7}: loop {r['loop_s']:.2f} s, whole process {r['whole_s']:.2f} s, "
                  f"CPU {r['cpu_s']:.2f} s, other processes {r['other_cores']:.2f} cores", flush=True)


def towers_block(hosts: Hosts, layout: str, runs: int, out: list[dict[str, Any]], budget: Budget) -> None:
    logs = tempfile.mkdtemp(prefix="b7-towers-")
    specs = {"1 device": towers_spec(logs, 0), f"2 devices, {layout}": towers_spec(logs, 1)}
    with _removed(logs), Cluster(hosts, specs["1 device"], LAYOUTS["towers"][layout], logs) as cluster:
        for spec in specs.values():
            towers_run(hosts, cluster, spec, logs, budget.left())  # warm-up
        for i in range(runs):
            for config in (list(specs) if i % 2 == 0 else list(reversed(specs))):
                r = towers_run(hosts, cluster, specs[config], logs, budget.left())
                out.append({"config": config, "layout": layout, **r})
                print(f"B7 towers {config:<20}: compute {r['compute_s']:.2f} s (whole process {r['whole_s']:.2f} s, "
                      f"CPU {r['cpu_s']:.2f} s, other processes {r['other_cores']:.2f} cores)", flush=True)
    # the machine's own ceiling meanwhile (B4's control): the same towers as plain NumPy processes, no cluster up
    from bench_scaling import raw_numpy

    for processes in (1, 2) if layout == "1 host" else (2, 1):
        out.append({"config": f"plain NumPy, {processes} process{'es' if processes > 1 else ''}",
                    "layout": layout, "compute_s": raw_numpy(processes, 2)})


@contextlib.contextmanager
def _removed(folder: str) -> Iterator[None]:
    """Delete a block's folder (specs, reports, logs) once its cluster is down; a failed block's stays to read."""
    yield
    shutil.rmtree(folder, ignore_errors=True)


def timed(budget: Budget, what: str, block: Callable[[], None]) -> None:
    started = time.monotonic()
    block()
    budget.took[what] = time.monotonic() - started


def measure(hosts: Hosts, args: argparse.Namespace, data: dict[str, Any], budget: Budget,
            save: Callable[[], None]) -> None:
    """The lost link first (cheap when it works, and a figure of its own), then rounds of blocks.

    polyfit's layouts alternate their order round by round. The towers run
    2 hosts first in every round: their headline, 2 hosts vs 1 device, is
    measured inside each block (the runs alternate), and a round cut by the
    budget should lose the 1-host block, not that one.
    """
    if args.lost_link:
        data["lost_link"] = lose_link_mid_run(hosts, limit=max(15.0, min(60.0, budget.left() - 60.0)))
        print(f"B7 {describe(data['lost_link'])}", flush=True)
        save()
    per_block = 1 if args.quick else 3
    for i in range(args.rounds):
        order = ["1 host", "2 hosts"] if i % 2 == 0 else ["2 hosts", "1 host"]
        blocks = [("polyfit", layout) for layout in order] + [("towers", "2 hosts"), ("towers", "1 host")]
        for kind, layout in blocks:
            # every block, the first round's too: run_all.py stops a benchmark at its budget, and a block cut
            # there loses its figures and fails `make bench` (the towers' 1-host block, last, goes first)
            if not budget.allows(f"{kind} {layout}", BLOCK_GUESS[kind]):
                print(f"B7: {kind} round {i + 1} ({layout}) skipped: out of budget", flush=True)
                continue
            block = functools.partial(polyfit_block, hosts, layout, args.steps, per_block, data["polyfit_runs"],
                                      budget) if kind == "polyfit" else \
                functools.partial(towers_block, hosts, layout, per_block, data["towers_runs"], budget)
            timed(budget, f"{kind} {layout}", block)
            save()
        data["rounds_done"] = i + 1


# --------------------------------------------------------------------------- figures


def medians(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key in keys:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = median(values)
        out[f"{key}_runs"] = values
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    keys = ("loop_s", "whole_s", "cpu_s", "other_cores")
    poly: dict[str, Any] = {layout: medians([r for r in data["polyfit_runs"] if r["layout"] == layout], keys)
            for layout in LAYOUTS["polyfit"]}
    one, two = poly["1 host"], poly["2 hosts"]
    poly.update({"ratio_loop": ratio(two["loop_s"], one["loop_s"]), "ratio_whole": ratio(two["whole_s"], one["whole_s"]),
                 "goal_at_most": GOALS["polyfit_at_most"],
                 "w": next((r["w"] for r in reversed(data["polyfit_runs"]) if r.get("w")), None)})
    link = data.get("link") or {}
    if link.get("delay_ms") is None and two["loop_s"] is not None and one["loop_s"]:
        # not measured: what 0.5 ms each way would add, one round trip per step (gradient to the ps, weights back)
        added = data["steps"] * 2 * DELAY_MS / 1000
        poly["estimate_with_delay"] = {"loop_s": two["loop_s"] + added, "ratio_loop": (two["loop_s"] + added) / one["loop_s"],
                                       "added_s": added, "how": "2 hosts' loop + steps × one round trip of 2 × 0.5 ms"}
    keys = ("compute_s", "whole_s", "cpu_s", "other_cores")
    configs = ["1 device", "2 devices, 1 host", "2 devices, 2 hosts", "plain NumPy, 1 process", "plain NumPy, 2 processes"]
    towers: dict[str, Any] = {c: medians([r for r in data["towers_runs"] if r["config"] == c], keys) for c in configs}
    base = towers["1 device"]
    values = {r["value"] for r in data["towers_runs"] if "value" in r}
    towers.update({
        "speedup_2_hosts": ratio(base["compute_s"], towers["2 devices, 2 hosts"]["compute_s"]),
        "speedup_1_host_2_devices": ratio(base["compute_s"], towers["2 devices, 1 host"]["compute_s"]),
        "plain_numpy_speedup": ratio(towers["plain NumPy, 1 process"]["compute_s"],
                                     towers["plain NumPy, 2 processes"]["compute_s"]),
        "cpu_2_hosts_over_1_device": ratio(towers["2 devices, 2 hosts"]["cpu_s"], base["cpu_s"]),
        "goal_at_least": GOALS["towers_at_least"], "values_agree": len(values) <= 1, "value": next(iter(values), None)})
    return {**{k: v for k, v in data.items() if not k.endswith("_runs")}, "polyfit": poly, "towers": towers,
            "polyfit_runs": data["polyfit_runs"], "towers_runs": data["towers_runs"]}


def fmt(value: float | None, spec: str = "{:.2f}") -> str:
    return "—" if value is None else spec.format(value)


def print_summary(s: dict[str, Any]) -> None:
    link = s.get("link") or {}
    print(f"\nB7 across two simulated hosts ({link.get('described', '?')}; measured: round trip "
          f"{fmt(link.get('rtt_ms'), '{:.3f}')} ms, {fmt(link.get('throughput_mbit_s'), '{:.0f}')} Mbit/s), "
          f"medians of {s.get('rounds_done', 0)} round(s):")
    p = s["polyfit"]
    for layout in LAYOUTS["polyfit"]:
        r = p[layout]
        print(f"  polyfit {s['steps']} steps, {layout:<7}: loop {fmt(r['loop_s'])} s, whole process {fmt(r['whole_s'])} s, "
              f"CPU {fmt(r['cpu_s'])} s [{r['runs']} runs]")
    print(f"  polyfit 2 hosts ÷ 1 host: loop {fmt(p['ratio_loop'], '{:.3f}')}, whole process "
          f"{fmt(p['ratio_whole'], '{:.3f}')} (goal <= {p['goal_at_most']})")
    if "estimate_with_delay" in p:
        e = p["estimate_with_delay"]
        print(f"  (no netem: with 0.5 ms each way the loop would take ~{e['loop_s']:.2f} s, "
              f"{e['ratio_loop']:.3f} of 1 host; an estimate, not measured)")
    t = s["towers"]
    for config in ("1 device", "2 devices, 1 host", "2 devices, 2 hosts"):
        r = t[config]
        print(f"  towers {config:<18}: compute {fmt(r['compute_s'])} s, whole process {fmt(r['whole_s'])} s, "
              f"CPU {fmt(r['cpu_s'])} s, other processes {fmt(r['other_cores'])} cores [{r['runs']} runs]")
    print(f"  towers 1 device ÷ 2 hosts: {fmt(t['speedup_2_hosts'])}x (goal >= {t['goal_at_least']}); "
          f"÷ 2 devices on 1 host: {fmt(t['speedup_1_host_2_devices'])}x; CPU 2 hosts ÷ 1 device "
          f"{fmt(t['cpu_2_hosts_over_1_device'])}; 2 plain NumPy processes ÷ 1 meanwhile (the machine's ceiling): "
          f"{fmt(t['plain_numpy_speedup'])}x{'' if t['values_agree'] else '; VALUES DIFFER'}")
    if s.get("lost_link"):
        print(f"  {describe(s['lost_link'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="400 steps, 1 round, 1 run per block")
    parser.add_argument("--steps", type=int, default=None, help="polyfit steps (default 2000; --quick: 400)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of blocks (default 2; --quick: 1)")
    parser.add_argument("--budget", type=float, default=None, help="seconds this benchmark may take (run_all.py)")
    parser.add_argument("--no-lost-link", dest="lost_link", action="store_false", help="skip the lost link")
    args = parser.parse_args()
    args.steps = args.steps or (400 if args.quick else 2000)
    args.rounds = args.rounds or (1 if args.quick else 2)
    from specgen import save_result

    started = time.perf_counter()
    why = unavailable()
    if why is not None:
        print(f"B7 skipped: {why}", flush=True)
        save_result("hosts.json", {"skipped": why})
        return 0
    budget = Budget(args.budget)
    data: dict[str, Any] = {"steps": args.steps, "rounds": args.rounds, "rounds_done": 0, "cores": os.cpu_count(),
                            "goals": GOALS, "polyfit_runs": [], "towers_runs": []}

    def save() -> None:
        data["seconds"] = time.perf_counter() - started
        save_result("hosts.json", summarize(data))

    code = 0
    with Hosts() as hosts:
        link = hosts.link
        data["link"] = {"described": link.describe(), "rate": link.rate, "delay_ms": link.delay_ms,
                        "netem": link.delay_ms is not None, "netem_note": link.netem_note, "qdiscs": link.qdiscs,
                        **probe_link(hosts)}
        print(f"B7 link: {link.describe()}; round trip {data['link']['rtt_ms']:.3f} ms, "
              f"{data['link']['throughput_mbit_s']:.0f} Mbit/s", flush=True)
        try:
            measure(hosts, args, data, budget, save)
        except TimeoutError as error:  # a run cut by the budget: keep what was measured
            print(f"B7: stopped, out of its time budget: {str(error).splitlines()[0]}", flush=True)
            code = 0 if data["rounds_done"] else 1
    save()
    print_summary(summarize(data))
    print(f"B7 took {time.perf_counter() - started:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
