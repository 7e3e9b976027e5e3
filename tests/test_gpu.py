"""On a real CUDA GPU with CuPy (``make gpu-check``): the cupy backend gives NumPy's values.

Every test here is marked ``gpu`` and skips where no CUDA GPU is visible (CI,
developers' machines); the simulated backend carries the same semantics in
the rest of the suite. On a machine with fewer GPUs than an example asks for, the
example runs with its GPUs folded onto the machine's as virtual GPUs
(benchmarks/fold_gpus.py): the same device names and placement, so the same
values are expected; one that cannot be folded is skipped with the count.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import plan_file
from orchestrator.runtime.backends import cuda_device_count
from orchestrator.errors import DeviceOutOfMemory

VISIBLE = cuda_device_count()
BACKEND = "cupy" if VISIBLE else "simulated"  # the tests skip without a GPU; run by hand, they check the simulation
pytestmark = [pytest.mark.gpu, pytest.mark.cluster,
              pytest.mark.skipif(VISIBLE == 0, reason="no CUDA GPU visible (CuPy missing, or no device)")]
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "benchmarks"))
from fold_gpus import fold_tree  # noqa: E402
# a short polyfit: the same loop, fewer steps
PARAMS = {"polyfit.yaml": {"steps": "200"}}


def quiet(_: str) -> None:
    pass


def gpus_used(path: Path) -> int:
    spec = plan_file(path, params=PARAMS.get(path.name)).spec
    return len({d.physical_gpu for d in spec.cluster.devices if d.is_gpu})  # virtual GPUs share theirs


@pytest.fixture(scope="module")
def examples_here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples, their GPUs folded onto this machine's as virtual GPUs where it has fewer."""
    dest = tmp_path_factory.mktemp("examples")
    fold_tree(EXAMPLES, dest, max(VISIBLE, 1))
    return dest


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_on_cupy_equals_the_simulated_run(example: str, examples_here: Path, tmp_path: Path) -> None:
    path = examples_here / example
    needed = gpus_used(path)
    if needed > VISIBLE:
        pytest.skip(f"{example} uses {needed} GPUs; {VISIBLE} visible")
    params = PARAMS.get(example)
    on_gpu = run_file(path, echo=quiet, params=params, gpu_backend="cupy", output_dir=str(tmp_path / "gpu"),
                      use_cache=False)
    simulated = run_file(EXAMPLES / example, echo=quiet, params=params, gpu_backend="simulated",
                         output_dir=str(tmp_path / "sim"), use_cache=False)
    assert on_gpu.backend == "cupy"
    assert set(on_gpu.values) == set(simulated.values)
    for name, value in simulated.values.items():
        got = on_gpu.values[name]
        assert type(got).__module__.split(".")[0] == "numpy", f"{name} came back as {type(got)} (not on the host)"
        np.testing.assert_allclose(np.asarray(got), np.asarray(value), rtol=1e-9, atol=1e-12, err_msg=name)
    placed = {op["name"]: op["worker"] for op in simulated.report["ops"]}
    assert {op["name"]: op["worker"] for op in on_gpu.report["ops"]} == placed


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_one_gpu_matmul_equals_numpy_and_runs_where_planned(tmp_path: Path) -> None:
    spec = _write(tmp_path / "one.yaml", """
        version: 1
        cluster:
          gpu_backend: auto
          jobs:
            localhost: {gpus: 1}
        graph:
          - {name: a, op: random.uniform, shape: [256, 128], seed: 1, device: /cpu:0}
          - {name: b, op: random.uniform, shape: [128, 64], seed: 2, device: /cpu:0}
          - {name: c, op: matmul, inputs: [a, b], device: /gpu:0}
          - {name: s, op: sum, inputs: [c], device: /gpu:0}
        outputs: {c: "-", s: "-"}
        """)
    result = run_file(spec, echo=quiet, write_outputs=False, use_cache=False)
    assert result.backend == ("cupy" if VISIBLE else "simulated")  # auto
    a = np.random.default_rng([1, 0]).uniform(0, 1, (256, 128))
    b = np.random.default_rng([2, 0]).uniform(0, 1, (128, 64))
    np.testing.assert_allclose(result.values["c"], a @ b, rtol=1e-12)
    np.testing.assert_allclose(result.values["s"], (a @ b).sum(), rtol=1e-12)
    ran = {op["name"]: op["worker"] for op in result.report["ops"]}
    assert ran["c"] == "/job:localhost/replica:0/task:0/device:GPU:0"


def test_the_memory_cap_is_enforced_on_the_real_gpu(tmp_path: Path) -> None:
    # a call of unknown output size: the plan cannot see the 4 MB coming, the GPU's pool must refuse it
    (tmp_path / "grow.py").write_text("def grow(x, xp, n=0):\n    return xp.ones((n,), dtype='float64')\n")
    spec = _write(tmp_path / "oom.yaml", """
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1, gpu_memory: {limit: 1MiB}}
        graph:
          - {name: x, op: ones, shape: [4], device: /cpu:0}
          - {name: big, op: call, fn: "grow:grow", kernels: [cpu, gpu], inputs: [x], params: {n: 500000},
             device: /gpu:0}
        outputs: {big: "-"}
        """)
    with pytest.raises(DeviceOutOfMemory) as info:
        run_file(spec, echo=quiet, gpu_backend=BACKEND, write_outputs=False, use_cache=False)
    message = str(info.value)
    assert "op 'big'" in message and "/job:localhost/replica:0/task:0/device:GPU:0" in message
