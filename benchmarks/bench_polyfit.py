"""B6: the flagship example's training loop, ``orchestrate run examples/polyfit.yaml``, beside the same
computation written by hand with Dask futures, with Ray and with TensorFlow.

The computation (``examples/polyfit.yaml``): fit y = 5x² + 3 with the model w·[x², x, 1], w from zeros(3),
2000 steps; each step each of 2 "GPU" towers draws a batch of 50 samples uniform in [-10, 10]
(NumPy ``default_rng([7, tower, step])`` on every side) and computes the gradient and loss of the mean
squared error; the gradients are averaged on a parameter-server CPU, where Adam (lr 0.1, betas 0.9 and
0.999, eps 1e-8, t the 1-based step) updates w. Each side must end within 0.05 of [5, 0, 3].

Sides, each run as a fresh process of its own (its whole wall time is the "whole process" figure: Python
start, imports, cluster start, the loop, shut-down):

* ``orchestrate``: ``orchestrate run examples/polyfit.yaml --set steps=N --report R --output-dir D`` (the console
  script; extra arguments with ``--orchestrate-args``). Loop = the report's ``phases_seconds["compute"]``;
  final w parsed from the ``train.w =`` lines it prints. Its whole process is also quoted apart: start-up = the
  report's ``startup_seconds`` (the embedded cluster started and its workers ready), shut-down = from the
  report file's modification time to the process's output closed (client and cluster closed, the process and
  its fork server gone), and the rest (Python, imports, planning, outputs).
* ``orchestrate-device``: the same, with every job of the spec in ``processes: device`` (the default layout:
  a worker process per device; the example says ``processes: host``, the devices of a machine in one worker
  process: docs/clusters.md), the spec written into the run's temporary folder beside copies of its folder's
  Python modules. So both layouts run side by side.
* ``dask-futures``: ``LocalCluster`` of 4 single-thread worker processes (the spec's ps CPU, worker CPU,
  GPU:0, GPU:1; the "GPUs" are CPU processes), ``client.submit(..., workers=[address])`` per task: per step
  2 tower tasks on the GPU workers and one mean+Adam task on the ps worker, futures chained, nothing
  gathered until the end (then w and the per-step losses). Loop = first submit to everything gathered.
* ``ray`` (optional): ``ray.init(num_cpus=4)``; the parameter server is an actor holding w, m, v and t
  (Adam in its ``apply`` method, as in Ray's own parameter-server example), the towers are remote tasks;
  ObjectRefs are chained, ``ray.get`` only at the end. Loop = first ``.remote`` to everything fetched.
* ``tensorflow`` (optional): 3 logical CPU devices; w, m, v, t are variables on CPU:0 (the ps); one
  ``tf.function`` step places each tower on CPU:1 / CPU:2 with ``tf.device`` and does the mean and a
  hand-written Adam on CPU:0; a Python loop calls it 2000 times with the NumPy batches. Loop = the 2000 calls
  plus reading the losses.
* ``numpy`` (reference, no ratio): the same loop in one plain NumPy process: what the arithmetic costs.

Ray and TensorFlow are skipped with a note when not importable (``pip install -e '.[anchors]'``).
One untimed warm-up of each side (at most 100 steps: it warms the disk cache and byte-code, not the
loop), then rounds alternating the order of the sides (3; 1 with ``--quick``, which also runs 200 steps;
with ``--budget`` only as many as fit); medians. Ratios orchestrate ÷ each anchor, for the
loop and for the whole process, for each of our two sides. Goals: ÷ Ray <= 1.0, ÷ hand-written Dask futures
<= 0.25, ÷ TensorFlow <= 0.7 (issue 30; issue 19 asked for 1.0); the loop ÷ plain NumPy's <= 5.
Results in ``benchmarks/results/polyfit.json``, written after every run.

    python benchmarks/bench_polyfit.py [--quick] [--steps N] [--rounds R] [--sides orchestrate,dask-futures]
                                       [--orchestrate-args="--granularity partition"] [--budget SECONDS]
    python benchmarks/bench_polyfit.py --side dask-futures --steps 200   # one side once; prints its JSON
"""

