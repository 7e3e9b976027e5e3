"""The memory plan of loops, and of what Dask and the devices hold besides the values a step makes.

Exact bytes, worked out by hand in the comments (float64: 8 bytes an element). Each figure is what
the runtime holds at once (``orchestrator.runtime.windows`` for gang windows, Dask for tasks), as
tests/test_memory_seen.py checks on real runs; the figures counted per step, as the plan did before,
are given beside them: they were below what the devices held.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_helpers import write

from orchestrator.api import plan_file
from orchestrator.plan.memory import plan_memory
from orchestrator.plan.records import DeviceMemory

LOCAL = "/job:localhost/replica:0/task:0/device:"
CPU0, GPU0, GPU1 = LOCAL + "CPU:0", LOCAL + "GPU:0", LOCAL + "GPU:1"

# Each step: g = 2w on the GPU (80 B, read by s there and by w1 on the CPU), s = sum(g) on the GPU
# (8 B, a metric), w1 = w + g on the CPU (80 B, the state's update). w0 (80 B) is on the CPU.
GANG = """\
    version: 1
    {run}cluster:
      jobs:
        localhost: {{gpus: 1}}
    graph:
      - {{name: w0, op: zeros, shape: [10], device: /cpu:0}}
      - name: train
        iterate:
          steps: 6
          window: {window}
          state: {{w: w0}}
          body:
            - {{name: g, op: mul, inputs: [w], scalar: 2.0, device: /gpu:0}}
            - {{name: s, op: sum, inputs: [g], device: /gpu:0}}
            - {{name: w1, op: add, inputs: [w, g], device: /cpu:0}}
          update: {{w: w1}}
          metrics: {{s: s}}
    outputs:
      train.w: "-"
    """


def _memory(path: Path, granularity: str = "partition") -> dict[str, DeviceMemory]:
    plan = plan_file(path)
    memory = plan.memory if granularity == "partition" else plan_memory(plan, granularity).memory
    return {m.device: m for m in memory}


@pytest.mark.parametrize("window, gpu, cpu", [
    # GPU at s: w0 moved in before the loop (80, kept for the whole loop: the window task's argument) +
    # the state received this step (80) + g (80: sent to the CPU when the step ends) + the g sent the
    # step before (80: Dask's comms may not have written it yet) + s (8) + the window's earlier metric
    # values (window - 1) x 8, stacked when the window ends.
    # CPU at w1: w0 (80, read by the loop: kept to the end) + g received (80) + w1 (80) + the state
    # twice (80 each: the step before's, and the last window's, which the task holds as its argument;
    # neither with a window of one step, the first only when there are several windows).
    (1, 80 + 80 + 80 + 80 + 8 + 0, 80 + 80 + 80 + 80),
    (2, 80 + 80 + 80 + 80 + 8 + 8, 80 + 80 + 80 + 2 * 80),
    (3, 80 + 80 + 80 + 80 + 8 + 16, 80 + 80 + 80 + 2 * 80),
    (6, 80 + 80 + 80 + 80 + 8 + 40, 80 + 80 + 80 + 80),  # one window: no last window's state
])
def test_a_gang_window_counts_what_each_device_task_holds(tmp_path: Path, window: int, gpu: int,
                                                          cpu: int) -> None:
    memory = _memory(write(tmp_path, GANG.format(run="", window=window)))
    assert plan_file(write(tmp_path, GANG.format(run="", window=window))).loop_mode("train").mode == "gang"
    # counted per step (the plan before): GPU 80 (w arrived) + 80 (g) = 160 at g; CPU 80 + 80 + 80 = 240
    assert (memory[GPU0].peak, memory[GPU0].peak_op) == (gpu, "train/s")
    assert (memory[CPU0].peak, memory[CPU0].peak_op) == (cpu, "train/w1")
    assert memory[GPU0].peak > 160 and memory[CPU0].peak > 240


def test_a_value_sent_is_let_go_when_the_device_next_waits(tmp_path: Path) -> None:
    """g is sent to the CPU and read by nothing else on the GPU; h waits for c from the CPU, and the
    window sends what it holds before it waits: g is gone by h."""
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1}
        graph:
          - {name: w0, op: zeros, shape: [10], device: /cpu:0}
          - name: train
            iterate:
              steps: 6
              window: 3
              state: {w: w0}
              body:
                - {name: g, op: mul, inputs: [w], scalar: 2.0, device: /gpu:0}
                - {name: c, op: mul, inputs: [w], scalar: 3.0, device: /cpu:0}
                - {name: h, op: mul, inputs: [c], scalar: 2.0, device: /gpu:0}
                - {name: w1, op: add, inputs: [w, g], device: /cpu:0}
              update: {w: w1}
        outputs:
          train.w: "-"
        """)
    gpu = _memory(path)[GPU0]
    # at h: w0 moved in + w received + the g of the step before + c received + h, 80 B each (g held
    # to the step's end would make it 480)
    assert (gpu.peak, gpu.peak_op) == (5 * 80, "train/h")


# A task per partition (or op) per step: Dask runs whatever is ready, and the driver has two windows
# in flight. g reads the state but s (a metric, not on the way to the update) reads it too, so the
# g of every step of two windows and one more may be held: min(6 steps, 2 x 3 + 1) = 6 x 80; the
# metric s is kept by the driver until its window is read: 6 x 8; the state arrives from the CPU at
# each step, but its next value waits for every reader of it: three steps at most, 3 x 80; w0, 80.
PER_STEP_GPU = 6 * 80 + 6 * 8 + 3 * 80 + 80


