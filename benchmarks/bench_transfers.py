"""B3: bytes moved between workers (Dask's own transfer logs) ÷ the minimum the plan implies.

Each spec makes values cross devices several times with known sizes. The
minimum is computed from the plan alone: every distinct (value, consuming
device) pair moves the value's bytes once (``Placement.transfers``,
deduplicated per input and target device). The measured figure is what Dask's
workers logged in ``transfer_incoming_log`` for this run's keys
(``report["totals"]["bytes_moved"]``), where Dask counts ``sizeof()`` of each
value (for NumPy arrays: ``nbytes``), plus what loop windows sent worker to
worker (``bytes_exchanged``). Every spec runs at both granularities (a task
per device partition, the default, and a task per op). Goal: 1.00 for every
spec at both.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from specgen import save_result, write_spec  # noqa: E402

from orchestrator.api import plan_file  # noqa: E402
from orchestrator.api import RunSettings, run_plan  # noqa: E402

MIB = 2**20

# One 8 MiB array on the CPU read by 3 ops on GPU:0 and 2 on GPU:1; each GPU reduces
# to a scalar that comes back to the CPU. Minimum: 8 MiB x 2 devices + 2 scalars x 8 B.
FANOUT = """\
version: 1
name: b3-fanout
cluster:
  jobs:
    localhost: {gpus: 2}
graph:
  - {name: big, op: random.uniform, shape: [1024, 1024], seed: 1, device: /cpu:0}
  - scope: /gpu:0
    ops:
      - {name: a1, op: mul, inputs: [big], scalar: 2.0}
      - {name: a2, op: square, inputs: [big]}
      - {name: a3, op: add, inputs: [big], scalar: 1.0}
      - {name: sa, op: add_n, inputs: [a1, a2, a3]}
      - {name: ta, op: sum, inputs: [sa]}
  - scope: /gpu:1
    ops:
      - {name: b1, op: mul, inputs: [big], scalar: 3.0}
      - {name: b2, op: sub, inputs: [big, b1]}
      - {name: tb, op: sum, inputs: [b2]}
  - {name: total, op: add, inputs: [ta, tb], device: /cpu:0}
outputs:
  total: "-"
"""

# make_parallel: x split along axis 0 over 2 GPUs, w broadcast to both, results
# concatenated on the CPU. Minimum: each half of x once, w twice, each half of y back once.
REPLICATE = """\
version: 1
name: b3-replicate
cluster:
  jobs:
    localhost: {gpus: 2}
graph:
  - {name: x, op: random.uniform, shape: [2048, 512], seed: 2, device: /cpu:0}
  - {name: w, op: random.uniform, shape: [512, 256], seed: 3, device: /cpu:0}
  - name: towers
    replicate:
      devices: [/gpu:0, /gpu:1]
      split: {x: 0}
      broadcast: [w]
      body:
        - {name: h, op: matmul, inputs: [x, w]}
        - {name: y, op: square, inputs: [h]}
        - {name: z, op: add, inputs: [y, h]}
      combine: {z: concat}
      combine_device: /cpu:0
  - {name: s, op: sum, inputs: [towers.z], device: /cpu:0}
outputs:
  s: "-"
"""

# A chain hopping CPU -> GPU:0 -> GPU:1 -> CPU, with a value read twice on the next device, and
# a control edge (after: [y]) from GPU:0 to the CPU, which must move no array.
# Minimum: x to GPU:0, y to GPU:1, z back to the CPU: 3 x 4 MiB.
HOPS = """\
version: 1
name: b3-hops
cluster:
  jobs:
    localhost: {gpus: 2}
graph:
  - {name: x, op: random.normal, shape: [1024, 512], seed: 4, device: /cpu:0}
  - {name: y, op: square, inputs: [x], device: /gpu:0}
  - {name: y2, op: mul, inputs: [y], scalar: 0.5, device: /gpu:1}
  - {name: z, op: add, inputs: [y, y2], device: /gpu:1}
  - {name: back1, op: sum, inputs: [z], device: /cpu:0}
  - {name: back2, op: mean, inputs: [z], device: /cpu:0}
  - {name: out, op: add, inputs: [back1, back2], device: /cpu:0, after: [y]}
outputs:
  out: "-"
"""

# Two tasks of a "ps/worker" cluster: variables on the ps task's CPU read by every GPU of the
# worker task, a gradient-like value going back. Crosses processes of different tasks.
PS = """\
version: 1
name: b3-ps
cluster:
  jobs:
    ps: {tasks: 1}
    worker: {tasks: 1, gpus: 2}
placement:
  default: /job:worker
graph:
  - {name: v, op: random.uniform, shape: [512, 512], seed: 5, device: /job:ps/cpu:0}
  - {name: g0, op: square, inputs: [v], device: /gpu:0}
  - {name: g1, op: mul, inputs: [v], scalar: 2.0, device: /gpu:1}
  - {name: g1b, op: add, inputs: [v, g1], device: /gpu:1}
  - {name: upd, op: add_n, inputs: [g0, g1b], device: /job:ps/cpu:0}
  - {name: s, op: sum, inputs: [upd], device: /job:ps/cpu:0}
outputs:
  s: "-"
"""

# A loop of 30 steps in windows of 10 on GPU:0 reading a CPU value every step: the value moves to
# GPU:0 once for the whole loop (not once per step or per window). Minimum: w (2 MiB) once.
LOOP = """\
version: 1
name: b3-loop
cluster:
  jobs:
    localhost: {gpus: 1}
