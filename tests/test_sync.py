"""``run --sync``: every op in this process, in plan order, with no cluster — and the cluster's results.

The comparison side is a real embedded Dask cluster on loopback: every example
and every spec of specs/valid runs both ways and must give the same values
(exactly: the kernels are the same NumPy calls), the same output files and the
same per-op records; an out-of-memory error on a simulated GPU and a user
function's exception read the same. The sync side must start no cluster and
never import ``distributed`` (checked in a fresh interpreter), and run ``call``
functions in the main thread, where ``breakpoint()`` works.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from test_loops import NESTED as LOOPS_NESTED

from orchestrator import plan_file, run_file
from orchestrator.api import RunResult
from orchestrator.cli import run_cli
from orchestrator.errors import DeviceOutOfMemory, OpFailedError, UsageError
from orchestrator.plan.records import IN_PROCESS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
VALID = ROOT / "specs" / "valid"


def quiet(_: str) -> None:
    pass


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _records(result: RunResult) -> dict[str, tuple[Any, ...]]:
    return {e["name"]: (e["planned_device"], e["worker"], e["runs"], e["output_bytes"], e.get("note"),
                        e.get("cache")) for e in result.report["ops"]}


def _both(spec: Path, tmp_path: Path, **settings: Any) -> tuple[RunResult, RunResult]:
    """The spec run on an embedded cluster and in this process, each writing into its own folder."""
    cluster = run_file(spec, output_dir=str(tmp_path / "cluster"), echo=quiet, **settings)
    here = run_file(spec, output_dir=str(tmp_path / "sync"), echo=quiet, sync=True, **settings)
    return cluster, here


# A device worker runs BLAS with the device's threads (OMP_NUM_THREADS=1 here); this process keeps
# its own, and a threaded BLAS may sum a product in another order: the last bit can differ
# (seen with NumPy 1.26's OpenBLAS on the sweep example's ridge solve: 8.9e-16 of 5.65).
ULP = {"rtol": 1e-13, "atol": 0.0}


def _same(cluster: RunResult, here: RunResult, tmp_path: Path) -> None:
    """Values, files written and per-op records equal; the report says where each ran."""
    assert set(here.values) == set(cluster.values)
    for name, value in cluster.values.items():
        np.testing.assert_allclose(np.asarray(here.values[name]), np.asarray(value), err_msg=name, **ULP)
    files = sorted(p.relative_to(tmp_path / "cluster") for p in (tmp_path / "cluster").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "sync") for p in (tmp_path / "sync").rglob("*") if p.is_file())
    for file in files:
        ours, theirs = tmp_path / "sync" / file, tmp_path / "cluster" / file
        if file.suffix == ".npy":
            np.testing.assert_allclose(np.load(ours), np.load(theirs), err_msg=str(file), **ULP)
        elif file.suffix == ".csv":
            np.testing.assert_allclose(np.loadtxt(ours, delimiter=",", ndmin=1), np.loadtxt(theirs, delimiter=",",
                                       ndmin=1), err_msg=str(file), **ULP)
        else:
            assert ours.read_bytes() == theirs.read_bytes(), file
    assert _records(here) == _records(cluster)
    assert here.report["mode"] == "sync" and cluster.report["mode"] == "cluster"
    assert here.dashboard_link is None and here.report["startup_seconds"] == 0.0
    for op in here.report["ops"]:
        if op["worker"] is not None:  # ran in this process, timed per op, on the device the plan named
            assert op["start"] > 0 and op["duration"] >= 0
            assert op["worker"] == op["planned_device"] or op["planned_device"].endswith("GPU:*")


# ----------------------------------------------------------------------------- the same results as the cluster


@pytest.mark.cluster
@pytest.mark.parametrize("name", sorted(p.name for p in VALID.glob("*.yaml")))
def test_every_valid_spec_gives_the_clusters_values(name: str, tmp_path: Path) -> None:
    _same(*_both(VALID / name, tmp_path), tmp_path)


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["quickstart.yaml", "towers.yaml", "make_parallel.yaml", "sweep.yaml"])
def test_every_example_gives_the_clusters_values_and_files(name: str, tmp_path: Path) -> None:
    """Replicate (split, broadcast, every combine), sweep and select, load and save (a checkpoint)."""
    cluster, here = _both(EXAMPLES / name, tmp_path)
    _same(cluster, here, tmp_path)
    assert any((tmp_path / "sync").rglob("*.np*"))


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_polyfit_gang_windows_on_the_cluster_are_steps_in_order_here(tmp_path: Path) -> None:
    """The training loop: gang windows on the cluster (values sent worker to worker), steps in order here."""
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("results"))
    cluster, here = _both(tmp_path / "examples" / "polyfit.yaml", tmp_path, params={"steps": "120", "window": 50})
    _same(cluster, here, tmp_path)
    assert cluster.report["loops"]["train"]["mode"].startswith("gang: ")
    assert here.report["loops"]["train"]["mode"].startswith("partition: a task per device partition per step, in this "
                                                    "process (--sync)")
    assert _records(here)["train/step"][2] == 120  # every step ran, each op recorded per step
    assert len(here.values["train.loss"]) == 120


def test_the_plan_decides_how_loops_run_in_this_process() -> None:
    """--sync reads its loop modes from the plan, as the cluster's driver does: nothing overrides it at run time."""
    plan = plan_file(str(EXAMPLES / "polyfit.yaml"))
    assert plan.loop_mode("train", "partition").mode == "gang"
    in_process = plan.loop_mode("train", IN_PROCESS)
    assert in_process.mode == "partition" and "(--sync)" in in_process.why