from __future__ import annotations

# Only the standard library and NumPy at module level: a side's process imports what that side needs alone.
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLE = os.path.join(ROOT, "examples", "polyfit.yaml")
SPEC = {"path": EXAMPLE}  # what the orchestrate side runs: --spec replaces it

SEED, BATCH, LOW, HIGH = 7, 50, -10.0, 10.0
LR, BETA1, BETA2, EPS = 0.1, 0.9, 0.999, 1e-8
TARGET = np.array([5.0, 0.0, 3.0])
TOLERANCE = 0.05
WARMUP_STEPS = 100
BUDGET_MARGIN = 20.0  # seconds of --budget kept for stopping a run cut short, saving and exiting
ROUND_MARGIN = 1.3  # a round starts only if the time left is this many times the last round's
SIDES = ("orchestrate", "orchestrate-device", "dask-futures", "ray", "tensorflow", "numpy")
OURS = {"orchestrate": None, "orchestrate-device": "device"}  # the spec as written; its jobs a process per device
ANCHORS = ("ray", "dask-futures", "tensorflow")  # the order ratios are printed in
# orchestrate ÷ anchor, at most; TensorFlow's is issue 30's (issue 19 asked for 1.0), and the loop ÷ plain NumPy
# in one process at most NUMPY_GOAL (issue 30)
GOALS = {"ray": 1.0, "dask-futures": 0.25, "tensorflow": 0.7}
NUMPY_GOAL = 5.0
NAMES = {"ray": "Ray", "dask-futures": "hand-written Dask futures", "tensorflow": "TensorFlow",
         "orchestrate": "orchestrate run", "orchestrate-device": "orchestrate run (processes: device)",
         "numpy": "plain NumPy (one process)"}
IMPORTS = {"ray": "ray", "tensorflow": "tensorflow"}
RESULT_TAG = "B6-RESULT "


# --------------------------------------------------------------------------- the computation, shared by the sides


def batch(tower: int, step: int) -> np.ndarray:
    return np.random.default_rng([SEED, tower, step]).uniform(LOW, HIGH, BATCH)


def grad_loss(w: np.ndarray, tower: int, step: int) -> tuple[np.ndarray, float]:
    """One tower: its batch, the gradient in w of the mean squared error, and that error."""
    x = batch(tower, step)
    features = np.stack([x * x, x, np.ones_like(x)], axis=1)
    error = features @ w - (5.0 * x * x + 3.0)
    return (2.0 / x.shape[0]) * (features.T @ error), float(np.mean(error * error))


def adam(w: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, g: np.ndarray) -> tuple[np.ndarray, ...]:
    m = BETA1 * m + (1.0 - BETA1) * g
    v = BETA2 * v + (1.0 - BETA2) * g * g
    m_hat = m / (1.0 - BETA1 ** t)
    v_hat = v / (1.0 - BETA2 ** t)
    return w - LR * m_hat / (np.sqrt(v_hat) + EPS), m, v


# --------------------------------------------------------------------------- the sides (each in a process of its own)


def side_numpy(steps: int) -> dict[str, Any]:
    started = time.perf_counter()
    w, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    losses: list[float] = []
    for step in range(steps):
        (g0, l0), (g1, l1) = grad_loss(w, 0, step), grad_loss(w, 1, step)
        w, m, v = adam(w, m, v, step + 1, (g0 + g1) / 2)
        losses.append((l0 + l1) / 2)
    return {"loop_s": time.perf_counter() - started, "w": w.tolist(), "loss": losses[-1]}


# Dask: what a user writes. The functions live in this script, so Dask pickles them by value, as it would a
# user's script's.
def dask_initial_state() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    return np.zeros(3), np.zeros(3), np.zeros(3), float("nan")


def dask_tower(state: tuple[Any, ...], tower: int, step: int) -> tuple[np.ndarray, float]:
    return grad_loss(state[0], tower, step)