graph:
  - {name: w, op: random.uniform, shape: [512, 512], seed: 6, device: /cpu:0}
  - {name: x0, op: zeros, shape: [512, 512], device: /gpu:0}
  - name: train
    iterate:
      steps: 30
      window: 10
      state: {x: x0}
      body:
        - {name: g, op: mul, inputs: [w], scalar: 0.001, device: /gpu:0}
        - {name: x_next, op: add, inputs: [x, g], device: /gpu:0}
        - {name: x_w, op: add, inputs: [x_next, w], device: /gpu:0}
      update: {x: x_next}
outputs:
  train.x: "-"
"""

SPECS = {"fanout": FANOUT, "replicate": REPLICATE, "hops": HOPS, "ps": PS, "loop": LOOP}


def minimum_bytes(plan: Any) -> tuple[int, list[dict[str, Any]]]:
    """Sum of nbytes over distinct (value, consuming device) pairs, from the plan alone."""
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for placement in plan.placements:
        for t in placement.transfers:
            key = (str(t.ref), t.target)
            if key not in pairs:
                if t.nbytes is None:
                    raise SystemExit(f"the plan does not know the size of {t.ref}: cannot compute the minimum")
                pairs[key] = {"value": str(t.ref), "from": t.source, "to": t.target, "nbytes": int(t.nbytes)}
    return sum(p["nbytes"] for p in pairs.values()), list(pairs.values())


def logged_transfers(dask_worker: Any, run: str) -> list[tuple[str, int]]:
    """This worker's transfer log entries for one run's keys: (key, nbytes as Dask counted it)."""
    return [(str(key), int(nbytes)) for entry in dask_worker.transfer_incoming_log
            for key, nbytes in entry.get("keys", {}).items() if run in str(key)]


def kind_of(key: str) -> str:
    """What a moved key is: an array moved for readers, or a control token (``after``)."""
    return "control token" if key.startswith("done(") else "value"


def measure(name: str, text: str, repeats: int, granularity: str) -> dict[str, Any]:
    from distributed import Client

    from orchestrator.execute.cluster import EmbeddedCluster

    path = write_spec(os.path.join(tempfile.mkdtemp(), f"{name}.yaml"), text)
    plan = plan_file(path)
    minimum, pairs = minimum_bytes(plan)
    cluster = EmbeddedCluster(plan.spec.cluster, None).start()
    runs = []
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            result = run_plan(plan, RunSettings(scheduler=cluster.scheduler_address, write_outputs=False,
                                                progress=False, granularity=granularity), lambda _: None)
            seconds = time.perf_counter() - started
            totals = result.report["totals"]
            with Client(cluster.scheduler_address, set_as_default=False) as client:
                logged = [item for items in client.run(logged_transfers, run=result.report["run"]).values()
                          for item in items]
            runs.append({"bytes_moved": int(totals["bytes_moved"]), "transfers_seen": int(totals["transfers_seen"]),
                         "bytes_exchanged": int(totals.get("bytes_exchanged", 0)),
                         "moves_counted_by_runner": int(totals["moves"]), "seconds": seconds, "tasks": totals["tasks"],
                         "logged": [{"key": k.replace(result.report["run"], "<run>"), "nbytes": n, "kind": kind_of(k)}
                                    for k, n in sorted(logged)]})
            assert sum(n for _, n in logged) + runs[-1]["bytes_exchanged"] == runs[-1]["bytes_moved"], (logged, totals)
    finally:
        cluster.close()
    worst = max(runs, key=lambda r: r["bytes_moved"])  # the worst run counts
    moved = worst["bytes_moved"]
    tokens = sum(t["nbytes"] for t in worst["logged"] if t["kind"] == "control token")
    return {"spec": name, "granularity": granularity, "minimum_bytes": minimum, "pairs": pairs, "runs": runs,
            "bytes_moved": moved,
            "value_bytes_moved": moved - tokens, "control_token_bytes": tokens,
            "excess_bytes": moved - minimum, "ratio": moved / minimum if minimum else float("nan"),
            "stable": len({r["bytes_moved"] for r in runs}) == 1}


def main() -> int:
    repeats = 2 if "--quick" in sys.argv else 3
    out: dict[str, Any] = {}
    for granularity in ("partition", "op"):
        results: dict[str, Any] = {}
        for name, text in SPECS.items():
            r = measure(name, text, repeats, granularity)
            results[name] = r
            extra = (f"; +{r['excess_bytes']} B over the minimum" if r["excess_bytes"] else "") + \
                (f" ({r['control_token_bytes']} B of them control tokens, Dask's sizeof(None))"
                 if r["control_token_bytes"] else "")
            print(f"{granularity:>9} {name:>10}: moved {r['bytes_moved']:>9} B in {r['runs'][0]['transfers_seen']} "
                  f"transfer(s), {r['runs'][0]['tasks']} tasks | plan minimum {r['minimum_bytes']:>9} B over "
                  f"{len(r['pairs'])} (value, device) pair(s) | ratio {r['ratio']:.4f}{extra}"
                  f"{'' if r['stable'] else ' (varied between runs)'}", flush=True)
        moved = sum(r["bytes_moved"] for r in results.values())
        minimum = sum(r["minimum_bytes"] for r in results.values())
        worst = max(r["ratio"] for r in results.values())
        values = sum(r["value_bytes_moved"] for r in results.values())
        summary = {"bytes_moved": moved, "minimum_bytes": minimum, "ratio": moved / minimum, "worst_ratio": worst,
                   "value_bytes_moved": values, "value_ratio": values / minimum}
        print(f"{granularity:>9}      total: moved {moved / MIB:.3f} MiB, minimum {minimum / MIB:.3f} MiB: ratio "
              f"{moved / minimum:.4f}, worst spec {worst:.4f}; arrays alone {values / minimum:.4f} (goal 1.00)")
        out[granularity] = {"specs": results, "summary": summary}
        save_result("transfers.json", {**out, "summary": out.get("partition", out[granularity])["summary"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
