"""B2: validate / place / plan / compile of large specs, against libyaml parsing of the same file.

Prints, for 10k and 100k ops: parse time (yaml.CSafeLoader), then each stage,
the ratio (stages / parse; goal <= 1.5) and 100k / 10k (goal <= 11).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from specgen import chain_spec, median, write_spec  # noqa: E402

from orchestrator.compile import compile_plan  # noqa: E402
from orchestrator.load import load_file  # noqa: E402
from orchestrator.memory import plan_memory  # noqa: E402
from orchestrator.place import place  # noqa: E402
from orchestrator.validate import validate  # noqa: E402


def measure(n_ops: int, repeats: int) -> dict[str, float]:
    path = write_spec(os.path.join(tempfile.mkdtemp(), f"chains{n_ops}.yaml"),
                      chain_spec(n_ops, chains=max(10, n_ops // 100), replicate_every=10))
    times: dict[str, list[float]] = {k: [] for k in ("parse", "load", "validate", "place", "memory", "compile")}
    for _ in range(repeats):
        t = time.perf_counter()
        with open(path, "rb") as handle:
            yaml.load(handle, Loader=yaml.CSafeLoader)
        times["parse"].append(time.perf_counter() - t)
        t = time.perf_counter()
        doc = load_file(path)
        times["load"].append(time.perf_counter() - t)
        t = time.perf_counter()
        spec, diags = validate(doc)
        times["validate"].append(time.perf_counter() - t)
        assert spec is not None, [d.render() for d in diags[:3]]
        t = time.perf_counter()
        plan = place(spec)
        times["place"].append(time.perf_counter() - t)
        t = time.perf_counter()
        plan = plan_memory(plan)
        times["memory"].append(time.perf_counter() - t)
        t = time.perf_counter()
        compile_plan(plan, "bench")
        times["compile"].append(time.perf_counter() - t)
    result = {k: median(v) for k, v in times.items()}
    result["ops"] = len(spec.ops)
    result["stages"] = result["validate"] + result["place"] + result["memory"] + result["compile"]
    result["stages_over_parse"] = result["stages"] / result["parse"]
    result["validate_over_parse"] = result["validate"] / result["parse"]
    result["load_over_parse"] = result["load"] / result["parse"]
    return result


def main() -> int:
    quick = "--quick" in sys.argv
    sizes = [(10_000, 3)] if quick else [(10_000, 5), (100_000, 1)]
    results = {str(n): measure(n, r) for n, r in sizes}
    for n, r in results.items():
        print(f"{n:>7} ops ({r['ops']} after expansion): parse {r['parse']:.3f} s | load {r['load']:.3f} | "
              f"validate {r['validate']:.3f} | place {r['place']:.3f} | memory {r['memory']:.3f} | "
              f"compile {r['compile']:.3f}")
        print(f"         validate / parse = {r['validate_over_parse']:.2f};  "
              f"(validate+place+memory+compile) / parse = {r['stages_over_parse']:.2f}  (goal <= 1.5)")
    if "100000" in results:
        growth = results["100000"]["stages"] / results["10000"]["stages"]
        print(f"100k / 10k stages = {growth:.2f}  (goal <= 11)")
        results["growth_100k_over_10k"] = growth  # type: ignore[assignment]
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "compile.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