# test_loops' epochs of batches, its results written to files (the runs compare files too)
NESTED = LOOPS_NESTED.replace('''    outputs:
      epochs.w: "-"
      epochs.m: "-"
''', "    outputs: {epochs.w: w.npy, epochs.m: m.csv}\n")


@pytest.mark.cluster
@pytest.mark.parametrize("granularity", ["partition", "op"])
def test_nested_loops_and_any_gpu_give_the_clusters_values(tmp_path: Path, granularity: str) -> None:
    spec = _write(tmp_path / "nested.yaml", NESTED.replace("device: /gpu:0}\n                  - {name: v1",
                                                           "device: /gpu:*}\n                  - {name: v1"))
    cluster, here = _both(spec, tmp_path, granularity=granularity)
    _same(cluster, here, tmp_path)
    assert here.report["loops"]["epochs"]["mode"].startswith("nested")
    assert _records(here)["epochs/batches/x"][2] == 12
    assert _records(here)["epochs/batches/g"][1] == "/job:localhost/replica:0/task:0/device:GPU:0"


@pytest.mark.cluster
def test_the_cache_serves_both_ways(tmp_path: Path) -> None:
    """Entries are keyed by what made a value, never by how it ran: a sync run reuses a cluster run's."""
    spec = _write(tmp_path / "cached.yaml", """\
        version: 1
        cache: true
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: random.uniform, shape: [4], seed: 3, device: /cpu:0}
          - {name: b, op: mul, inputs: [a], scalar: 2.0, device: /gpu:0}
          - name: train
            iterate:
              steps: 5
              state: {w: b}
              body:
                - {name: w1, op: add, inputs: [w], scalar: 1.0, device: /gpu:0}
                - {name: s1, op: sum, inputs: [w1], device: /cpu:0}
              update: {w: w1}
              metrics: {s: s1}
        outputs: {b: "-", train.w: "-", train.s: "-"}
        """)
    cluster = run_file(spec, echo=quiet)
    assert {e["name"] for e in cluster.report["ops"] if e["worker"]} == {"a", "b", "train/w1", "train/s1"}
    lines: list[str] = []
    here = run_file(spec, echo=lines.append, sync=True)
    assert not [e["name"] for e in here.report["ops"] if e["worker"]]
    assert any(line.startswith("cache: 3 reused, 0 to compute") for line in lines), lines
    assert _records(here) == _records(run_file(spec, echo=quiet))  # a second cluster run reuses the same
    for name in cluster.values:
        np.testing.assert_array_equal(here.values[name], cluster.values[name])
    spec.write_text(spec.read_text().replace("scalar: 1.0", "scalar: 2.0"))
    lines.clear()
    changed = run_file(spec, echo=lines.append, sync=True)
    assert {e["name"] for e in changed.report["ops"] if e["worker"]} == {"train/w1", "train/s1"}
    assert [line for line in lines if line.startswith("cache: ")][1:] == ["cache: 'train' runs again: body op 'w1' changed"]
    np.testing.assert_array_equal(changed.values["train.w"], cluster.values["b"] + 10.0)
    resumed = run_file(spec, echo=quiet, sync=True, resume=True)
    assert not [e["name"] for e in resumed.report["ops"] if e["worker"]]
    np.testing.assert_array_equal(resumed.values["train.s"], changed.values["train.s"])


