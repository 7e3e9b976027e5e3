"""B9: a 64-copy search of small models on 2 simulated GPUs, packed ÷ one at a time, and beside Ray.

The search: polynomial ridge regression (``examples/search_fns.py``) over a grid of 16 strengths x 4
degrees = 64 copies, each a ``fit`` and an ``mse`` (2000 training points, 500 for validation, loaded from
``.npy`` files both sides read). The cluster: one task with 2 simulated GPUs, a 4 MiB cap each.

Two variants of the model, each measured on every side:

* **latency-bound**: each ``fit`` first waits 5 ms (``time.sleep``), as a small model on a real GPU
  waits for its kernels and copies while the host thread idles: what packing is for;
* **compute-bound**: no wait; a simulated GPU's work is NumPy on the host's CPU, and on a 2-core machine
  the one-at-a-time side already keeps both cores busy (two GPU workers), so packing can only hide the
  runtime's own latency.

* **one at a time**: ``gpu_threads: 1``: each GPU runs one copy after another, round-robin (32 deep);
* **packed**: ``gpu_threads: 8``: the plan packs as many copies on a GPU at once as fit under its cap
  (8 here: what the threads allow; the plan says how much memory that takes);
* **Ray** (only with the ``anchors`` extra installed): the same 64 fits as Ray tasks asking for
  ``num_gpus=1/8`` (and no CPU, so the GPU fraction is what packs them) on ``ray.init(num_gpus=2)``,
  NumPy on the same data, after a warm-up round that starts Ray's workers. Ray does not cap GPU memory.
  Ray runs after ours, as many rounds as ours ran: while it is up its own processes (raylet, GCS, idle
  workers) stay, and on 2 cores neither side should run beside the other's processes.

Each orchestrate run is ``orchestrate run search.yaml --set threads=N --report R`` in a fresh process; its
time is the report's ``elapsed_seconds``: the run from the first task submitted to the last value back,
with the cluster up (its start-up, the same for both sides, is kept beside it as ``startup_s``). The
Ray side's time is the 64 submissions to the last result, the same span. Both sides' losses must equal
NumPy's computed here, and no GPU's peak (seen by its backend) may pass its cap.

* **sizes**: copies of four sizes sharing their data (issue 26): a grid of 4 widths x 16 strengths, each
  copy's ``features`` a ``call`` whose ``output`` shape is ``[2000, "${copy.width}"]`` (62.5 KiB to
  3.9 MiB), then ``fit`` (waiting 5 ms, as the latency-bound one) and ``mse`` on it; the data (x, y, xv,
  yv) is read by every copy and held once per GPU. An 8 MiB cap: the plan packs the small copies 8 at
  once (the threads) and the largest 2, each counted by its own size; counted as the largest, every copy
  would have run 2 at once (``padded_at_once``, from the plan, quoted beside). No Ray side (its fractional
  GPUs know nothing of sizes).

Goals: packed ÷ one at a time ≤ 0.5; packed ÷ Ray ≤ 1.0. Medians of the rounds (5; 2 with ``--quick``;
with ``--budget`` only as many as fit); results in ``benchmarks/results/search.json``.

    python benchmarks/bench_search.py [--quick] [--rounds R] [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "search.json"
GOAL_PACKED, GOAL_RAY = 0.5, 1.0
MARGIN = 15.0
LAMS = [float(v) for v in np.logspace(-4, 2, 16)]
DEGREES = [1, 3, 5, 7]
SPEC = """\
version: 1
name: search-bench
params:
  threads: {type: integer, default: 8}
cluster:
  jobs:
    localhost: {gpus: 2, gpu_threads: "${params.threads}", gpu_memory: {limit: 4MiB}}