def dask_ps(state: tuple[Any, ...], out0: tuple[np.ndarray, float], out1: tuple[np.ndarray, float],
            t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    w, m, v, _ = state
    w, m, v = adam(w, m, v, t, (out0[0] + out1[0]) / 2)
    return w, m, v, (out0[1] + out1[1]) / 2


def side_dask_futures(steps: int) -> dict[str, Any]:
    import logging

    import distributed
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    started = time.perf_counter()
    # the spec's cluster: ps CPU, worker CPU, GPU:0, GPU:1 -> 4 worker processes of one thread each
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.wait_for_workers(4)
        info = client.scheduler_info()["workers"]
        ps, _cpu, gpu0, gpu1 = sorted(info, key=lambda address: int(info[address]["name"]))
        setup = time.perf_counter() - started
        started = time.perf_counter()
        state = client.submit(dask_initial_state, workers=[ps])
        states = []  # every step's state is kept, for the per-step loss (as the orchestrator writes its losses)
        for step in range(steps):
            out0 = client.submit(dask_tower, state, 0, step, workers=[gpu0])
            out1 = client.submit(dask_tower, state, 1, step, workers=[gpu1])
            state = client.submit(dask_ps, state, out0, out1, step + 1, workers=[ps])
            states.append(state)
        submitted = time.perf_counter() - started
        final = client.gather(states)
        loop = time.perf_counter() - started
        del states, state
    return {"loop_s": loop, "submit_s": submitted, "setup_s": setup, "w": final[-1][0].tolist(),
            "loss": final[-1][3], "dask": distributed.__version__}


def side_ray(steps: int) -> dict[str, Any]:
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=4, logging_level="ERROR", log_to_driver=False)  # as many CPUs as the spec has devices
    try:
        @ray.remote(num_cpus=1)
        def tower(w: np.ndarray, tower: int, step: int) -> tuple[np.ndarray, float]:
            return grad_loss(w, tower, step)

        @ray.remote(num_cpus=1)
        class ParameterServer:
            def __init__(self) -> None:
                self.w, self.m, self.v, self.t = np.zeros(3), np.zeros(3), np.zeros(3), 0
                self.losses: list[float] = []

            def weights(self) -> np.ndarray:
                return self.w

            def apply(self, out0: tuple[np.ndarray, float], out1: tuple[np.ndarray, float]) -> np.ndarray:
                self.t += 1
                self.w, self.m, self.v = adam(self.w, self.m, self.v, self.t, (out0[0] + out1[0]) / 2)
                self.losses.append((out0[1] + out1[1]) / 2)
                return self.w

            def history(self) -> list[float]:
                return self.losses

        server = ParameterServer.remote()  # type: ignore[attr-defined]
        ray.get(server.weights.remote())  # the actor is up: part of the set-up, not of the loop
        setup = time.perf_counter() - started
        started = time.perf_counter()
        w = server.weights.remote()
        for step in range(steps):
            w = server.apply.remote(tower.remote(w, 0, step), tower.remote(w, 1, step))
        submitted = time.perf_counter() - started
        final, losses = ray.get([w, server.history.remote()])
        loop = time.perf_counter() - started
    finally:
        ray.shutdown()
    return {"loop_s": loop, "submit_s": submitted, "setup_s": setup, "w": np.asarray(final).tolist(),
            "loss": losses[-1], "ray": ray.__version__}


def side_tensorflow(steps: int) -> dict[str, Any]:
    import tensorflow as tf

    started = time.perf_counter()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(3)])
    ps, towers = "/device:CPU:0", ("/device:CPU:1", "/device:CPU:2")
    f64 = tf.float64
    with tf.device(ps):
        w, m, v = (tf.Variable(tf.zeros([3], f64)) for _ in range(3))
        t = tf.Variable(tf.constant(0.0, f64))

    @tf.function
    def step(x0: tf.Tensor, x1: tf.Tensor) -> tf.Tensor:
        grads, losses = [], []
        for device, x in zip(towers, (x0, x1), strict=True):
            with tf.device(device):
                features = tf.stack([x * x, x, tf.ones_like(x)], axis=1)
                error = tf.linalg.matvec(features, w) - (5.0 * x * x + 3.0)
                grads.append((2.0 / BATCH) * tf.linalg.matvec(features, error, transpose_a=True))
                losses.append(tf.reduce_mean(error * error))
        with tf.device(ps):
            g = (grads[0] + grads[1]) / 2.0
            t.assign_add(1.0)
            m.assign(BETA1 * m + (1.0 - BETA1) * g)
            v.assign(BETA2 * v + (1.0 - BETA2) * g * g)
            m_hat = m / (1.0 - tf.pow(tf.constant(BETA1, f64), t))
            v_hat = v / (1.0 - tf.pow(tf.constant(BETA2, f64), t))
            w.assign_sub(LR * m_hat / (tf.sqrt(v_hat) + EPS))
            return (losses[0] + losses[1]) / 2.0

    setup = time.perf_counter() - started
    started = time.perf_counter()
    losses = [step(tf.constant(batch(0, s)), tf.constant(batch(1, s))) for s in range(steps)]
    history = [float(loss.numpy()) for loss in losses]
    loop = time.perf_counter() - started
    return {"loop_s": loop, "setup_s": setup, "w": w.numpy().tolist(), "loss": history[-1],
            "tensorflow": tf.__version__}


