"""Device partitions: how ops are grouped, that nothing per op is lost, and loops in gang windows.

The grouping rules (orchestrator.plan.partition) are checked on plans alone —
including 300 random graphs over three devices — and then on real embedded
clusters: values, placements and per-op records equal at both granularities,
a memory cap or an exception inside a partition names the op, a control edge
between partitions moves no data, loops in gang windows and in per-step
partitions.
"""

from __future__ import annotations

import random
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.errors import DeviceOutOfMemory, OpFailedError, RunError
from orchestrator.plan.records import Plan
from orchestrator.plan.partition import Partition, partition, published

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def quiet(_: str) -> None:
    pass


def _plan(tmp_path: Path, graph: str, cluster: str = "localhost: {gpus: 2}", extra: str = "") -> Plan:
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\ncluster:\n  jobs:\n    " + cluster + "\ngraph:\n" +
                    textwrap.indent(textwrap.dedent(graph), "  ") + textwrap.dedent(extra))
    return plan_file(spec)


def _groups(parts: tuple[Partition, ...]) -> list[list[str]]:
    return [list(p.ops) for p in parts]


# --------------------------------------------------------------------------- the rules, on plans


def test_a_chain_on_one_device_is_one_partition(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [4], device: /gpu:0}
        - {name: b, op: square, inputs: [a], device: /gpu:0}
        - {name: c, op: add, inputs: [b], scalar: 1, device: /gpu:0}
        """)
    assert _groups(partition(plan)) == [["a", "b", "c"]]


def test_a_diamond_across_two_devices_partitions_acyclically(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [4], device: /cpu:0}
        - {name: b, op: square, inputs: [a], device: /gpu:0}
        - {name: c, op: add, inputs: [a], scalar: 1, device: /cpu:0}
        - {name: d, op: add, inputs: [b, c], device: /cpu:0}
        """)
    parts = partition(plan)
    # a is read on the GPU: its partition ends with it; d waits for b: it cannot join c's partition
    assert _groups(parts) == [["a"], ["b"], ["c"], ["d"]]
    assert _acyclic(plan, parts)
    assert published(plan, parts) == {0: ("a",), 1: ("b",), 2: ("c",), 3: ()}


def test_values_from_elsewhere_enter_only_at_the_start(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: x, op: ones, shape: [4], device: /cpu:0}
        - {name: g, op: ones, shape: [4], device: /gpu:0}
        - {name: h, op: add, inputs: [g, x], device: /gpu:0}
        - {name: k, op: square, inputs: [h], device: /gpu:0}
        """)
    # g needs nothing: it must not wait for x to arrive, so h (which needs x) starts a partition
    assert _groups(partition(plan)) == [["x"], ["g"], ["h", "k"]]


def test_a_device_with_threads_joins_only_chains(tmp_path: Path) -> None:
    graph = """\
        - {name: a, op: ones, shape: [4]}
        - {name: b, op: square, inputs: [a]}
        - {name: c, op: add, inputs: [a], scalar: 1}
        - {name: d, op: add, inputs: [b, c]}
        - {name: e, op: square, inputs: [d]}
        """
    one = _plan(tmp_path, graph, "localhost: {cpu_threads: 1}")
    assert _groups(partition(one)) == [["a", "b", "c", "d", "e"]]
    two = _plan(tmp_path, graph, "localhost: {cpu_threads: 2}")
    # b and c could run side by side on two threads: not joined; d -> e is a chain
    assert _groups(partition(two)) == [["a"], ["b"], ["c"], ["d", "e"]]


def test_retries_and_any_gpu_keep_ops_apart(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [4], device: /gpu:0}
        - {name: b, op: square, inputs: [a], device: /gpu:0, retries: 2}
        - {name: c, op: square, inputs: [b], device: /gpu:0, retries: 2}
        - {name: d, op: square, inputs: [c], device: /gpu:*}
        - {name: e, op: square, inputs: [d], device: /gpu:*}
        """)
    assert _groups(partition(plan)) == [["a"], ["b", "c"], ["d"], ["e"]]
    assert [p.retries for p in partition(plan)] == [0, 2, 0, 0]


