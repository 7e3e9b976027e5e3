"""Searches run: the example against NumPy, packing by planned memory, what the report and table say (issue 21)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.compile.builder import thread_slots

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def quiet(_: str) -> None:
    pass


def _rng(*seed: int) -> np.random.Generator:
    return np.random.default_rng(list(seed))


def numpy_search(lams: list[float], degrees: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """examples/search.yaml fitted copy by copy in NumPy: the losses and the weights, in grid order."""
    sys.path.insert(0, str(EXAMPLES))
    import search_fns

    x, xv = _rng(1, 0).uniform(-1.0, 1.0, 4000), _rng(3, 0).uniform(-1.0, 1.0, 1000)
    y = (x * x * x - x) + _rng(2, 0).normal(0.0, 0.1, 4000)
    yv = (xv * xv * xv - xv) + _rng(4, 0).normal(0.0, 0.1, 1000)
    weights = [search_fns.fit(x, y, lam, degree, np) for lam in lams for degree in degrees]
    losses = [search_fns.mse(xv, yv, w, np) for w in weights]
    return np.array(losses), np.array(weights)


LAMS, DEGREES = [0.0001, 0.01, 1.0, 100.0], [1, 3, 5, 7]


@pytest.mark.cluster
@pytest.mark.parametrize("sync", [False, True])
def test_search_example_matches_numpy_fitted_one_by_one(tmp_path: Path, sync: bool) -> None:
    report = tmp_path / "run.json"
    result = run_file(EXAMPLES / "search.yaml", output_dir=str(tmp_path), echo=quiet, sync=sync,
                      report_path=str(report))
    losses, weights = numpy_search(LAMS, DEGREES)
    np.testing.assert_allclose(np.load(tmp_path / "results" / "search_losses.npy"), losses, rtol=1e-9)
    np.testing.assert_allclose(np.load(tmp_path / "results" / "search_weights.npy"), weights, rtol=1e-7, atol=1e-12)
    best = int(np.argmin(losses))
    assert int(result.values["poly.best"]) == best
    assert float(result.values["poly.lam"]) == LAMS[best // 4] and int(result.values["poly.degree"]) == DEGREES[best % 4]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "results" / "search.csv").read_text())))
    assert [r["copy"] for r in rows] == [str(i) for i in range(16)]
    assert [(float(r["lam"]), int(r["degree"])) for r in rows] == [(lam, d) for lam in LAMS for d in DEGREES]
    np.testing.assert_allclose([float(r["loss"]) for r in rows], losses, rtol=1e-12)
    assert {r["status"] for r in rows} == {"finished"}
    sweep = json.loads(report.read_text())["sweeps"]["poly"]
    assert sweep["params"] == ["lam", "degree"]
    for i, copy in enumerate(sweep["copies"]):
        assert copy["params"] == {"lam": LAMS[i // 4], "degree": DEGREES[i % 4]}
        assert copy["device"].endswith(f"GPU:{i % 2}") and copy["ran_on"] == [copy["device"]]
        assert copy["start"] <= copy["stop"] and copy["wave"] == (i // 2) // 4
    for device in sweep["devices"].values():
        assert device["at_once"] == 4 and device["peak_bytes_seen"] <= device["limit_bytes"]
        assert 1 <= device["most_at_once_seen"] <= 4


def test_plan_shows_which_copy_runs_where_and_in_which_wave() -> None:
    out = io.StringIO()
    assert run_cli(["plan", str(EXAMPLES / "search.yaml")], out=out) == 0
    text = out.getvalue()
    assert "sweep 'poly': 16 copies on 2 devices" in text
    assert "localhost/0/GPU:0: 8 copies, 4 at once in 2 waves, 88 B per copy: as many as its 4 threads" in text
    assert "shared by its copies, held once: x 31.2 KiB, y 31.2 KiB, xv 7.8 KiB, yv 7.8 KiB" in text
    assert "  15    1ca97b278333  lam=100.0, degree=7   localhost/0/GPU:1  1" in text
    out = io.StringIO()
    assert run_cli(["plan", str(EXAMPLES / "search.yaml"), "--format", "json"], out=out) == 0
    packing = json.loads(out.getvalue())["sweeps"]["poly"]
    assert [c["wave"] for c in packing["copies"]] == [(i // 2) // 4 for i in range(16)]
    assert {(c["bytes"], c["slots"]) for c in packing["copies"]} == {(88, 1.0)}  # one thread's slot each
    device = packing["devices"][0]
    assert device["shared_values"] == [{"value": v, "bytes": n} for v, n in
                                       (("x", 32000), ("y", 32000), ("xv", 8000), ("yv", 8000))]
    # kept: each copy's w, loss, lam and degree, which the gather and the select read at the end
    assert device["shared_bytes"] >= 80000 and device["kept_bytes"] == 8 * (64 + 3 * 8) and device["waves"] == 2
    assert device["peak_bytes"] <= device["limit_bytes"]


SLEEPY = """\
import time


def fit(x, lam, xp):
    time.sleep(0.05)  # a small model on a GPU waits for its kernels: the host thread idles
    return x * lam
"""


def sleepy_spec(tmp_path: Path, threads: int, limit: str = "16MiB", copies: int = 8) -> Path:
    (tmp_path / "sleepy_fns.py").write_text(SLEEPY, encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: {{jobs: {{localhost: {{gpus: 1, gpu_threads: {threads}, gpu_memory: {{limit: {limit}}}}}}}}}
        graph:
          - {{name: x, op: ones, shape: [16384], device: /cpu:0}}
          - name: s
            sweep:
              grid: {{lam: {list(range(1, copies + 1))}}}
              spread: /gpu:0
              body:
                - {{name: y, op: call, fn: "sleepy_fns:fit", kernels: [gpu], inputs: [x, lam],
                    output: {{shape: [16384]}}}}
                - {{name: t, op: sum, inputs: [y]}}
              gather: {{totals: t}}
        outputs:
          s.totals: "-"
        """), encoding="utf-8")
    return spec


