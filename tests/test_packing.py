"""Packing a sweep's copies by what each holds, beside what they share (issue 26, item 2).

Each case was wrong before: copies of 30 MiB on an 80 MiB GPU ran one at a time (the rule counted a copy
twice, and said 30 + 1 x 30 = 30); a GPU ``call`` was charged a copy of its inputs no backend makes; every
copy of a search over a training loop held its own copy of the data on the GPU for the whole run; and
copies of different sizes were all counted as the largest.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.cli import run_cli
from orchestrator.compile.builder import thread_slots

LOCAL = "/job:localhost/replica:0/task:0/device:"
CPU0, GPU0 = LOCAL + "CPU:0", LOCAL + "GPU:0"
MiB = 2**20


def quiet(_: str) -> None:
    pass


def spec_in(tmp_path: Path, fns: str, spec: str) -> Path:
    (tmp_path / "fns.py").write_text(textwrap.dedent(fns), encoding="utf-8")
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(spec), encoding="utf-8")
    return path


THIRTY = """\
    import time


    def make(lam, xp):
        time.sleep(0.2)  # the copies overlap here
        return xp.full(3932160, float(lam))  # 30 MiB
    """


def thirty(tmp_path: Path) -> Path:
    return spec_in(tmp_path, THIRTY, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1, gpu_threads: 4, gpu_memory: {limit: 80MiB}}}}
        graph:
          - name: s
            sweep:
              grid: {lam: [1, 2, 3, 4]}
              spread: /gpu:0
              body:
                - {name: y, op: call, fn: "fns:make", kernels: [gpu], inputs: [lam], output: {shape: [3932160]}}
                - {name: t, op: sum, inputs: [y]}
              gather: {totals: t}
        outputs:
          s.totals: "-"
        """)


@pytest.mark.cluster
def test_two_copies_of_30_mib_run_at_once_on_an_80_mib_gpu(tmp_path: Path) -> None:
    path = thirty(tmp_path)
    device = plan_file(path).packing[0].devices[0]
    assert (device.at_once, device.waves, device.shared, device.kept) == (2, 2, 0, 4 * 8)  # kept: each t
    assert device.why == "as many as fit its cap: 0 B shared + 32 B kept by the copies + 2 x 30.0 MiB per copy " \
                         "= 60.0 MiB of 80.0 MiB"
    # a copy holds at most y and t (30 MiB + 8), and keeps t: all four t + two copies' y
    assert (device.per_copy, device.peak) == (30 * MiB + 8, 32 + 2 * 30 * MiB)
    result = run_file(path, echo=quiet)
    np.testing.assert_array_equal(result.values["s.totals"], 3932160.0 * np.arange(1, 5))
    seen = result.report["sweeps"]["s"]["devices"][GPU0]
    assert 1 <= seen["most_at_once_seen"] <= 2 and seen["peak_bytes_seen"] <= seen["limit_bytes"]


CALLS = """\
    def scale(a, b, xp):
        return a * b.sum()
    """