graph:
  - scope: /cpu:0
    ops:
      - {name: x, op: load, path: x.npy, shape: [2000]}
      - {name: y, op: load, path: y.npy, shape: [2000]}
      - {name: xv, op: load, path: xv.npy, shape: [500]}
      - {name: yv, op: load, path: yv.npy, shape: [500]}
  - name: poly
    sweep:
      grid: {lam: LAMS, degree: DEGREES}
      spread: /gpu:*
      body:
        - {name: w, op: call, fn: "bench_fns:fit", kernels: [cpu, gpu], inputs: [x, y, lam, degree],
           output: {shape: [8]}}
        - {name: loss, op: call, fn: "bench_fns:mse", kernels: [cpu, gpu], inputs: [xv, yv, w],
           output: {shape: []}}
      gather: {losses: loss}
outputs:
  poly.losses: losses.npy
"""


WIDTHS = [4, 16, 64, 256]
SIZES_SPEC = """\
version: 1
name: search-sizes
params:
  threads: {type: integer, default: 8}
cluster:
  jobs:
    localhost: {gpus: 2, gpu_threads: "${params.threads}", gpu_memory: {limit: 8MiB}}
graph:
  - scope: /cpu:0
    ops:
      - {name: x, op: load, path: x.npy, shape: [2000]}
      - {name: y, op: load, path: y.npy, shape: [2000]}
      - {name: xv, op: load, path: xv.npy, shape: [500]}
      - {name: yv, op: load, path: yv.npy, shape: [500]}
  - name: poly
    sweep:
      grid: {width: WIDTHS, lam: LAMS}
      spread: /gpu:*
      body:
        - {name: v, op: call, fn: "sizes_fns:features", kernels: [cpu, gpu], inputs: [x, width],
           output: {shape: [2000, "${copy.width}"]}}
        - {name: w, op: call, fn: "sizes_fns:fit", kernels: [cpu, gpu], inputs: [v, y, lam],
           output: {shape: [MAX_WIDTH]}}
        - {name: loss, op: call, fn: "sizes_fns:mse", kernels: [cpu, gpu], inputs: [xv, yv, w],
           output: {shape: []}}
      gather: {losses: loss}
outputs:
  poly.losses: losses.npy
"""
SIZES_FNS = """\
import time

WAIT = {wait}  # seconds a fit waits first, as the latency-bound model's
MAX_WIDTH = {max_width}  # the weights are padded to it: every copy gives the same shape, so they gather


def features(x, width, xp):
    return x[:, None] ** xp.arange(int(width))


def fit(v, y, lam, xp):
    if WAIT:
        time.sleep(WAIT)
    d = v.shape[1]
    w = xp.linalg.solve(v.T @ v + float(lam) * xp.eye(d), v.T @ y)
    return xp.concatenate([w, xp.zeros(MAX_WIDTH - d)])


def mse(x, y, w, xp):
    error = features(x, MAX_WIDTH, xp) @ w - y
    return xp.mean(error * error)
"""


def orchestrate_command() -> list[str]:
    script = Path(sys.executable).with_name("orchestrate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator.entry"]


BENCH_FNS = """\
import time

import search_fns

WAIT = {wait}  # seconds a fit waits first: a small model on a GPU waits for its kernels, the host thread idle


def fit(x, y, lam, degree, xp):
    if WAIT:
        time.sleep(WAIT)
    return search_fns.fit(x, y, lam, degree, xp)