def _device(result: Any) -> dict[str, Any]:
    return dict(result.report["sweeps"]["s"]["devices"][GPU0])


@pytest.mark.cluster
def test_copies_run_side_by_side_as_planned_and_one_at_a_time_without_threads(tmp_path: Path) -> None:
    packed = run_file(sleepy_spec(tmp_path, 4), echo=quiet)
    np.testing.assert_array_equal(packed.values["s.totals"], 16384.0 * np.arange(1, 9))
    device = _device(packed)
    assert device["at_once"] == 4 and device["most_at_once_seen"] >= 2, device
    assert device["most_at_once_seen"] <= 4
    alone = run_file(sleepy_spec(tmp_path, 1), echo=quiet)
    assert _device(alone)["at_once"] == 1 and _device(alone)["most_at_once_seen"] == 1


@pytest.mark.cluster
def test_the_memory_cap_bounds_the_copies_at_once_below_the_threads(tmp_path: Path) -> None:
    spec = sleepy_spec(tmp_path, 8, limit="1MiB")
    plan = plan_file(spec)
    packing = plan.packing[0].devices[0]
    assert 1 < packing.at_once < 8, packing  # 128 KiB per copy of x and y: the cap, not the threads
    assert packing.peak <= packing.limit < packing.peak_alone + (packing.at_once + 1) * (packing.per_copy or 0)
    result = run_file(spec, echo=quiet)
    device = _device(result)
    assert device["most_at_once_seen"] <= packing.at_once and device["peak_bytes_seen"] <= 2**20


def test_each_copy_is_one_task_and_takes_its_share_of_the_gpus_slots(tmp_path: Path) -> None:
    plan = plan_file(sleepy_spec(tmp_path, 4))
    copy_parts = [p.ops for p in plan.partitions if p.ops[0].startswith("s/")]
    assert copy_parts == [(f"s/{i}/lam", f"s/{i}/y", f"s/{i}/t") for i in range(8)]
    copy_slots, gpu_slots = thread_slots(plan)
    assert gpu_slots == {GPU0: 4}
    share = copy_slots["s/0/y"]
    assert 4 * share <= 4 < 5 * share  # 4 copies fit in the GPU's 4 slots, a fifth does not
    assert "s.totals" not in copy_slots  # every other task on the GPU takes all 4 slots: it runs alone


def test_without_gpu_threads_nothing_changes(tmp_path: Path) -> None:
    plan = plan_file(sleepy_spec(tmp_path, 1))
    assert thread_slots(plan) == ({}, {})
    assert plan.packing[0].devices[0].at_once == 1
    assert "gpu_threads is 1" in plan.packing[0].devices[0].why


def test_a_copy_of_unknown_size_is_never_packed(tmp_path: Path) -> None:
    spec = sleepy_spec(tmp_path, 4)
    spec.write_text(spec.read_text().replace("output: {shape: [16384]}", "tags: [x]"), encoding="utf-8")
    packing = plan_file(spec).packing[0].devices[0]
    assert packing.at_once == 1 and packing.per_copy is None and "size is unknown" in packing.why


def test_the_example_copies_into_a_fresh_folder_and_plans(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "search.yaml", tmp_path)
    out = io.StringIO()
    assert run_cli(["validate", str(tmp_path / "search.yaml"), "--set", "degrees=[2, 4]"], out=out) == 0
    plan = plan_file(tmp_path / "search.yaml", params={"degrees": [2, 4]})
    assert len(plan.spec.sweeps[0].copies) == 8 and plan.spec.values["poly.losses"][0].shape == (8,)


SLEEPY_STEP = """\
import time


def step(w, lr, xp):
    time.sleep(0.01)  # a small model's step on a GPU: the host thread waits for its kernels
    return w - lr * w
"""


@pytest.mark.cluster
def test_a_sweeps_training_loops_run_side_by_side_on_a_packed_gpu(tmp_path: Path) -> None:
    (tmp_path / "step_fns.py").write_text(SLEEPY_STEP, encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1, gpu_threads: 4}}}
        graph:
          - name: s
            sweep:
              grid: {lr: [0.1, 0.2, 0.3, 0.4]}
              spread: /gpu:0
              body:
                - {name: w0, op: ones, shape: [4]}
                - name: train
                  iterate:
                    steps: 12
                    window: 4
                    state: {w: w0}
                    body:
                      - {name: w_next, op: call, fn: "step_fns:step", kernels: [gpu], inputs: [w, lr],
                         output: {shape: [4]}}
                      - {name: loss, op: sum, inputs: [w_next]}
                    update: {w: w_next}
                    metrics: {loss: loss}
              gather: {w: train.w}
        outputs:
          s.w: "-"
        """), encoding="utf-8")
    result = run_file(spec, echo=quiet)
    lrs = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(result.values["s.w"], np.ones((4, 4)) * ((1 - lrs) ** 12)[:, None], rtol=1e-12)
    device = result.report["sweeps"]["s"]["devices"][GPU0]
    assert device["at_once"] == 4 and device["most_at_once_seen"] >= 2, device  # one after another: 1
    assert all(result.report["loops"][f"s/{i}/train"]["stop_reason"] == "steps" for i in range(4))