def test_a_control_edge_to_another_device_ends_the_partition(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """\
        - {name: a, op: ones, shape: [4], device: /cpu:0}
        - {name: b, op: square, inputs: [a], device: /cpu:0}
        - {name: g, op: ones, shape: [2], device: /gpu:0, after: [a]}
        """)
    assert _groups(partition(plan)) == [["a"], ["b"], ["g"]]


def _edges(plan: Plan, parts: tuple[Partition, ...]) -> set[tuple[int, int]]:
    home = {name: p.index for p in parts for name in p.ops}
    edges = set()
    for p in parts:
        for name in p.ops:
            op = plan.spec.op(name)
            for dep in [r.op for r in op.inputs] + list(op.after):
                if home[dep] != p.index:
                    edges.add((home[dep], p.index))
    return edges


def _acyclic(plan: Plan, parts: tuple[Partition, ...]) -> bool:
    edges = _edges(plan, parts)
    pending = {p.index: sum(1 for _, b in edges if b == p.index) for p in parts}
    ready = [i for i, n in pending.items() if n == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for a, b in edges:
            if a == node:
                pending[b] -= 1
                if pending[b] == 0:
                    ready.append(b)
    return seen == len(parts)


def _random_graph(rng: random.Random) -> str:
    devices = ["/cpu:0", "/gpu:0", "/gpu:1", "/gpu:*"]
    lines = []
    for i in range(rng.randint(2, 30)):
        device = rng.choices(devices, weights=[4, 4, 4, 1])[0]
        extra = ", retries: 1" if rng.random() < 0.1 else ""
        if i == 0 or rng.random() < 0.2:
            lines.append(f"- {{name: n{i}, op: ones, shape: [2], device: '{device}'{extra}}}")
            continue
        inputs = sorted({f"n{rng.randrange(i)}" for _ in range(rng.randint(1, 2))})
        after = f", after: [n{rng.randrange(i)}]" if rng.random() < 0.15 else ""
        kind = "add" if len(inputs) == 2 else "square"
        lines.append(f"- {{name: n{i}, op: {kind}, inputs: [{', '.join(inputs)}], device: '{device}'{after}{extra}}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(300))
def test_random_graphs_keep_every_rule(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    threads = rng.choice([1, 2])
    plan = _plan(tmp_path, _random_graph(rng), f"localhost: {{gpus: 2, cpu_threads: {threads}}}")
    parts = partition(plan)
    order = [p.op for p in plan.placements]
    assert sorted(n for p in parts for n in p.ops) == sorted(order)  # every op, once
    device_of = {p.op: p.device for p in plan.placements}
    home = {name: p.index for p in parts for name in p.ops}
    readers: dict[str, set[Any]] = {}
    for name in order:
        op = plan.spec.op(name)
        for dep in [r.op for r in op.inputs] + list(op.after):
            readers.setdefault(dep, set()).add(device_of[name])
    for p in parts:
        assert [n for n in order if n in p.ops] == list(p.ops)  # the plan's order
        assert {device_of[n] for n in p.ops} == {p.device}
        assert {plan.spec.op(n).retries for n in p.ops} == {p.retries}
        if p.device.device_index == "*":
            assert len(p.ops) == 1
        needs = [{d for d in [r.op for r in plan.spec.op(n).inputs] + list(plan.spec.op(n).after)
                  if home[d] != p.index} for n in p.ops]
        assert all(need <= needs[0] for need in needs)  # inputs from elsewhere: only what the first op needs
        for name in p.ops[:-1]:  # only the last op is read on another device
            assert all(d == p.device and d.device_index != "*" for d in readers.get(name, ()))
        if threads == 2 and p.device.device_type == "CPU":
            for before, after in zip(p.ops, p.ops[1:]):
                assert before in {r.op for r in plan.spec.op(after).inputs}
    assert _acyclic(plan, parts)


# --------------------------------------------------------------------------- runs

USER_MODULE = '''
def grow(*x, xp, n=0):
    return xp.ones((n,), dtype="float64")

def broken(x, xp):
    values = {"a": 1}
    return values["missing"]
'''


def _spec(tmp_path: Path, text: str) -> Path:
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _records(result: Any) -> dict[str, tuple[Any, ...]]:
    return {e["name"]: (e["planned_device"], e["worker"], e["runs"], e["output_bytes"], e.get("note"))
            for e in result.report["ops"]}


@pytest.mark.cluster
def test_a_memory_cap_hit_by_the_second_op_of_a_partition_names_that_op(tmp_path: Path) -> None:
    spec = _spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1, gpu_memory: {limit: 1MiB}}}}
        graph:
          - {name: small, op: call, fn: "usermod:grow", kernels: [gpu], params: {n: 16}, device: /gpu:0}
          - {name: big, op: call, fn: "usermod:grow", kernels: [gpu], inputs: [small], params: {n: 300000},
             device: /gpu:0}
          - {name: total, op: sum, inputs: [big], device: /gpu:0}
        outputs: {total: "-"}
        """)
    assert _groups(partition(plan_file(spec))) == [["small", "big", "total"]]
    with pytest.raises(DeviceOutOfMemory) as info:
        run_file(spec, echo=quiet)
    assert f"for op 'big' on {GPU0}" in str(info.value) and "limit is 1.0 MiB" in str(info.value)


@pytest.mark.cluster
def test_a_failing_op_inside_a_partition_is_named_with_its_device_and_line(tmp_path: Path) -> None:
    spec = _spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: ones, shape: [3], device: /gpu:0}
          - {name: oops, op: call, fn: "usermod:broken", kernels: [gpu], inputs: [a], device: /gpu:0}
          - {name: c, op: square, inputs: [oops], device: /gpu:0}
        """)
    assert _groups(partition(plan_file(spec))) == [["a", "oops", "c"]]
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=quiet)
    text = str(info.value)
    assert f"op 'oops' failed on {GPU0}: KeyError: 'missing'" in text
    assert "usermod.py:7 in broken: return values[\"missing\"]" in text


