"""The cost of checkpoints: the polyfit example's loop with ``checkpoint: {every: 100}`` ÷ without.

Each run is ``orchestrate run polyfit.yaml --set steps=N --report R --output-dir D`` in a fresh process, on
a copy of ``examples/polyfit.yaml`` in a temporary folder (``checkpoint: {every: 100}`` added to its
``iterate`` for the checkpointed side; the checkpoints go to that folder's ``.orchestrate/cache``). Loop =
the report's ``phases_seconds["compute"]`` (what B6 measures as orchestrate's loop). A checkpoint fetches
the loop's states (w, m, v, t: 4 small arrays) from the ps task and hands them to a writing thread, and
its step ends a window (windows of 100 steps: no extra window at every 100). Both sides must give the same
loss series byte for byte, and the checkpointed side must leave checkpoints behind.

One untimed warm-up of each side (200 steps), then rounds alternating which side goes first (5; 1 with
``--quick``, which also runs 500 steps; with ``--budget`` only as many as fit); medians (the ratio of the medians is the figure; the median of each round's ratio and the ratio of
the fastest runs are kept beside it, less moved by other processes' load). Goal: ratio ≤ 1.05.
``--against REV`` adds a side running the same spec without checkpoints with the package as it was at git
revision REV (extracted with ``git archive`` into a temporary folder, first on ``PYTHONPATH``): is the
loop without checkpoints no slower than before? Results in ``benchmarks/results/checkpoints.json``,
written after every run.

    python benchmarks/bench_checkpoints.py [--quick] [--steps N] [--rounds R] [--every K] [--budget SECONDS]
                                           [--against de91cd5]
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

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "checkpoints.json"
GOAL = 1.05
MARGIN = 15.0  # seconds of --budget kept for saving and exiting


def orchestrate_command() -> list[str]:
    """The console script of this interpreter's environment (the package under test)."""
    script = Path(sys.executable).with_name("orchestrate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator.entry"]