@pytest.mark.cluster
def test_a_gpu_call_holds_its_inputs_as_the_backend_does(tmp_path: Path) -> None:
    """``a`` made on the GPU is handed to the call as it is; ``h`` from the host is made a device array once."""
    path = spec_in(tmp_path, CALLS, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: h, op: ones, shape: [2000], device: /cpu:0}                # 16000 B
          - {name: a, op: ones, shape: [1000], device: /gpu:0}                #  8000 B
          - {name: f, op: call, fn: "fns:scale", kernels: [gpu], inputs: [a, h], output: {shape: [1000]},
             device: /gpu:0}                                                  #  8000 B
        outputs: {f: "-"}
        """)
    planned = {m.device: m.peak for m in plan_file(path).memory}
    assert planned[GPU0] == 8000 + 16000 + 8000  # before: 16000 + 8000 more for the call's "copies"
    for sync in (False, True):
        result = run_file(path, echo=quiet, sync=sync)
        np.testing.assert_array_equal(result.values["f"], np.full(1000, 2000.0))
        seen = {d["device"]: d["peak_bytes_seen"] for d in result.report["devices"]}
        assert seen[GPU0] == planned[GPU0], (sync, seen)


DATA_STEP = """\
    import time


    def step(w, x, lr, xp):
        time.sleep(0.01)  # a small model's step on a GPU: the host thread waits for its kernels
        return w - lr * w * xp.mean(x)
    """


def copies_of_a_loop(tmp_path: Path, limit: str = "3MiB") -> Path:
    return spec_in(tmp_path, DATA_STEP, f"""\
        version: 1
        cluster: {{jobs: {{localhost: {{gpus: 1, gpu_threads: 8, gpu_memory: {{limit: {limit}}}}}}}}}
        graph:
          - {{name: x, op: ones, shape: [131072], device: /cpu:0}}     # the data: 1 MiB, every copy reads it
          - name: s
            sweep:
              grid: {{lr: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]}}
              spread: /gpu:0
              body:
                - {{name: w0, op: ones, shape: [4]}}
                - name: train
                  iterate:
                    steps: 12
                    window: 4
                    state: {{w: w0}}
                    body:
                      - {{name: w_next, op: call, fn: "fns:step", kernels: [gpu], inputs: [w, x, lr],
                         output: {{shape: [4]}}}}
                      - {{name: loss, op: sum, inputs: [w_next]}}
                    update: {{w: w_next}}
                    metrics: {{loss: loss}}
              gather: {{w: train.w}}
        outputs:
          s.w: "-"
        """)


def test_the_data_every_copy_reads_is_planned_once_per_device(tmp_path: Path) -> None:
    """Was: 8 copies of x on the GPU, 8.0 MiB at the peak, an error against a 3 MiB cap."""
    path = copies_of_a_loop(tmp_path)
    plan = plan_file(path)
    assert [d.code for d in plan.diagnostics if d.severity == "error"] == []
    memory = {m.device: m for m in plan.memory}[GPU0]
    assert MiB <= memory.peak < MiB + 8 * 1024
    device = plan.packing[0].devices[0]
    assert device.at_once == 8 and device.shared_values == (("x", MiB),) and MiB <= device.shared < MiB + 1024
    out = io.StringIO()
    assert run_cli(["plan", str(path), "--format", "json"], out=out) == 0
    shown = json.loads(out.getvalue())["sweeps"]["s"]["devices"][0]
    assert shown["shared_values"] == [{"value": "x", "bytes": MiB}] and shown["at_once"] == 8
    out = io.StringIO()
    assert run_cli(["plan", str(path)], out=out) == 0
    assert "    shared by its copies, held once: x 1.0 MiB" in out.getvalue()


@pytest.mark.cluster
@pytest.mark.parametrize("sync", [False, True])
def test_the_copies_loops_read_one_copy_of_the_data_on_their_gpu(tmp_path: Path, sync: bool) -> None:
    """Dask moves x to the GPU once, and the GPU holds it once, whichever copy's loop reads it."""
    path = copies_of_a_loop(tmp_path, limit="16MiB")  # room for a copy each: the run shows whether it makes them
    result = run_file(path, echo=quiet, sync=sync)
    lrs = np.arange(1, 9) / 10
    np.testing.assert_allclose(result.values["s.w"], np.ones((8, 4)) * ((1 - lrs) ** 12)[:, None], rtol=1e-12)
    report = result.report
    moved = [t for t in report["transfers"] if t["value"] == "x"]
    assert [(t["to"], t["bytes"]) for t in moved] == [(GPU0, MiB)], moved  # Dask's own transfer log
    assert report["totals"]["bytes_moved"] == MiB
    seen = {d["device"]: d for d in report["devices"]}[GPU0]
    assert MiB <= seen["peak_bytes_seen"] <= seen["planned_peak_bytes"] < 2 * MiB  # was 8 MiB: a copy per loop


SIZES = """\
    import time


    def make(width, xp):
        time.sleep(0.05)
        return xp.ones((1000, int(width))) * width
    """


def sizes(tmp_path: Path) -> Path:
    # 4 copies of 1000 x 8 (62.5 KiB) and 4 of 1000 x 512 (3.9 MiB) on a 10 MiB GPU of 8 threads
    return spec_in(tmp_path, SIZES, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1, gpu_threads: 8, gpu_memory: {limit: 10MiB}}}}
        graph:
          - name: s
            sweep:
              grid: {width: [8, 512], k: [1, 2, 3, 4]}
              spread: /gpu:0
              body:
                - {name: v, op: call, fn: "fns:make", kernels: [gpu], inputs: [width],
                   output: {shape: [1000, "${copy.width}"]}}
                - {name: t, op: sum, inputs: [v]}
              gather: {totals: t}
        outputs:
          s.totals: "-"
        """)


@pytest.mark.cluster
def test_copies_of_different_sizes_are_packed_each_by_its_own(tmp_path: Path) -> None:
    path = sizes(tmp_path)
    plan = plan_file(path)
    packing = plan.packing[0]
    small, large = 1000 * 8 * 8, 1000 * 512 * 8
    assert [s.size for s in packing.copies] == [small + 8] * 4 + [large + 8] * 4  # v and t
    device = packing.devices[0]
    room = 10 * MiB - device.shared - device.kept
    assert room // large == 2  # every copy counted as the largest: two at once
    # by their own sizes: the four small ones and one large (the smallest five) fit together
    assert device.at_once == 5 and [s.wave for s in packing.copies] == [0, 0, 0, 0, 0, 1, 1, 2]
    assert device.peak <= 10 * MiB
    copy_slots, _ = thread_slots(plan)
    assert [copy_slots[f"s/{i}/v"] for i in range(4)] == [1.0] * 4  # a thread each
    big = copy_slots["s/4/v"]
    assert 2 * big <= 8 < 3 * big and big * 1024 == int(big * 1024)  # two large fit, not three: 1/1024ths
    result = run_file(path, echo=quiet)
    np.testing.assert_array_equal(result.values["s.totals"], [8000.0 * 8] * 4 + [512000.0 * 512] * 4)
    seen = result.report["sweeps"]["s"]["devices"][GPU0]
    assert 1 <= seen["most_at_once_seen"] <= 5 and seen["peak_bytes_seen"] <= 10 * MiB
