"""B1: run overhead. `orchestrate run` of N tiny ops ÷ the same graph hand-written in Dask, one task per op.

``orchestrate run`` runs at both granularities: its default (a Dask task per
device partition; goal ≤ 0.1 of the hand-written graph at 10k ops) and
``--granularity op`` (a task per op, like the hand-written graph; goal ≤ 1.05).

Both run on the same embedded cluster (one worker per device, started once for
every size), in one process, with the same per-key resource restrictions, and
both start from a scheduler address: the orchestrator side is everything after
the plan, with ``run``'s defaults (connect a client, register the device runtime,
compile, submit, wait, drain the workers' records, verify placement); the hand-written side
connects its own client, builds the same chains as plain Dask tasks with the
same resources, keys named the way Dask names them (``add-<token>-<i>``),
and waits for them. The two alternate (which one goes first
alternates too); medians. Sizes 100 / 1k / 3k / 10k ops (chains of ``add``)
give the curve; 1k and 10k are the headline figures.
Beside wall time, the CPU time each side used (this process — client and the
in-process scheduler — plus the workers) is recorded: on a shared machine it
moves much less with other processes' load than wall time does.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from specgen import budget_deadline, chain_spec, median, save_result, write_spec  # noqa: E402

from orchestrator.api import plan_file  # noqa: E402
from orchestrator.execute.cluster import EmbeddedCluster  # noqa: E402
from orchestrator.api import RunSettings, run_plan  # noqa: E402


def hand_written(address: str, plan, tag: str) -> float:  # type: ignore[no-untyped-def]
    """The same chains as plain Dask tasks with the same resources, via a key-callable annotation.

    The tasks call NumPy's functions directly (pickled by reference, as the orchestrator's ``run_op`` is):
    functions defined in this script would be pickled by value into every task and cost the workers more.
    """
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from dask.task_spec import Task, TaskRef
    from distributed import Client, wait

    started = time.perf_counter()
    tasks, resources = {}, {}
    # Keys named as Dask names them (``add-<token>-<i>``: one task prefix per function). Dask keeps per-prefix
    # state on every worker, and a prefix per op made the same graph take ~1.75x as long at 3k ops here, which
    # is why the orchestrator names the keys of plans this big by op kind too (orchestrator/compile/dask_keys.py).
    keys = {p.op: f"{'add' if plan.spec.op(p.op).inputs else 'ones'}-{tag}-{i}" for i, p in enumerate(plan.placements)}
    for p in plan.placements:
        op = plan.spec.op(p.op)
        key = keys[p.op]
        if op.inputs:
            tasks[key] = Task(key, np.add, TaskRef(keys[op.inputs[0].op]), op.params["scalar"])
        else:
            tasks[key] = Task(key, np.ones, 4)
        resources[key] = {f"device:{p.device_name}": 1}
    layer = MaterializedLayer(tasks, annotations={"resources": resources.__getitem__})
    graph = HighLevelGraph({tag: layer}, {tag: set()})
    consumed = {r.op for op in plan.spec.ops for r in op.inputs}
    leaves = [keys[p.op] for p in plan.placements if p.op not in consumed]
    with Client(address, set_as_default=False) as client, client.as_current():
        # as the runner does for ops nothing reads: wait, do not fetch
        wait(client.get(graph, leaves, sync=False, optimize_graph=False))
    return time.perf_counter() - started


PHASES: list[dict[str, float]] = []  # the orchestrator's own account of each timed run (report["phases_seconds"])


def orchestrated(address: str, plan, granularity: str = "partition") -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = run_plan(plan, RunSettings(scheduler=address, write_outputs=False, progress=False,
                                        granularity=granularity), lambda _: None)
    elapsed = time.perf_counter() - started
    if granularity == "partition":
        PHASES.append(dict(result.report["phases_seconds"]))
    return elapsed


def worker_cpu() -> float:
    """CPU seconds this worker process has used (run on every worker with ``Client.run``)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU time used by a side: this process (client and in-process scheduler) and the workers.

    Wall time on a shared 2-core machine moves with other processes' load; CPU time much less, so it
    says how much work each side does. Read between runs through a client of its own (not timed).
    """

    def __init__(self, address: str):
        from distributed import Client

        self.client = Client(address, set_as_default=False)

    def read(self) -> tuple[float, float]:
        return time.process_time(), sum(self.client.run(worker_cpu).values())

    def close(self) -> None:
        self.client.close()


def measure(address: str, n_ops: int, repeats: int, meter: CpuMeter) -> dict[str, Any]:
    path = write_spec(os.path.join(tempfile.mkdtemp(), f"run{n_ops}.yaml"), chain_spec(n_ops, chains=100))
    plan = plan_file(path)
    names = ("ours", "op", "theirs")
    wall: dict[str, list[float]] = {side: [] for side in names}
    here: dict[str, list[float]] = {side: [] for side in names}
    workers: dict[str, list[float]] = {side: [] for side in names}
    sides = {"ours": lambda i: orchestrated(address, plan),
             "op": lambda i: orchestrated(address, plan, "op"),
             "theirs": lambda i: hand_written(address, plan, uuid.uuid4().hex[:12])}
    PHASES.clear()
    for i in range(repeats):
        for side in (names if i % 2 == 0 else tuple(reversed(names))):
            cpu0, workers0 = meter.read()
            wall[side].append(sides[side](i))
            cpu1, workers1 = meter.read()
            here[side].append(cpu1 - cpu0)
            workers[side].append(workers1 - workers0)
    o, p, t = median(wall["ours"]), median(wall["op"]), median(wall["theirs"])

    def cpu(side: str) -> float:
        return median([a + b for a, b in zip(here[side], workers[side], strict=True)])

    n = len(plan.placements)
    return {"ops": n, "repeats": repeats, "orchestrator_s": o, "op_s": p, "dask_s": t, "ratio": o / t,
            "ratio_op": p / t, "orchestrator_ms_per_op": 1000 * o / n, "op_ms_per_op": 1000 * p / n,
            "dask_ms_per_op": 1000 * t / n, "orchestrator_runs": wall["ours"], "op_runs": wall["op"],
            "dask_runs": wall["theirs"],
            "orchestrator_phases_s": {k: median([ph[k] for ph in PHASES]) for k in PHASES[0]},
            "cpu": {"orchestrator_s": cpu("ours"), "op_s": cpu("op"), "dask_s": cpu("theirs"),
                    "ratio": cpu("ours") / cpu("theirs"), "ratio_op": cpu("op") / cpu("theirs"),
                    "orchestrator_client_scheduler_s": median(here["ours"]),
                    "dask_client_scheduler_s": median(here["theirs"]),
                    "orchestrator_workers_s": median(workers["ours"]), "dask_workers_s": median(workers["theirs"])}}


def main() -> int:
    quick = "--quick" in sys.argv
    deadline = budget_deadline()
    # 3k (for the curve only) last: if the time budget runs out, the headline sizes are already written
    sizes = [(100, 3), (1_000, 3)] if quick else [(100, 5), (1_000, 5), (10_000, 3), (3_000, 3)]
    warm = plan_file(write_spec(os.path.join(tempfile.mkdtemp(), "warm.yaml"), chain_spec(1_000, chains=100)))
    cluster = EmbeddedCluster(warm.spec.cluster, None).start()  # every size has the same 2-device cluster
    results: dict[str, Any] = {}
    meter = None
    try:
        meter = CpuMeter(cluster.scheduler_address)
        orchestrated(cluster.scheduler_address, warm)  # warm up every path
        orchestrated(cluster.scheduler_address, warm, "op")
        hand_written(cluster.scheduler_address, warm, uuid.uuid4().hex[:12])
        for n, repeats in sizes:
            if deadline is not None and "1000" in results:
                # fewer repeats of the big sizes rather than none when time is short. Estimated from 1k, with
                # a margin: the cost per task stays about flat from 1k to 10k here (1.3 ms), but drifts with load
                growth = 1.3
                per_pair = n / 1000 * (results["1000"]["orchestrator_s"] + results["1000"]["op_s"] +
                                       results["1000"]["dask_s"]) * growth
                fit = int((deadline - time.perf_counter() - 10) // per_pair)
                if fit < 1:
                    print(f"{n:>6} ops: skipped, not enough time left in the budget", flush=True)
                    continue
                repeats = min(repeats, fit)
            r = measure(cluster.scheduler_address, n, repeats, meter)
            results[str(n)] = r
            c = r["cpu"]
            print(f"{n:>6} ops: orchestrate run {r['orchestrator_s']:.2f} s ({r['orchestrator_ms_per_op']:.3f} ms/op), "
                  f"--granularity op {r['op_s']:.2f} s ({r['op_ms_per_op']:.2f} ms/op) | "
                  f"hand-written Dask {r['dask_s']:.2f} s ({r['dask_ms_per_op']:.2f} ms/op) | ratios {r['ratio']:.3f} "
                  f"(goal <= 0.1) and {r['ratio_op']:.3f} at op granularity (goal <= 1.05) [medians of {repeats}]\n"
                  f"{'':>12}CPU: {c['orchestrator_s']:.2f} s / {c['op_s']:.2f} s vs {c['dask_s']:.2f} s, ratios "
                  f"{c['ratio']:.3f} / {c['ratio_op']:.3f} "
                  f"(client+scheduler {c['orchestrator_client_scheduler_s']:.2f} vs {c['dask_client_scheduler_s']:.2f}; "
                  f"workers {c['orchestrator_workers_s']:.2f} vs {c['dask_workers_s']:.2f})\n"
                  f"{'':>12}orchestrate run's phases: "
                  + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in r["orchestrator_phases_s"].items()), flush=True)
            save(results)  # after every size: a run stopped by its time budget keeps what it measured
    finally:
        if meter is not None:
            meter.close()
        cluster.close()
    return 0


def save(results: dict[str, Any]) -> None:
    save_result("run_overhead.json", results)


if __name__ == "__main__":
    sys.exit(main())