def make_spec(folder: Path, every: int | None) -> Path:
    """A copy of examples/polyfit.yaml (and its functions) in ``folder``, with checkpoints when ``every``."""
    folder.mkdir(parents=True)
    text = (ROOT / "examples" / "polyfit.yaml").read_text(encoding="utf-8")
    if every is not None:
        anchor = "      window: ${params.window}\n"
        assert text.count(anchor) == 1, "examples/polyfit.yaml no longer sets its window as expected"
        text = text.replace(anchor, anchor + f"      checkpoint: {{every: {every}, keep: 2}}\n")
    (folder / "polyfit_fns.py").write_text((ROOT / "examples" / "polyfit_fns.py").read_text(encoding="utf-8"))
    spec = folder / "polyfit.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def extract(revision: str, into: Path) -> Path:
    """The package at ``revision`` (git archive of orchestrator/), for a side run with the old code."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "orchestrator"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_once(spec: Path, steps: int, out: Path, old_package: Path | None) -> dict[str, Any]:
    """One run in a fresh process: its loop seconds, whole seconds and loss series."""
    report = out / "run.json"
    env = dict(os.environ)
    command = orchestrate_command()
    if old_package is not None:  # the old package first on the path; its own entry point
        env["PYTHONPATH"] = os.pathsep.join([str(old_package), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        command = [sys.executable, "-c", "import sys; from orchestrator.cli import run_cli; sys.exit(run_cli())"]
    started = time.perf_counter()
    done = subprocess.run([*command, "run", str(spec), "--set", f"steps={steps}", "--report", str(report),
                           "--output-dir", str(out), "--no-progress"],
                          capture_output=True, text=True, env=env, cwd=spec.parent, timeout=600)
    whole = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{spec} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads(report.read_text(encoding="utf-8"))
    losses = (out / "results" / "polyfit_loss.csv").read_bytes()
    return {"loop_s": float(data["phases_seconds"]["compute"]), "whole_s": whole, "losses": losses}


def checkpoints_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.npz") if "checkpoints" in p.parts)


def summary(sides: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, runs in sides.items():
        loops = [r["loop_s"] for r in runs]
        out[name] = {"runs": len(runs), "loop_s": statistics.median(loops) if loops else None, "loop_runs": loops,
                     "whole_s": statistics.median([r["whole_s"] for r in runs]) if runs else None}
    return out


def save(args: argparse.Namespace, sides: dict[str, list[dict[str, Any]]], rounds: int, extra: dict[str, Any],
         started: float) -> dict[str, Any]:
    table = summary(sides)
    none, every = table["none"]["loop_s"], table["every"]["loop_s"]
    result = {"steps": args.steps, "every": args.every, "rounds": args.rounds, "rounds_done": rounds,
              "goal_at_most": GOAL, "sides": table,
              "ratio": every / none if none and every else None, "seconds": time.perf_counter() - started, **extra}
    # robust to load that other processes put on the machine: ratios within a round, and of the fastest runs
    paired = [e["loop_s"] / n["loop_s"] for e, n in zip(sides["every"], sides["none"])]
    result["paired_ratio_median"] = statistics.median(paired) if paired else None
    result["fastest_ratio"] = min(table["every"]["loop_runs"]) / min(table["none"]["loop_runs"]) if paired else None
    if "before" in table and table["before"]["loop_s"] and none:
        result["ratio_now_over_before"] = none / table["before"]["loop_s"]
        result["fastest_now_over_before"] = min(table["none"]["loop_runs"]) / min(table["before"]["loop_runs"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 steps, 1 round")
    parser.add_argument("--steps", type=int, default=None, help="loop steps (default 2000)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    parser.add_argument("--every", type=int, default=100, help="steps between checkpoints (default 100)")
    parser.add_argument("--budget", type=float, default=None, help="seconds at most; rounds that do not fit are left out")
    parser.add_argument("--against", default=None, help="a git revision: also time the loop with that package")
    args = parser.parse_args()
    args.steps = args.steps or (500 if args.quick else 2000)
    args.rounds = args.rounds or (1 if args.quick else 5)
    return args


def main() -> int:
    args = parse()
    started = time.perf_counter()
    deadline = started + args.budget - MARGIN if args.budget else None
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as tmp:
        base = Path(tmp)
        specs = {"none": make_spec(base / "none", None), "every": make_spec(base / "every", args.every)}
        old: dict[str, Path | None] = {name: None for name in specs}
        if args.against:
            specs["before"] = make_spec(base / "before", None)
            old["before"] = extract(args.against, base / "package")
        for name, spec in specs.items():  # warm-up: disk cache and byte-code, untimed
            run_once(spec, 2 * args.every, base / f"warm-{name}", old[name])
        sides: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
        rounds, slowest = 0, 0.0
        for r in range(args.rounds):
            if deadline is not None and time.perf_counter() + slowest > deadline:
                print(f"round {r + 1} left out: the budget does not fit it", flush=True)
                break
            begun = time.perf_counter()
            order = list(specs) if r % 2 == 0 else list(reversed(specs))  # alternate who goes first
            for name in order:
                got = run_once(specs[name], args.steps, base / f"{name}-{r}", old[name])
                sides[name].append(got)
                print(f"round {r + 1} {name:>6}: loop {got['loop_s']:.3f} s, whole {got['whole_s']:.2f} s", flush=True)
            rounds, slowest = r + 1, max(slowest, time.perf_counter() - begun)
            same = all(run["losses"] == sides["none"][0]["losses"] for runs in sides.values() for run in runs)
            saved = checkpoints_left(base / "every")
            result = save(args, sides, rounds, {"same_losses": same, "checkpoints_left": saved,
                                                "against": args.against}, started)
    if not rounds:
        return 1
    print(f"polyfit {args.steps} steps, loop (medians of {rounds}): checkpoint every {args.every} "
          f"{result['sides']['every']['loop_s']:.3f} s ÷ none {result['sides']['none']['loop_s']:.3f} s = "
          f"{result['ratio']:.3f} (goal ≤ {GOAL}; within a round {result['paired_ratio_median']:.3f}, fastest runs "
          f"{result['fastest_ratio']:.3f}); same loss series: {result['same_losses']}; "
          f"checkpoints left: {', '.join(result['checkpoints_left'])}")
    if "ratio_now_over_before" in result:
        print(f"without checkpoints, now ÷ {args.against}: {result['ratio_now_over_before']:.3f} "
              f"({result['sides']['none']['loop_s']:.3f} s vs {result['sides']['before']['loop_s']:.3f} s; "
              f"fastest runs {result['fastest_now_over_before']:.3f})")
    return 0 if result["same_losses"] and result["checkpoints_left"] else 1


if __name__ == "__main__":
    sys.exit(main())