def run_side_here(side: str, steps: int) -> int:
    """``--side NAME``: run one in-process side once and print its result as one JSON line."""
    fn = {"numpy": side_numpy, "dask-futures": side_dask_futures, "ray": side_ray,
          "tensorflow": side_tensorflow}[side]
    result = fn(steps)
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------- driving the sides


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # as the embedded cluster does
        env.setdefault(var, "1")
    return env


def orchestrate_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "orchestrate")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "orchestrator"]


def step_settings(steps: int) -> list[str]:
    """The example's own parameters set for ``steps`` steps (its window no longer than the run)."""
    return ["--set", f"steps={steps}", "--set", f"window={min(100, steps)}"]


def parse_w(stdout: str) -> list[float] | None:
    """The array printed after a ``train.w =`` line (NumPy may wrap it over several lines)."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("train.w ="):
            text = line.split("=", 1)[1]
            for more in lines[i + 1:]:
                if "]" in text:
                    break
                text += " " + more
            numbers = re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", text.split("]")[0])
            return [float(n) for n in numbers] or None
    return None


def run_process(cmd: list[str], timeout: float | None, cwd: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    # a session of its own, so a timeout stops its whole group (cluster workers included)
    process = subprocess.Popen(cmd, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        raise TimeoutError(f"{shlex.join(cmd)} ran past {timeout:.0f} s\n{err[-2000:]}") from None
    elapsed = time.perf_counter() - started
    return elapsed, subprocess.CompletedProcess(cmd, process.returncode, out, err)


def with_layout(spec_path: str, folder: str, layout: str) -> str:
    """The spec with every job in ``processes: <layout>``, written into ``folder`` beside copies of the spec
    folder's Python modules (its ``call``s import them from there)."""
    import yaml

    with open(spec_path) as handle:
        spec = yaml.safe_load(handle)
    for job in spec["cluster"]["jobs"].values():
        job["processes"] = layout
    source = os.path.dirname(os.path.abspath(spec_path))
    for name in os.listdir(source):
        if name.endswith(".py"):
            shutil.copy(os.path.join(source, name), folder)
    path = os.path.join(folder, os.path.basename(spec_path).replace(".yaml", f"-{layout}.yaml"))
    with open(path, "x") as handle:
        yaml.safe_dump(spec, handle, sort_keys=False)
    return path