@pytest.mark.cluster
def test_a_control_edge_between_partitions_moves_no_data(tmp_path: Path) -> None:
    spec = _spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: big, op: ones, shape: [1000000], device: /cpu:0}
          - {name: g, op: ones, shape: [2], device: /gpu:0, after: [big]}
          - {name: h, op: square, inputs: [g], device: /gpu:0}
        outputs: {h: "-"}
        """)
    result = run_file(spec, echo=quiet)
    np.testing.assert_array_equal(result.values["h"], np.ones(2))
    ran = {e["name"]: e for e in result.report["ops"]}
    assert ran["g"]["start"] >= ran["big"]["start"] + ran["big"]["duration"] - 1e-3  # it did wait
    # 8 MB on the CPU, none of it crossed: only the token (None, which Dask counts as 16 bytes)
    assert result.report["totals"]["bytes_moved"] <= 16


@pytest.mark.cluster
def test_the_diamond_runs_the_same_at_both_granularities(tmp_path: Path) -> None:
    spec = _spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: random.uniform, shape: [8], seed: 3, device: /cpu:0}
          - {name: b, op: square, inputs: [a], device: /gpu:0}
          - {name: c, op: add, inputs: [a], scalar: 1, device: /cpu:0}
          - {name: d, op: add, inputs: [b, c], device: /cpu:0}
        outputs: {d: "-"}
        """)
    runs = {g: run_file(spec, echo=quiet, granularity=g) for g in ("partition", "op")}
    a = np.random.default_rng([3, 0]).uniform(0, 1, 8)
    for result in runs.values():
        np.testing.assert_array_equal(result.values["d"], a * a + (a + 1))
    assert _records(runs["partition"]) == _records(runs["op"])


