"""B1: run overhead. `orchestrate run` of N tiny ops ÷ the same graph hand-written in Dask.

Both run on the same embedded cluster (one worker per device, started once),
in one process, with the same per-key resource restrictions. The orchestrator
side is everything after the plan: compile, submit, gather, verify placement.
The hand-written side builds its graph and submits it. Goal: ratio <= 1.05.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from specgen import chain_spec, median, write_spec  # noqa: E402

from orchestrator.api import plan_file  # noqa: E402
from orchestrator.execute.cluster import EmbeddedCluster  # noqa: E402
from orchestrator.execute.run import RunSettings, run_plan  # noqa: E402


def _ones() -> np.ndarray:
    return np.ones(4)


def _add(x: np.ndarray, scalar: float) -> np.ndarray:
    return np.add(x, scalar)


def hand_written(client, plan, tag: str) -> float:  # type: ignore[no-untyped-def]
    """The same chains as plain Dask tasks with the same resources, via a key-callable annotation."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from dask.task_spec import Task, TaskRef

    started = time.perf_counter()
    tasks, resources = {}, {}
    for p in plan.placements:
        op = plan.spec.op(p.op)
        key = f"{p.op}-{tag}"
        if op.inputs:
            tasks[key] = Task(key, _add, TaskRef(f"{op.inputs[0].op}-{tag}"), op.params["scalar"])
        else:
            tasks[key] = Task(key, _ones)
        resources[key] = {f"device:{p.device_name}": 1}
    layer = MaterializedLayer(tasks, annotations={"resources": resources.__getitem__})
    graph = HighLevelGraph({tag: layer}, {tag: set()})
    consumed = {r.op for op in plan.spec.ops for r in op.inputs}
    leaves = [f"{p.op}-{tag}" for p in plan.placements if p.op not in consumed]
    from distributed import wait

    with client.as_current():  # as the runner does for ops nothing reads: wait, do not fetch
        wait(client.get(graph, leaves, sync=False, optimize_graph=False))
    return time.perf_counter() - started


def orchestrated(address: str, plan) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    run_plan(plan, RunSettings(scheduler=address, write_outputs=False, progress=False), lambda _: None)
    return time.perf_counter() - started


def measure(n_ops: int, repeats: int) -> dict[str, float]:
    from distributed import Client

    path = write_spec(os.path.join(tempfile.mkdtemp(), f"run{n_ops}.yaml"), chain_spec(n_ops, chains=100))
    plan = plan_file(path)
    cluster = EmbeddedCluster(plan.spec.cluster, None).start()
    try:
        with Client(cluster, set_as_default=False) as client:
            ours, theirs = [], []
            orchestrated(cluster.scheduler_address, plan)  # warm up both paths
            hand_written(client, plan, "warm")
            for i in range(repeats):
                ours.append(orchestrated(cluster.scheduler_address, plan))
                theirs.append(hand_written(client, plan, f"rep{i}"))
    finally:
        cluster.close()
    o, t = median(ours), median(theirs)
    return {"ops": len(plan.placements), "orchestrator_s": o, "dask_s": t, "ratio": o / t,
            "orchestrator_ms_per_op": 1000 * o / len(plan.placements), "dask_ms_per_op": 1000 * t / len(plan.placements)}


def main() -> int:
    quick = "--quick" in sys.argv
    sizes = [(1_000, 3)] if quick else [(1_000, 5), (10_000, 3)]
    results = {}
    for n, repeats in sizes:
        r = measure(n, repeats)
        results[str(n)] = r
        print(f"{n:>6} ops: orchestrate run {r['orchestrator_s']:.2f} s ({r['orchestrator_ms_per_op']:.2f} ms/op) | "
              f"hand-written Dask {r['dask_s']:.2f} s ({r['dask_ms_per_op']:.2f} ms/op) | ratio {r['ratio']:.3f} "
              f"(goal <= 1.05)")
    with open(os.path.join(os.path.dirname(__file__), "results", "run_overhead.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