def run_orchestrate(steps: int, extra: list[str], timeout: float | None, layout: str | None = None) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="b6-orchestrate-")
    try:
        report_path = os.path.join(workdir, "run.json")
        spec = with_layout(SPEC["path"], workdir, layout) if layout else SPEC["path"]
        cmd = [*orchestrate_command(), "run", spec, *step_settings(steps), "--report", report_path,
               "--output-dir", workdir, *extra]
        whole, done = run_process(cmd, timeout, ROOT)
        ended = time.time()  # its output closed: the process and everything it started are gone
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} exited {done.returncode}\n{done.stdout[-2000:]}\n"
                               f"{done.stderr[-4000:]}")
        with open(report_path) as handle:
            report = json.load(handle)
        # The report is written once the loop's outputs are: what follows is shut-down (the client and the
        # cluster closed, the process gone), timed from the file's modification time on the same clock.
        shutdown = max(0.0, ended - os.stat(report_path).st_mtime)
        phases = report.get("phases_seconds") or {}
        loss = None
        loss_csv = os.path.join(workdir, "results", "polyfit_loss.csv")
        if os.path.exists(loss_csv):
            values = np.loadtxt(loss_csv, ndmin=1)
            loss = float(values.reshape(-1)[-1]) if values.size else None
        return {"whole_s": whole, "loop_s": phases.get("compute"), "phases_s": phases, "w": parse_w(done.stdout),
                "loss": loss, "report_elapsed_s": report.get("elapsed_seconds"), "command": shlex.join(cmd),
                "startup_s": report.get("startup_seconds"), "shutdown_s": shutdown}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_in_process_side(side: str, steps: int, timeout: float | None) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--steps", str(steps)]
    whole, done = run_process(cmd, timeout, ROOT)
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith(RESULT_TAG)), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"side {side} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return {"whole_s": whole, **json.loads(line[len(RESULT_TAG):])}


def run_side(side: str, steps: int, extra: list[str], timeout: float | None) -> dict[str, Any]:
    result = run_orchestrate(steps, extra, timeout, OURS[side]) if side in OURS else \
        run_in_process_side(side, steps, timeout)
    w = result.get("w")
    result["converged"] = bool(w is not None and len(w) == 3 and np.all(np.abs(np.array(w) - TARGET) <= TOLERANCE))
    return result


# --------------------------------------------------------------------------- figures


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize(runs: dict[str, list[dict[str, Any]]], skipped: dict[str, str], meta: dict[str, Any]) -> dict[str, Any]:
    sides: dict[str, Any] = {}
    for side, results in runs.items():
        if not results:
            continue
        loops = [r["loop_s"] for r in results if r.get("loop_s") is not None]
        last = results[-1]
        sides[side] = {
            "name": NAMES[side], "runs": len(results),
            "loop_s": median(loops) if loops else None, "whole_s": median([r["whole_s"] for r in results]),
            "loop_runs": [r.get("loop_s") for r in results], "whole_runs": [r["whole_s"] for r in results],
            "w": last.get("w"), "loss": last.get("loss"), "converged": all(r["converged"] for r in results),
            **{k: v for k, v in last.items() if k not in ("loop_s", "whole_s", "w", "loss", "converged")},
        }
        for kind in ("startup", "shutdown"):  # orchestrate's: its cluster's start-up, and all that follows the run
            figures = [r[f"{kind}_s"] for r in results if r.get(f"{kind}_s") is not None]
            if figures:
                sides[side].update({f"{kind}_s": median(figures), f"{kind}_runs": figures})
    for side, why in skipped.items():
        sides[side] = {"name": NAMES[side], "skipped": why}
    layouts = {"ratios": "orchestrate", "ratios_device": "orchestrate-device"}
    return {**meta, "sides": sides, **{key: ratios(sides, sides.get(ours) or {}) for key, ours in layouts.items()
                                       if ours in sides}}


