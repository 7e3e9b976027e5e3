"""BL: the two process layouts side by side, on three kinds of work: what ``processes``' default rests on.

``cluster.jobs.<job>.processes`` puts a task's devices in a worker process each (``device``, the default) or
in one process per machine (``host``: one thread runs a loop window's ops of all of them, values handed over
by reference; docs/clusters.md). The same spec is run in both layouts, alternating which goes first:

* **loop of small steps**: the polyfit example (``examples/polyfit.yaml``, 2000 steps, ten ops of tens of
  microseconds a step): ``orchestrate run`` in a fresh process (B6's orchestrate side); the figure is the
  loop (the report's compute phase), the whole process beside it;
* **loop of heavy steps**: a loop of 40 steps whose two towers each draw a [700, 700] matrix and square it
  on their simulated GPU (about 20 ms of NumPy a tower), summed on the CPU; the figure is the loop, as above;
* **towers**: B4's two compute-bound towers ([2400, 2000] @ [2000, 2000] each) on two simulated GPUs of one
  task, on an embedded cluster started per block (B4's ``Config``); the figure is the compute span, from
  the first op's start to the last op's end, medians of 3 runs a block;
* **packed search**: B9's latency-bound 64-copy search (each fit waits 5 ms, as a small model on a real
  GPU waits for its kernels) packed 8 at a time on each of two simulated GPUs (``orchestrate run``, the
  report's ``elapsed_seconds``); every loss checked against NumPy's.

Ratios are ``host`` ÷ ``device`` (below 1: ``host`` is faster). Medians of the rounds (3; 1 with
``--quick``); results in ``benchmarks/results/layouts.json``.

    python benchmarks/bench_layouts.py [--quick] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(__file__))
import bench_polyfit  # noqa: E402
import bench_scaling  # noqa: E402
import bench_search  # noqa: E402
from specgen import median, save_result  # noqa: E402

LAYOUTS = ("device", "host")


def polyfit(layout: str) -> dict[str, float]:
    """The polyfit example's 2000 steps, every job in ``layout``."""
    result = bench_polyfit.run_orchestrate(2000, ["--no-progress"], 600, layout)
    w = np.array(result["w"])
    assert np.all(np.abs(w - bench_polyfit.TARGET) <= bench_polyfit.TOLERANCE), f"w = {w}, not near [5, 0, 3]"
    return {"figure_s": float(result["loop_s"]), "whole_s": float(result["whole_s"])}


HEAVY = """\
version: 1
name: heavy-steps
cluster:
  jobs:
    localhost: {{gpus: 2, processes: {layout}}}
graph:
  - {{name: t0, op: variable, value: 0.0}}
  - name: train
    iterate:
      steps: 40
      window: 10
      state: {{t: t0}}
      body:
        - name: towers
          replicate:
            devices: [/gpu:0, /gpu:1]
            body:
              - {{name: x, op: random.uniform, shape: [700, 700], seed: 1}}
              - {{name: y, op: matmul, inputs: [x, x]}}
              - {{name: s, op: sum, inputs: [y]}}
            combine: {{s: add_n}}
            combine_device: /cpu:0
        - {{name: t1, op: add, inputs: [t, towers.s], device: /cpu:0}}
      update: {{t: t1}}
outputs:
  train.t: t.npy
"""


class HeavySteps:
    """The loop of heavy steps, a spec per layout (written once); each run checks the sum against NumPy's."""

    def __init__(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="bench-layouts-heavy-"))
        self.specs = {layout: base / f"heavy-{layout}.yaml" for layout in LAYOUTS}
        for layout, path in self.specs.items():
            path.write_text(HEAVY.format(layout=layout), encoding="utf-8")
        self.expected = 0.0
        for step in range(40):
            for tower in range(2):  # as the random.uniform kernel draws: seed, the tower's copy, the step
                x = np.random.default_rng([1, tower, step]).uniform(0.0, 1.0, (700, 700))
                self.expected += float((x @ x).sum())

    def __call__(self, layout: str) -> dict[str, float]:
        report = self.specs[layout].with_suffix(".json")
        started = time.perf_counter()
        subprocess.run([*bench_search.orchestrate_command(), "run", str(self.specs[layout]), "--no-progress",
                        "--report", str(report), "--output-dir", str(report.parent)], check=True,
                       stdout=subprocess.DEVNULL)
        whole = time.perf_counter() - started
        data = json.loads(report.read_text(encoding="utf-8"))
        got = float(np.load(report.parent / "t.npy"))
        assert abs(got - self.expected) <= 1e-9 * abs(self.expected), (got, self.expected)
        return {"figure_s": float(data["phases_seconds"]["compute"]), "whole_s": whole}


def towers(layout: str) -> dict[str, float]:
    """B4's two towers on two simulated GPUs of one task whose job is in ``layout``: a block of 3 runs."""
    plain = bench_scaling.spec_text
    bench_scaling.spec_text = lambda devices, count: plain(devices, count).replace(
        "localhost: {gpus:", f"localhost: {{processes: {layout}, gpus:")
    try:
        config = bench_scaling.Config(2, 2)
    finally:
        bench_scaling.spec_text = plain
    config.block(3)
    summary = config.summary()
    return {"figure_s": float(summary["compute_s"]), "whole_s": float(summary["wall_s"])}


class Search:
    """B9's latency-bound search, in one folder per layout (made once), packed 8 copies at a time."""

    def __init__(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="bench-layouts-"))
        self.folders = {layout: base / layout for layout in LAYOUTS}
        data: dict[str, Any] = {}
        for layout, folder in self.folders.items():
            data = bench_search.make_folder(folder, bench_search.VARIANTS["latency"])
            spec = yaml.safe_load((folder / "search.yaml").read_text(encoding="utf-8"))
            for job in spec["cluster"]["jobs"].values():
                job["processes"] = layout
            (folder / "search.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        self.expected = bench_search.expected_losses(data)

    def __call__(self, layout: str) -> dict[str, float]:
        run = bench_search.run_ours(self.folders[layout], 8, self.expected)  # checks every loss against NumPy
        return {"figure_s": float(run["run_s"]), "whole_s": float(run["whole_s"])}


def measure(work: Callable[[str], dict[str, float]], rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    for r in range(rounds):
        for layout in LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]:
            runs[layout].append(work(layout))
    out: dict[str, Any] = {layout: {"figure_s": median([x["figure_s"] for x in done]),
                                    "whole_s": median([x["whole_s"] for x in done]),
                                    "figure_runs": [x["figure_s"] for x in done]} for layout, done in runs.items()}
    out["host_over_device"] = out["host"]["figure_s"] / out["device"]["figure_s"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    works: dict[str, tuple[str, Callable[[str], dict[str, float]]]] = {
        "loop": ("polyfit loop, 2000 steps (loop s)", polyfit),
        "heavy": ("loop of heavy steps, 40 steps (loop s)", HeavySteps()),
        "towers": ("B4 towers on 2 GPUs (compute span s)", towers),
        "search": ("B9 latency-bound search packed 8 a GPU (run s)", Search()),
    }
    results: dict[str, Any] = {"rounds": rounds, "cores": os.cpu_count()}
    for key, (label, work) in works.items():
        results[key] = {"label": label, **measure(work, rounds)}
        r = results[key]
        print(f"{label}: device {r['device']['figure_s']:.3f}, host {r['host']['figure_s']:.3f}; "
              f"host ÷ device {r['host_over_device']:.2f}", flush=True)
        save_result("layouts.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
