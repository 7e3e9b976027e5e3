"""B2: validate / place / plan / compile of large specs, against libyaml parsing of the same file.

Prints, for 10k and 100k ops: parse time (yaml.CSafeLoader), then each stage,
the ratio (stages / parse; goal <= 1.5) and 100k / 10k (goal <= 11).

Everything here runs in this one single-threaded process, so each stage is
timed by the process's CPU clock (``time.process_time``) as well as by the
wall clock. On an idle machine the two agree; on a shared 2-core machine the
wall clock also counts the time other processes held the core, and the 100k
run (one repeat, a minute long) and the 10k runs (seconds) see different
load, so the headline figures use CPU time. Wall-time figures are kept
beside them. Medians of 3 (10k) and 1 (100k) repeats.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from specgen import chain_spec, median, save_result, write_spec  # noqa: E402

from orchestrator.compile import CompileOptions, compile_plan  # noqa: E402
from orchestrator.perf import paused_gc  # noqa: E402
from orchestrator.spec.load import load_file  # noqa: E402
from orchestrator.plan.memory import plan_memory  # noqa: E402
from orchestrator.plan.partition import plan_tasks  # noqa: E402
from orchestrator.plan.place import place  # noqa: E402
from orchestrator.spec.validate import validate  # noqa: E402


STAGES = ("parse", "load", "validate", "place", "memory", "compile")


def measure(n_ops: int, repeats: int) -> dict[str, Any]:
    """Each stage timed alone, by the wall clock and by this (single-threaded) process's CPU clock."""
    path = write_spec(os.path.join(tempfile.mkdtemp(), f"chains{n_ops}.yaml"),
                      chain_spec(n_ops, chains=max(10, n_ops // 100), replicate_every=10))
    wall: dict[str, list[float]] = {k: [] for k in STAGES}
    cpu: dict[str, list[float]] = {k: [] for k in STAGES}

    def timed(stage: str, fn: Any, *args: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = fn(*args)
        wall[stage].append(time.perf_counter() - w)
        cpu[stage].append(time.process_time() - c)
        return out

    def parse() -> Any:
        with open(path, "rb") as handle:
            return yaml.load(handle, Loader=yaml.CSafeLoader)

    for _ in range(repeats):
        timed("parse", parse)
        # the stages run as the product runs them: check_file and the runner pause the cyclic GC
        with paused_gc():
            doc = timed("load", load_file, path)
            spec, diags = timed("validate", validate, doc)
            assert spec is not None, [d.render() for d in diags[:3]]
            plan = timed("place", lambda s: plan_tasks(place(s)), spec)  # placing, then planning the tasks
            plan = timed("memory", plan_memory, plan)
            timed("compile", compile_plan, plan, CompileOptions("bench"))
        expanded = len(spec.ops)
        del doc, spec, diags, plan
        gc.collect()
    result: dict[str, Any] = {k: median(v) for k, v in wall.items()}
    result["ops"] = n_ops
    result["ops_after_expansion"] = expanded
    result["stages"] = result["validate"] + result["place"] + result["memory"] + result["compile"]
    result["stages_over_parse"] = result["stages"] / result["parse"]
    result["validate_over_parse"] = result["validate"] / result["parse"]
    result["load_over_parse"] = result["load"] / result["parse"]
    c = {k: median(v) for k, v in cpu.items()}
    c["stages"] = c["validate"] + c["place"] + c["memory"] + c["compile"]
    c["stages_over_parse"] = c["stages"] / c["parse"]
    result["cpu"] = c
    result["wall_runs"], result["cpu_runs"] = wall, cpu
    return result


def main() -> int:
    quick = "--quick" in sys.argv
    sizes = [(10_000, 3)] if quick else [(10_000, 3), (100_000, 1)]
    results: dict[str, Any] = {}
    for size, repeats in sizes:
        n, r = str(size), measure(size, repeats)
        results[n] = r
        save(results)  # after every size: a run stopped by its time budget keeps what it measured
        c = r["cpu"]
        print(f"{n:>7} ops ({r['ops_after_expansion']} after expansion), seconds of CPU (wall): "
              f"parse {c['parse']:.3f} ({r['parse']:.3f}) | load {c['load']:.3f} ({r['load']:.3f}) | "
              f"validate {c['validate']:.3f} ({r['validate']:.3f}) | place {c['place']:.3f} ({r['place']:.3f}) | "
              f"memory {c['memory']:.3f} ({r['memory']:.3f}) | compile {c['compile']:.3f} ({r['compile']:.3f})",
              flush=True)
        print(f"         (validate+place+memory+compile) / parse = {c['stages_over_parse']:.2f} on CPU time, "
              f"{r['stages_over_parse']:.2f} on wall time  (goal <= 1.5)", flush=True)
    if "100000" in results:
        growth = results["100000"]["cpu"]["stages"] / results["10000"]["cpu"]["stages"]
        growth_wall = results["100000"]["stages"] / results["10000"]["stages"]
        print(f"100k / 10k stages = {growth:.2f} on CPU time, {growth_wall:.2f} on wall time  (goal <= 11)")
        results["growth_100k_over_10k"] = growth
        results["growth_100k_over_10k_wall"] = growth_wall
    save(results)
    return 0


def save(results: dict[str, Any]) -> None:
    save_result("compile.json", results)


if __name__ == "__main__":
    sys.exit(main())