mse = search_fns.mse
"""
VARIANTS = {"latency": 0.005, "compute": 0.0, "sizes": 0.005}
NO_RAY = {"sizes"}  # Ray's fractional GPUs know nothing of a task's size: no side to compare with


def make_folder(folder: Path, wait: float, sizes: bool = False) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True)
    (folder / "bench_fns.py").write_text(BENCH_FNS.format(wait=wait), encoding="utf-8")
    (folder / "sizes_fns.py").write_text(SIZES_FNS.format(wait=wait, max_width=max(WIDTHS)), encoding="utf-8")
    rng = np.random.default_rng(0)
    data = {"x": rng.uniform(-1, 1, 2000), "xv": rng.uniform(-1, 1, 500)}
    data["y"] = data["x"] ** 3 - data["x"] + rng.normal(0, 0.1, 2000)
    data["yv"] = data["xv"] ** 3 - data["xv"] + rng.normal(0, 0.1, 500)
    for name, value in data.items():
        np.save(folder / f"{name}.npy", value)
    (folder / "search_fns.py").write_text((ROOT / "examples" / "search_fns.py").read_text(encoding="utf-8"))
    spec = (SIZES_SPEC if sizes else SPEC).replace("LAMS", json.dumps(LAMS)).replace("DEGREES", json.dumps(DEGREES))
    spec = spec.replace("MAX_WIDTH", str(max(WIDTHS))).replace("WIDTHS", json.dumps(WIDTHS))
    (folder / "search.yaml").write_text(spec, encoding="utf-8")
    return data


def expected_losses(data: dict[str, np.ndarray], folder: Path | None = None) -> np.ndarray:
    """Every copy's loss computed here by NumPy one by one: the search's, or with ``folder`` its sizes'."""
    if folder is not None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("sizes_fns_here", folder / "sizes_fns.py")
        assert spec is not None and spec.loader is not None
        fns = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fns)
        return np.array([float(fns.mse(data["xv"], data["yv"], fns.fit(fns.features(data["x"], width, np),
                                                                        data["y"], lam, np), np))
                         for width in WIDTHS for lam in LAMS])
    sys.path.insert(0, str(ROOT / "examples"))
    import search_fns  # the same functions, run here by NumPy one by one

    out = []
    for lam in LAMS:
        for degree in DEGREES:
            w = search_fns.fit(data["x"], data["y"], lam, degree, np)
            out.append(float(search_fns.mse(data["xv"], data["yv"], w, np)))
    return np.array(out)