def ratios(sides: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """One of our sides ÷ each anchor, loop and whole process, and its loop ÷ plain NumPy's."""
    out: dict[str, Any] = {}
    for anchor in ANCHORS:
        if anchor not in sides:  # not chosen (--sides)
            continue
        theirs = sides.get(anchor) or {}
        entry: dict[str, Any] = {"name": NAMES[anchor], "goal_at_most": GOALS[anchor]}
        if "skipped" in theirs:
            entry["skipped"] = theirs["skipped"]
        for kind in ("loop", "whole"):
            a, b = ours.get(f"{kind}_s"), theirs.get(f"{kind}_s")
            value = a / b if a is not None and b else None
            entry[kind] = value
            entry[f"{kind}_met"] = None if value is None else value <= GOALS[anchor]
        out[anchor] = entry
    numpy_loop, loop = (sides.get("numpy") or {}).get("loop_s"), ours.get("loop_s")
    if numpy_loop and loop is not None:
        out["numpy"] = {"name": NAMES["numpy"], "goal_at_most": NUMPY_GOAL, "loop": loop / numpy_loop,
                        "loop_met": loop / numpy_loop <= NUMPY_GOAL}
    return out


def startup_shutdown(r: dict[str, Any]) -> str:
    """orchestrate's whole process, apart: start-up, the loop, shut-down, and the rest (Python, imports, planning)."""
    whole, loop, up, down = r.get("whole_s"), r.get("loop_s"), r.get("startup_s"), r.get("shutdown_s")
    rest = whole - loop - up - down if None not in (whole, loop, up, down) else None  # type: ignore[operator]
    return (f"start-up {fmt(up)} s (cluster and workers ready), shut-down {fmt(down)} s (report written to process "
            f"gone), the rest {fmt(rest)} s (Python, imports, planning, outputs)")


def fmt(value: float | None, spec: str = "{:.2f}") -> str:
    return "—" if value is None else spec.format(value)


def print_summary(data: dict[str, Any]) -> None:
    print(f"\nB6 polyfit, {data['steps']} steps, medians of {data['rounds_done']} round(s):")
    for side in SIDES:
        s = data["sides"].get(side)
        if s is None:
            continue
        if "skipped" in s:
            print(f"  {NAMES[side]:<34} skipped: {s['skipped']}")
            continue
        w = "[" + ", ".join(f"{x:.4f}" for x in s["w"]) + "]" if s.get("w") else "—"
        print(f"  {NAMES[side]:<34} loop {fmt(s['loop_s']):>7} s  whole process {fmt(s['whole_s']):>7} s  "
              f"w = {w} {'(within 0.05 of [5, 0, 3])' if s['converged'] else '(NOT within 0.05 of [5, 0, 3])'}")
        if s.get("startup_s") is not None:
            print(f"  {'':<34} {startup_shutdown(s)}")
    if data["steps"] < 2000:
        print(f"  ({data['steps']} steps are too few to reach [5, 0, 3]: the example runs 2000)")
    for key, ours in (("ratios", "orchestrate"), ("ratios_device", "orchestrate-device")):
        for r in (data.get(key) or {}).values():
            print_ratio(NAMES[ours], r)


def print_ratio(ours: str, r: dict[str, Any]) -> None:
    if "skipped" in r:
        print(f"  {ours} ÷ {r['name']}: skipped ({r['skipped']})")
        return
    kinds = [k for k in ("loop", "whole") if f"{k}_met" in r]
    marks = {k: "—" if r[f"{k}_met"] is None else "met" if r[f"{k}_met"] else "missed" for k in kinds}
    shown = "  ".join(f"{'loop' if k == 'loop' else 'whole process'} {fmt(r[k], '{:.3f}'):>6} ({marks[k]})"
                      for k in kinds)
    print(f"  {ours} ÷ {r['name']:<26} {shown}  goal <= {r['goal_at_most']}")


def importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 steps, 1 round")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 2000; --quick: 200)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3; --quick: 1)")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {','.join(SIDES)}")
    parser.add_argument("--orchestrate-args", default="", metavar="ARGS",
                        help="extra arguments for `orchestrate run`, e.g. --orchestrate-args='--granularity op'")
    parser.add_argument("--spec", default=EXAMPLE, help="the spec the orchestrate side runs (default: the example; "
                        "make gpu-check passes it with its GPUs folded onto the machine's)")
    parser.add_argument("--budget", type=float, default=None, help="seconds this benchmark may take (run_all.py)")
    parser.add_argument("--side", choices=[s for s in SIDES if s not in OURS], help=argparse.SUPPRESS)
    args = parser.parse_args()
    steps = args.steps or (200 if args.quick else 2000)
    if args.side:
        return run_side_here(args.side, steps)

    sys.path.insert(0, HERE)
    from specgen import save_result

    started = time.perf_counter()
    # stop a run in time to save and exit before run_all.py stops this whole process group at its budget
    deadline = None if args.budget is None else started + args.budget - BUDGET_MARGIN
    rounds = args.rounds or (1 if args.quick else 3)
    extra = shlex.split(args.orchestrate_args)
    SPEC["path"] = os.path.abspath(args.spec)
    chosen = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SIDES]
    if unknown:
        parser.error(f"unknown sides {unknown}; choose from {', '.join(SIDES)}")
    skipped: dict[str, str] = {}
    for side in chosen:
        if side in IMPORTS and not importable(IMPORTS[side]):
            skipped[side] = f"{IMPORTS[side]} is not installed (pip install -e '.[anchors]')"
            print(f"B6: {side} skipped: {skipped[side]}", flush=True)
    sides = [s for s in chosen if s not in skipped]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    meta: dict[str, Any] = {"steps": steps, "rounds": rounds, "rounds_done": 0,
                            "warmup_steps": min(steps, WARMUP_STEPS), "cores": os.cpu_count(),
                            "orchestrate_args": extra, "spec": SPEC["path"], "tolerance": TOLERANCE, "goals_at_most": GOALS}

    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    def save() -> None:
        meta["seconds"] = time.perf_counter() - started
        save_result("polyfit.json", summarize(runs, skipped, meta))

    try:
        measure(sides, steps, rounds, extra, runs, meta, left, save)
        code = 0
    except TimeoutError as error:  # out of the budget
        print(f"B6: stopped, out of its time budget: {error}", flush=True)
        if meta["rounds_done"]:  # keep the whole rounds only: every side then has as many runs
            meta["cut_round_runs"] = {side: results[meta["rounds_done"]:] for side, results in runs.items()
                                      if len(results) > meta["rounds_done"]}
            for results in runs.values():
                del results[meta["rounds_done"]:]
            code = 0  # the budget decided how many rounds: figures from whole rounds, not a failure
        else:
            code = 1  # not even one round: only partial figures
    save()
    print_summary(summarize(runs, skipped, meta))
    print(f"B6 took {time.perf_counter() - started:.0f} s", flush=True)
    return code