LOOP = """\
    version: 1
    cluster:
      jobs:
        ps: {tasks: 1}
        worker: {tasks: 1, gpus: 2}
    graph:
      - {name: w0, op: constant, value: [1.0, 2.0], device: /job:ps/cpu:0}
      - {name: scale, op: constant, value: 0.5, device: /job:ps/cpu:0}
      - name: loop
        iterate:
          steps: 7
          window: 3
          state: {w: w0, k: w0}
          body:
            - {name: r, op: random.normal, shape: [2], seed: 5, device: /job:worker/gpu:0}
            - {name: g, op: mul, inputs: [w, r], device: /job:worker/gpu:0}
            - {name: h, op: mul, inputs: [k, scale], device: /job:worker/gpu:1}
            - {name: w1, op: sub, inputs: [w, g], scalar_unused: 0, device: /job:ps/cpu:0}
            - {name: k1, op: add, inputs: [h, g], device: /job:worker/gpu:1}
            - {name: m, op: sum, inputs: [w1], device: /job:ps/cpu:0}
            - {name: n, op: sum, inputs: [k1], device: /job:worker/gpu:1}
          update: {w: w1, k: k1}
          metrics: {m: m, n: n}
    outputs: {loop.w: "-", loop.k: "-", loop.m: "-", loop.n: "-"}
    """.replace(", scalar_unused: 0", "")


def _loop_reference() -> dict[str, np.ndarray]:
    w = k = np.array([1.0, 2.0])
    ms, ns = [], []
    for step in range(7):
        r = np.random.default_rng([5, step]).normal(0, 1, 2)
        g = w * r
        w, k = w - g, k * 0.5 + g
        ms.append(w.sum())
        ns.append(k.sum())
    return {"loop.w": w, "loop.k": k, "loop.m": np.array(ms), "loop.n": np.array(ns)}


@pytest.mark.cluster
def test_a_loop_over_three_devices_runs_in_gang_windows(tmp_path: Path) -> None:
    """States updated on two devices and read on others, metrics on two devices, windows of 3 over 7 steps."""
    spec = _spec(tmp_path, LOOP)
    runs = {g: run_file(spec, echo=quiet, granularity=g) for g in ("partition", "op")}
    expected = _loop_reference()
    for result in runs.values():
        for name, value in expected.items():
            np.testing.assert_allclose(np.asarray(result.values[name]), value, rtol=1e-12)
    gang = runs["partition"]
    assert gang.report["loops"]["loop"]["mode"].startswith("gang: one task per device per window of 3 steps (3 devices)")
    assert _records(gang) == _records(runs["op"])
    assert gang.report["totals"]["bytes_exchanged"] > 0


@pytest.mark.cluster
def test_a_loop_with_retries_runs_a_partition_per_step(tmp_path: Path) -> None:
    spec = _spec(tmp_path, LOOP.replace("device: /job:ps/cpu:0}\n            - {name: k1",
                                        "device: /job:ps/cpu:0, retries: 1}\n            - {name: k1"))
    result = run_file(spec, echo=quiet)
    assert result.report["loops"]["loop"]["mode"].startswith("partition: a task per device partition per step, because "
                                                     "ops have retries")
    for name, value in _loop_reference().items():
        np.testing.assert_allclose(np.asarray(result.values[name]), value, rtol=1e-12)


@pytest.mark.cluster
def test_an_op_failing_in_a_gang_window_fails_the_run_without_a_hang(tmp_path: Path) -> None:
    spec = _spec(tmp_path, LOOP.replace("{name: n, op: sum, inputs: [k1], device: /job:worker/gpu:1}",
                                        '{name: n, op: call, fn: "usermod:broken", kernels: [gpu], inputs: [k1], '
                                        'device: /job:worker/gpu:1}'))
    started = time.monotonic()
    with pytest.raises(RunError) as info:
        run_file(spec, echo=quiet)
    assert "op 'loop/n' failed on /job:worker/replica:0/task:0/device:GPU:1: KeyError" in str(info.value)
    assert time.monotonic() - started < 60