def planned_packing(folder: Path) -> dict[str, Any]:
    """What the plan packs on each GPU (threads 8), and what it would if every copy were the largest."""
    out = subprocess.run([*orchestrate_command(), "plan", str(folder / "search.yaml"), "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)["sweeps"]["poly"]
    devices = {}
    for d in plan["devices"]:
        sizes = [c["bytes"] for c in plan["copies"] if c["device"] == d["device"]]
        room = d["limit_bytes"] - d["shared_bytes"] - d["kept_bytes"]
        devices[d["device"]] = {
            "at_once": d["at_once"], "waves": d["waves"], "threads": d["threads"],
            "padded_at_once": max(1, min(d["threads"], room // max(sizes))), "copy_bytes": [min(sizes), max(sizes)],
            "shared_bytes": d["shared_bytes"], "shared_values": d["shared_values"], "peak_bytes": d["peak_bytes"],
            "limit_bytes": d["limit_bytes"], "why": d["why"]}
    return devices


def run_ours(folder: Path, threads: int, expected: np.ndarray) -> dict[str, Any]:
    report = folder / f"report-{threads}.json"
    started = time.perf_counter()
    subprocess.run([*orchestrate_command(), "run", str(folder / "search.yaml"), "--set", f"threads={threads}",
                    "--report", str(report), "--output-dir", str(folder)], check=True, stdout=subprocess.DEVNULL)
    whole = time.perf_counter() - started
    data = json.loads(report.read_text(encoding="utf-8"))
    np.testing.assert_allclose(np.load(folder / "losses.npy"), expected, rtol=1e-9)
    over = [d["device"] for d in data["devices"]
            if d["limit_bytes"] and d["peak_bytes_seen"] is not None and d["peak_bytes_seen"] > d["limit_bytes"]]
    assert not over, f"over their caps: {over}"
    devices = data["sweeps"]["poly"]["devices"]
    return {"run_s": data["elapsed_seconds"], "startup_s": data["startup_seconds"], "whole_s": whole,
            "at_once": {k: v["at_once"] for k, v in devices.items()},
            "most_at_once_seen": {k: v["most_at_once_seen"] for k, v in devices.items()},
            "peak_seen": {d["device"]: d["peak_bytes_seen"] for d in data["devices"] if d["limit_bytes"]},
            "limit": {d["device"]: d["limit_bytes"] for d in data["devices"] if d["limit_bytes"]}}


class RaySide:
    """The 64 fits as Ray tasks with fractional GPUs.

    ``max_calls=0`` lets a worker run task after task: Ray's default for a task asking for GPUs is one call
    per worker process (to free the GPU's memory), which here took 14-16 s for the 64 fits, a new process
    each; this is Ray at its fastest. ``num_cpus=0``: the GPU fraction alone packs them.
    """

    def __init__(self, data: dict[str, np.ndarray], folders: dict[str, Path]):
        import importlib.util

        import ray
        import ray.cloudpickle

        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
        self.ray = ray
        self.refs = {k: ray.put(v) for k, v in data.items()}
        sys.path.insert(0, str(ROOT / "examples"))
        import search_fns

        ray.cloudpickle.register_pickle_by_value(search_fns)  # the workers get the functions, not an import
        self.fits = {}
        for variant, folder in folders.items():
            spec = importlib.util.spec_from_file_location(f"bench_fns_{variant}", folder / "bench_fns.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # cloudpickle ships by value only modules it can find imported
            spec.loader.exec_module(module)
            ray.cloudpickle.register_pickle_by_value(module)
            self.fits[variant] = module

        @ray.remote(num_gpus=1 / 8, num_cpus=0, max_calls=0)
        def one(fns: Any, x: Any, y: Any, xv: Any, yv: Any, lam: float, degree: int) -> float:
            w = fns.fit(x, y, lam, degree, np)
            return float(fns.mse(xv, yv, w, np))

        self.one = one

    def run(self, variant: str, expected: np.ndarray) -> float:
        r, fns = self.refs, self.fits[variant]
        started = time.perf_counter()
        futures = [self.one.remote(fns, r["x"], r["y"], r["xv"], r["yv"], lam, degree)
                   for lam in LAMS for degree in DEGREES]
        losses = self.ray.get(futures)
        seconds = time.perf_counter() - started
        np.testing.assert_allclose(losses, expected, rtol=1e-9)
        return seconds

    def close(self) -> None:
        self.ray.shutdown()


def median(runs: list[float]) -> float | None:
    return statistics.median(runs) if runs else None


def figures(sides: dict[str, list[dict[str, Any]]], ray_runs: list[float]) -> dict[str, Any]:
    packed = median([r["run_s"] for r in sides["packed"]])
    alone = median([r["run_s"] for r in sides["one_at_a_time"]])
    ray = median(ray_runs)
    return {
        "sides": {name: {"runs": runs, "run_s": median([r["run_s"] for r in runs]),
                         "startup_s": median([r["startup_s"] for r in runs])} for name, runs in sides.items()},
        "ray": {"runs": ray_runs, "run_s": ray},
        "packed_over_one_at_a_time": packed / alone if packed and alone else None,
        "packed_over_ray": packed / ray if packed and ray else None,
    }


def save(runs: dict[str, dict[str, Any]], ray_note: str, rounds: int,
         packings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    result = {
        "copies": len(LAMS) * len(DEGREES), "rounds_done": rounds, "ray_note": ray_note,
        "variants": {v: {"wait_s": VARIANTS[v], **figures(r["sides"], r["ray"]),
                         **({"planned": packings[v], "widths": WIDTHS, "ray_note": "no Ray side: its fractional "
                             "GPUs know nothing of a task's size"} if v in packings else {})}
                     for v, r in runs.items()},
        "goal_packed_over_one_at_a_time": GOAL_PACKED, "goal_packed_over_ray": GOAL_RAY,
        "no_device_over_its_cap": True,  # every run asserted it (peak seen by the backend <= cap)
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def one_round(r: int, folders: dict[str, Path], expected: dict[str, np.ndarray],
              runs: dict[str, dict[str, Any]]) -> None:
    for variant, folder in folders.items():
        sides = runs[variant]["sides"]
        order = [("packed", 8), ("one_at_a_time", 1)] if r % 2 == 0 else [("one_at_a_time", 1), ("packed", 8)]
        for name, threads in order:
            sides[name].append(run_ours(folder, threads, expected[variant]))
        print(f"round {r + 1}, {variant}: packed {sides['packed'][-1]['run_s']:.3f} s, one at a time "
              f"{sides['one_at_a_time'][-1]['run_s']:.3f} s", flush=True)


def ray_rounds(ray_side: RaySide, rounds: int, folders: dict[str, Path], expected: dict[str, np.ndarray],
               runs: dict[str, dict[str, Any]]) -> None:
    """As many Ray runs of each variant as ours had rounds, after a warm-up that starts its workers."""
    try:
        for variant in folders.keys() - NO_RAY:
            ray_side.run(variant, expected[variant])  # warm-up
        for r in range(rounds):
            for variant in folders.keys() - NO_RAY:
                runs[variant]["ray"].append(ray_side.run(variant, expected[variant]))
                print(f"round {r + 1}, {variant}: Ray {runs[variant]['ray'][-1]:.3f} s", flush=True)
    finally:
        ray_side.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--budget", type=float, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 4)
    deadline = time.perf_counter() + args.budget - MARGIN if args.budget else None
    base = Path(tempfile.mkdtemp(prefix="bench-search-"))
    folders = {variant: base / variant for variant in VARIANTS}
    data = {}
    for variant, folder in folders.items():
        data = make_folder(folder, VARIANTS[variant], sizes=variant in NO_RAY)
    expected = {v: expected_losses(data, folders[v] if v in NO_RAY else None) for v in folders}
    packings = {v: planned_packing(folders[v]) for v in NO_RAY}
    runs: dict[str, dict[str, Any]] = {v: {"sides": {"packed": [], "one_at_a_time": []}, "ray": []} for v in folders}
    ray_note = "Ray tasks with num_gpus=1/8, num_cpus=0, max_calls=0 on ray.init(num_cpus=2, num_gpus=2)"
    done, took = 0, 0.0
    for r in range(rounds):
        if deadline is not None and done and time.perf_counter() + took > deadline:
            print(f"round {r + 1} left out: the budget does not fit it", flush=True)
            break
        began = time.perf_counter()
        one_round(r, folders, expected, runs)
        took = time.perf_counter() - began
        done += 1
        save(runs, ray_note, done, packings)
    # Ray after ours, in rounds of its own: its processes (raylet, GCS, idle workers) stay up while it is, so
    # on 2 cores neither side should run beside the other's (Ray up through our rounds, its 64 fits took
    # 3.1-3.2 s; measured after them, 0.2-0.8 s)
    try:
        ray_side = RaySide(data, folders)
    except ImportError:
        ray_note = "Ray is not installed (pip install -e '.[anchors]'): left out"
    else:
        ray_rounds(ray_side, done, folders, expected, runs)
    result = save(runs, ray_note, done, packings)
    for variant, fig in result["variants"].items():
        ray = f"{fig['packed_over_ray']:.3f}" if fig["packed_over_ray"] else "no Ray"
        print(f"B9 {variant}: packed ÷ one at a time {fig['packed_over_one_at_a_time']:.3f} "
              f"(goal ≤ {GOAL_PACKED}), packed ÷ Ray {ray} (goal ≤ {GOAL_RAY}); no GPU over its cap", flush=True)
    for device, d in result["variants"]["sizes"]["planned"].items():
        print(f"B9 sizes, {device}: {d['at_once']} at once at most (the smallest), {d['padded_at_once']} if every "
              f"copy were the largest; copies of {d['copy_bytes'][0]} to {d['copy_bytes'][1]} B; shared once: "
              f"{', '.join(v['value'] for v in d['shared_values'])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