def measure(sides: list[str], steps: int, rounds: int, extra: list[str], runs: dict[str, list[dict[str, Any]]],
            meta: dict[str, Any], left: Callable[[], float | None], save: Callable[[], None]) -> None:
    """One untimed warm-up of each side, then up to ``rounds`` rounds, alternating the order of the sides."""
    estimate: dict[str, float] = {}
    for side in sides:  # warm-up: a few steps (disk cache, byte-code, first imports), not the whole loop
        warm = min(steps, WARMUP_STEPS)
        r = run_side(side, warm, extra, left())
        loop = r.get("loop_s") or 0.0
        estimate[side] = (r["whole_s"] - loop) + loop * steps / warm  # start-up + the loop scaled up
        print(f"B6 warm-up {NAMES[side]} ({warm} steps): whole process {r['whole_s']:.2f} s, "
              f"loop {fmt(r.get('loop_s'))} s", flush=True)
    round_estimate = sum(estimate.values())
    for i in range(rounds):
        remaining = left()
        if i > 0 and remaining is not None and remaining < round_estimate * ROUND_MARGIN:
            print(f"B6: round {i + 1} skipped: {remaining:.0f} s left in the budget, a round takes "
                  f"~{round_estimate:.0f} s", flush=True)
            meta["rounds_skipped_for_budget"] = rounds - i
            return
        round_started = time.perf_counter()
        for side in (sides if i % 2 == 0 else list(reversed(sides))):
            remaining = left()
            r = run_side(side, steps, extra, None if remaining is None else max(remaining, 1.0))
            runs[side].append(r)
            w = "[" + ", ".join(f"{x:.4f}" for x in r["w"]) + "]" if r.get("w") else "—"
            print(f"B6 round {i + 1} {NAMES[side]:<34} loop {fmt(r.get('loop_s')):>7} s  whole process "
                  f"{r['whole_s']:7.2f} s  w = {w}{'' if r['converged'] else ' (not within 0.05 of [5, 0, 3])'}",
                  flush=True)
            if r.get("startup_s") is not None:
                print(f"B6 round {i + 1} {'':<34} {startup_shutdown(r)}", flush=True)
            save()  # after every run: a run stopped by its budget keeps what it measured
        meta["rounds_done"] = i + 1
        round_estimate = time.perf_counter() - round_started


if __name__ == "__main__":
    sys.exit(main())