# ----------------------------------------------------------------------------- failures read the same


USER_MODULE = '''
import threading

def grow(x, xp, n=0):
    return xp.ones((n,), dtype="float64")

def broken(x, xp):
    values = {"a": 1}
    return values["missing"]

def where(x, xp):
    return xp.asarray(float(threading.current_thread() is threading.main_thread()))

def probe(x, xp):
    y = x * 3
    breakpoint()
    return y
'''


@pytest.mark.cluster
def test_a_gpu_over_its_cap_fails_the_same_way_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out" / "x.npy", np.arange(3.0))
    spec = _write(tmp_path / "oom.yaml", """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1, gpu_memory: {limit: 1MiB}}}}
        graph:
          - {name: x, op: ones, shape: [4], device: /cpu:0}
          - {name: big, op: call, fn: "usermod:grow", kernels: [cpu, gpu], inputs: [x], params: {n: 500000},
             device: /gpu:0}
        outputs: {x: out/x.npy, big: out/big.npy}
        """)
    errors = []
    for sync in (False, True):
        with pytest.raises(DeviceOutOfMemory) as info:
            run_file(spec, echo=quiet, sync=sync)
        errors.append(str(info.value))
    # what else the GPU holds then is the cluster's to vary: a worker may still hold an earlier copy of x
    assert re.sub(r"[\d.]+ \w*B in use", "N in use", errors[0]) == re.sub(r"[\d.]+ \w*B in use", "N in use",
                                                                         errors[1])
    assert errors[1].startswith("OOM when allocating 3.8 MiB for op 'big' on ")
    assert "GPU:0: 32 B in use" in errors[1]  # here, only its input x: one copy, charged once
    assert "op 'big'" in errors[1] and "/job:localhost/replica:0/task:0/device:GPU:0" in errors[1]
    assert "limit is 1.0 MiB" in errors[1]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "x.npy"), np.arange(3.0))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["x.npy"]


@pytest.mark.cluster
def test_a_call_functions_error_names_the_op_and_the_users_line_as_on_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    spec = _write(tmp_path / "broken.yaml", """\
        version: 1
        graph:
          - {name: x, op: ones, shape: [2]}
          - {name: oops, op: call, fn: "usermod:broken", inputs: [x]}
        """)
    errors = []
    for sync in (False, True):
        with pytest.raises(OpFailedError) as info:
            run_file(spec, echo=quiet, sync=sync)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert "op 'oops' failed on /job:localhost/replica:0/task:0/device:CPU:0: KeyError: 'missing'" in errors[1]
    assert f"{tmp_path / 'usermod.py'}:9 in broken: return values[\"missing\"]" in errors[1]


# ----------------------------------------------------------------------------- in this process, nothing else