def test_a_loop_of_a_task_per_partition_per_step_counts_two_windows_of_steps(tmp_path: Path) -> None:
    path = write(tmp_path, GANG.format(run="run: {retries: 1}\n    ", window=3))
    assert plan_file(path).loop_mode("train").mode == "partition"
    gpu = _memory(path)[GPU0]
    assert gpu.peak == PER_STEP_GPU
    assert gpu.largest[0] == ("train/g (6 steps)", 480)


def test_a_loop_of_a_task_per_op_per_step_counts_the_same(tmp_path: Path) -> None:
    path = write(tmp_path, GANG.format(run="", window=3))
    assert plan_file(path).loop_mode("train", "op").mode == "op"
    assert _memory(path, "op")[GPU0].peak == PER_STEP_GPU


def test_a_chain_of_states_holds_three_steps_at_once(tmp_path: Path) -> None:
    """x_next reads only the state and is read only by the next step's x_next: Dask cannot run ahead."""
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1}
        graph:
          - {name: x0, op: zeros, shape: [4], device: /cpu:0}
          - name: loop
            iterate:
              steps: 250
              window: 100
              state: {x: x0}
              body:
                - {name: x_next, op: add, inputs: [x], scalar: 1.0, device: /gpu:0}
              update: {x: x_next}
        outputs:
          loop.x: "-"
        """)
    # x0 moved in (32) + x_next of three steps (96), not of 201 (two windows and a step)
    assert _memory(path, "op")[GPU0].peak == 32 + 3 * 32


def test_a_call_op_on_a_gpu_holds_its_inputs_as_they_are(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1}
        graph:
          - {name: a, op: zeros, shape: [1000], device: /gpu:0}
          - {name: f, op: call, fn: "mypkg.mod:f", kernels: [gpu], inputs: [a], output: {shape: [2]}, device: /gpu:0}
          - {name: k, op: call, fn: "mypkg.mod:f", inputs: [a], output: {shape: [2]}, device: /cpu:0}
        outputs: {f: "-", k: "-"}
        """)
    memory = _memory(path)
    # GPU at f: a (8000) and f's output (16): a value already on the GPU is handed to f as it is (issue 26)
    assert (memory[GPU0].peak, memory[GPU0].largest) == (8016, (("a", 8000), ("f", 16)))
    assert memory[CPU0].peak == 8000 + 16  # a host device takes its inputs as they are


def test_a_value_two_gpus_fetch_stays_on_both_until_both_have_read_it(tmp_path: Path) -> None:
    """Dask forgets a key when its last reader anywhere has ended, not copy by copy: while GPU:1 may
    still be reading a, GPU:0 holds its copy through c, which waits for nothing."""
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: a, op: zeros, shape: [1000], device: /cpu:0}    # 8000
          - {name: b, op: sum, inputs: [a], device: /gpu:0}        # 8, read on the CPU: ends its task
          - {name: c, op: ones, shape: [500], device: /gpu:0}      # 4000
          - {name: d, op: square, inputs: [a], device: /gpu:1}     # 8000
          - {name: e, op: add, inputs: [b, d], device: /cpu:0}     # waits for both: a is gone
        outputs: {e: "-"}
        """)
    memory = _memory(path)
    # GPU:0 at c: a (8000) + b (8, until e has read it) + c (4000); counted per reader, 8008 at b
    assert (memory[GPU0].peak, memory[GPU0].peak_op) == (12008, "c")
    assert (memory[CPU0].peak, memory[CPU0].peak_op) == (16008, "e")  # d arrives, e, b: a was let go


def test_on_a_tls_cluster_every_value_sent_in_a_window_is_counted(tmp_path: Path) -> None:
    """Dask's comms carry a TLS cluster's values: its event loop may write them only when the window ends."""
    text = GANG.format(run="", window=3).replace(
        "    cluster:\n", "    cluster:\n      tls: {ca_file: ca.pem, cert: cert.pem, key: key.pem}\n")
    gpu = _memory(write(tmp_path, text))[GPU0]
    # as without TLS (344), and the g of one more earlier step of the window: 2 x 80 before this step's
    assert (gpu.peak, gpu.largest[0]) == (344 + 80, ("train/g (sent, 2 earlier)", 160))


def test_a_value_moved_for_several_tasks_of_a_device_may_come_before_they_run(tmp_path: Path) -> None:
    """b is read by two tasks of GPU:0 (c, and d, which waits for e on the CPU), so a task of its own moves
    it there as soon as it is made: that may be while a runs, as b waits for nothing of GPU:0."""
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: a, op: ones, shape: [1000], device: /gpu:0}      # 8000, read by nothing
          - {name: b, op: ones, shape: [500], device: /gpu:1}       # 4000
          - {name: c, op: sum, inputs: [b], device: /gpu:0}         # 8, read on the CPU
          - {name: e, op: add, inputs: [c], scalar: 1.0, device: /cpu:0}
          - {name: d, op: mul, inputs: [b, e], device: /gpu:0}      # 4000
        outputs: {d: "-"}
        """)
    gpu = _memory(path)[GPU0]
    # at a: a (8000) + b (4000); counted from c, its first reader, the peak would be 8008 at d (b, d, e)
    assert (gpu.peak, gpu.peak_op, gpu.largest) == (12000, "a", (("a", 8000), ("b (arrived)", 4000)))
