"""Generate large specs for the benchmarks (chains of tiny ops, optionally with replicate constructs)."""

from __future__ import annotations

import logging
import os
import warnings

# A scheduler started without a dashboard still serves HTTP on the default port 8787 and warns when
# another cluster holds it; the benchmarks start many clusters, so that warning is noise here.
warnings.filterwarnings("ignore", message=r"Port \d+ is already in use")
# Each embedded cluster silences Dask's logs while it lives and restores the previous level when it
# closes, so with two clusters up the first to close would let the other's shutdown chatter through.
# (distributed sets its loggers' levels when first imported, so import it before setting ours)
import distributed  # noqa: E402,F401

logging.getLogger("distributed").setLevel(logging.ERROR)


def chain_spec(n_ops: int, chains: int = 100, replicate_every: int = 0, devices: int = 2) -> str:
    """``chains`` chains of ``add scalar`` ops, round-robin over ``devices`` CPU tasks.

    With ``replicate_every`` > 0, every that-many chains one step is a replicate
    construct over the job's tasks (planning then exercises expansion too).
    """
    lines = ["version: 1", f"name: chains-{n_ops}", "cluster:", "  jobs:",
             f"    worker: {{tasks: {devices}}}", "graph:"]
    per_chain = max(1, n_ops // chains)
    count = 0
    for c in range(chains):
        device = f"/job:worker/task:{c % devices}/cpu:0"
        lines.append(f"  - {{name: c{c}_0, op: ones, shape: [4], device: {device}}}")
        count += 1
        for i in range(1, per_chain):
            if replicate_every and c % replicate_every == 0 and i == per_chain // 2:
                lines += [f"  - name: r{c}_{i}", "    replicate:",
                          f"      devices: [{', '.join(f'/job:worker/task:{t}/cpu:0' for t in range(devices))}]",
                          "      body:", f"        - {{name: x, op: add, inputs: [c{c}_{i - 1}], scalar: 1.0}}",
                          "      combine: {x: mean}", f"      combine_device: {device}",
                          f"  - {{name: c{c}_{i}, op: identity, inputs: [r{c}_{i}.x], device: {device}}}"]
                count += devices + 2
            else:
                lines.append(f"  - {{name: c{c}_{i}, op: add, inputs: [c{c}_{i - 1}], scalar: 1.0, device: {device}}}")
                count += 1
    return "\n".join(lines) + "\n"


def save_result(name: str, data: object) -> str:
    """Write ``benchmarks/results/<name>`` as JSON, atomically: a run stopped midway leaves the last one whole."""
    import json

    from orchestrator.atomic import atomic_open

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_open(path, "w") as handle:
        json.dump(data, handle, indent=2)
    return path


def write_spec(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def budget_deadline(default: float | None = None) -> float | None:
    """``--budget SECONDS`` (given by run_all.py): when this benchmark must be done, as a perf_counter time."""
    import sys
    import time

    if "--budget" in sys.argv:
        return time.perf_counter() + float(sys.argv[sys.argv.index("--budget") + 1])
    return None if default is None else time.perf_counter() + default