def test_call_functions_run_in_the_main_thread_and_see_their_edits(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    spec = _write(tmp_path / "where.yaml", """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: x, op: ones, shape: [2], device: /cpu:0}
          - {name: here, op: call, fn: "usermod:where", kernels: [cpu, gpu], inputs: [x], device: /gpu:0}
        outputs: {here: "-"}
        """)
    assert float(run_file(spec, echo=quiet, sync=True).values["here"]) == 1.0
    # the next run imports the spec's module afresh, as a new cluster's workers would
    (tmp_path / "usermod.py").write_text(USER_MODULE.replace("is threading.main_thread()", "is None"))
    assert float(run_file(spec, echo=quiet, sync=True).values["here"]) == 0.0
    assert "usermod" not in sys.modules and str(tmp_path) not in sys.path


def test_a_breakpoint_in_a_call_function_stops_in_pdb(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    spec = _write(tmp_path / "probe.yaml", """\
        version: 1
        graph:
          - {name: x, op: fill, shape: [2], value: 1.5}
          - {name: y, op: call, fn: "usermod:probe", inputs: [x]}
        outputs: {y: "-"}
        """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(spec), "--sync", "--no-progress"],
                          input="p y.tolist()\nc\n", capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert "(Pdb)" in done.stdout and "usermod.py(17)probe()" in done.stdout
    assert "[4.5, 4.5]" in done.stdout  # the run's real value, printed at the breakpoint


def test_sync_starts_no_cluster_and_never_imports_distributed(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("results"))
    script = textwrap.dedent(f"""\
        import multiprocessing, sys, threading
        from orchestrator.cli import run_cli
        for argv in (["run", {str(tmp_path / "examples" / "quickstart.yaml")!r}, "--sync"],
                     ["run", {str(tmp_path / "examples" / "polyfit.yaml")!r}, "--sync", "--set", "steps=20"]):
            assert run_cli(argv) == 0, argv
        print("distributed" in sys.modules, len(multiprocessing.active_children()), threading.active_count())
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False 0 1"  # no distributed, no worker process, no thread left
    assert "in this process (--sync: no cluster)" in done.stdout


def test_cli_run_sync_prints_the_log_and_the_summary(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "quickstart.yaml", tmp_path / "quickstart.yaml")
    out = io.StringIO()
    code = run_cli(["run", str(tmp_path / "quickstart.yaml"), "--sync", "--report", str(tmp_path / "run.json")],
                   out=out)
    text = out.getvalue()
    assert code == 0, text
    assert text.startswith("running 'quickstart' in this process (--sync: no cluster, every op in plan order; 3 "
                           "devices, GPU backend: simulated — simulated GPUs;")
    assert "dashboard" not in text
    log = [line for line in text.splitlines() if line.startswith("Executing op ")]
    assert log[2] == "Executing op MatMul (towers/0/c) in device /job:localhost/replica:0/task:0/device:GPU:0"
    assert [line.split("(")[1].split(")")[0] for line in log] == ["a", "b", "towers/0/c", "towers/1/c",
                                                                  "towers.c", "d"]  # plan order
    summary = text.splitlines()[-1]
    assert summary.startswith("  6 ops (6 tasks, partition granularity) in ")
    assert "s in this process (--sync: no cluster); 7 planned transfers, 288 B copied between devices; " \
           "placement verified against the plan" in summary
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["mode"] == "sync" and report["totals"]["transfers_seen"] == 7
    assert {t["to"] for t in report["transfers"]} >= {"/job:localhost/replica:0/task:0/device:GPU:1"}
    np.testing.assert_array_equal(np.load(tmp_path / "results" / "quickstart.npy"),
                                  np.array([[22.0, 28.0], [49.0, 64.0]]))


@pytest.mark.parametrize("flags, named", [(["--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
                                          (["--keep-alive"], "--keep-alive"),
                                          (["--performance-report", "perf.html"], "--performance-report"),
                                          (["--gpu-backend", "cupy"], "--gpu-backend cupy")])
def test_flags_that_need_a_cluster_are_usage_errors(flags: list[str], named: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["run", str(tmp_path / "no-such-spec.yaml"), "--sync", *flags], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"--sync runs every op in this process, with no cluster (and GPUs simulated): {named} "
                   f"({'gpu_backend' if 'gpu' in named else named[2:].replace('-', '_')}=) cannot be used with it\n")
    with pytest.raises(UsageError, match="cannot be used with it"):
        run_file(EXAMPLES / "quickstart.yaml", echo=quiet, sync=True, keep_alive=True)
