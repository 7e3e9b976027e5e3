"""Generate large specs for the benchmarks (chains of tiny ops, optionally with replicate constructs)."""

from __future__ import annotations

import os


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
                          f"      body:", f"        - {{name: x, op: add, inputs: [c{c}_{i - 1}], scalar: 1.0}}",
                          "      combine: {x: mean}", f"      combine_device: {device}",
                          f"  - {{name: c{c}_{i}, op: identity, inputs: [r{c}_{i}.x], device: {device}}}"]
                count += devices + 2
            else:
                lines.append(f"  - {{name: c{c}_{i}, op: add, inputs: [c{c}_{i - 1}], scalar: 1.0, device: {device}}}")
                count += 1
    return "\n".join(lines) + "\n"


def write_spec(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
