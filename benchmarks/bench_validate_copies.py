"""B11: `orchestrate validate` of a search, by its number of copies, and the refusal of one too big.

A sweep of a two-op body over one parameter (each copy: its value, a product and a sum; a select and a
gather beside them) with 1k, 5k and 20k copies (20k is ``MAX_COPIES``, the most a spec's sweeps may
make), and a 500 x 500 grid (250k copies), which is refused. Each is one whole ``orchestrate validate``
process, timed by the wall clock and by its CPU time (on a shared 2-core machine the CPU time is the
steadier figure); medians of 3 (1 for the largest). Goals: the largest allowed search validates in
under 30 s, time per copy stays flat (linear: 20k / 1k per copy <= 1.5), the refusal under 30 s.

    python benchmarks/bench_validate_copies.py [--quick]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from specgen import median, save_result, write_spec  # noqa: E402

ORCHESTRATE = os.path.join(os.path.dirname(sys.executable), "orchestrate")


def sweep_spec(copies: int) -> str:
    values = ", ".join(f"{i}.5" for i in range(copies))
    return f"""version: 1
graph:
  - {{name: x, op: ones, shape: [4]}}
  - name: s
    sweep:
      param: k
      values: [{values}]
      body:
        - {{name: y, op: mul, inputs: [x, k]}}
        - {{name: loss, op: sum, inputs: [y]}}
      select: {{min: loss}}
      gather: {{losses: loss}}
"""


def grid_spec(side: int) -> str:
    axis = ", ".join(f"{i}.5" for i in range(side))
    return sweep_spec(1).replace(f"param: k\n      values: [0.5]", f"grid: {{k: [{axis}], j: [{axis}]}}")


def timed(path: str) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one ``orchestrate validate`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.run([ORCHESTRATE, "validate", path], capture_output=True).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), code


def measure(name: str, text: str, repeats: int) -> dict[str, Any]:
    path = write_spec(os.path.join(tempfile.mkdtemp(), f"{name}.yaml"), text)
    runs = [timed(path) for _ in range(repeats)]
    return {"wall_s": median([r[0] for r in runs]), "cpu_s": median([r[1] for r in runs]),
            "exit_codes": sorted({r[2] for r in runs}), "file_bytes": os.path.getsize(path)}


def main() -> int:
    quick = "--quick" in sys.argv
    sizes = (1_000, 5_000) if quick else (1_000, 5_000, 20_000)
    result: dict[str, Any] = {"copies": {}}
    for n in sizes:
        figures = measure(f"sweep{n}", sweep_spec(n), 1 if n >= 20_000 else 3)
        figures["cpu_ms_per_copy"] = 1000 * figures["cpu_s"] / n
        result["copies"][str(n)] = figures
        print(f"{n:>7,} copies: {figures['wall_s']:6.2f} s wall, {figures['cpu_s']:6.2f} s CPU "
              f"({figures['cpu_ms_per_copy']:.3f} ms/copy), exit {figures['exit_codes']}", flush=True)
        save_result("validate_copies.json", result)
    refused = measure("grid250k", grid_spec(500), 1)
    result["refused_250k"] = refused
    print(f"250,000 copies (a 500 x 500 grid): refused in {refused['wall_s']:.2f} s wall, {refused['cpu_s']:.2f} s "
          f"CPU, exit {refused['exit_codes']}")
    first, last = result["copies"][str(sizes[0])], result["copies"][str(sizes[-1])]
    # the per-copy cost less the fixed start-up (imports, schema compile): the 1k run is mostly start-up
    fixed = refused["cpu_s"]
    per_small = (first["cpu_s"] - fixed) / sizes[0]
    per_large = (last["cpu_s"] - fixed) / sizes[-1]
    result["linearity"] = per_large / per_small if per_small > 0 else None
    print(f"per copy beyond start-up: {1000 * per_small:.3f} ms at {sizes[0]:,}, {1000 * per_large:.3f} ms at "
          f"{sizes[-1]:,}: ratio {result['linearity']:.2f} (goal <= 1.5); largest allowed "
          f"{last['wall_s']:.1f} s (goal < 30 s)")
    save_result("validate_copies.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
