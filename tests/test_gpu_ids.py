"""Physical GPUs by UUID: ``visible_gpus`` and ``orchestrate worker --gpus`` take CUDA ordinals or GPU/MIG UUIDs.

CUDA and dask-cuda read ``CUDA_VISIBLE_DEVICES=GPU-…`` and Slurm exports MIG
slices as ``MIG-…``; each GPU worker gets the list rotated so that its own GPU
comes first, exactly as ordinals are rotated.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import run_file
from orchestrator.api import check_file, plan_file
from orchestrator.cli import run_cli
from orchestrator.devices import GPU_UUID_PATTERN, parse_gpu_ids
from orchestrator.execute.cluster import worker_options

ROOT = Path(__file__).resolve().parent.parent
U1 = "8932f937-d72c-4106-c12f-20bd9faed9f6"
U2 = "0b0c2f5e-1a2b-4c3d-8e9f-a0b1c2d3e4f5"
GPU1, GPU2 = f"GPU-{U1}", f"GPU-{U2}"
MIG_NEW, MIG_OLD = f"MIG-{U2}", f"MIG-GPU-{U1}/1/0"


def spec(tmp_path: Path, visible: str, extra: str = "") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        cluster:
          jobs:
            worker: {{visible_gpus: {visible}{extra}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """))
    return path


def rendered(path: Path) -> list[str]:
    """Each diagnostic as the CLI prints it, without the file name."""
    return [d.render().removeprefix(f"{path}:") for d in check_file(path).diagnostics]


# ------------------------------------------------------------------- the spec


@pytest.mark.parametrize("visible", [[GPU1, GPU2], [MIG_NEW], [MIG_OLD], [GPU1, MIG_NEW, MIG_OLD]])
def test_uuids_are_physical_gpus(tmp_path: Path, visible: list[str]) -> None:
    path = spec(tmp_path, json.dumps(visible))
    checked = check_file(path)
    assert not checked.diagnostics, [d.render() for d in checked.diagnostics]
    assert checked.plan is not None
    cluster = checked.plan.spec.cluster
    (job,) = cluster.jobs
    assert job.physical_gpus == tuple(visible)
    assert [d.physical_gpu for d in cluster.devices if d.is_gpu] == visible


def test_each_uuid_may_carry_virtual_gpus(tmp_path: Path) -> None:
    plan = plan_file(spec(tmp_path, f"[{GPU1}, {GPU2}]", ", virtual_gpus: 2"))
    assert [d.physical_gpu for d in plan.spec.cluster.devices if d.is_gpu] == [GPU1, GPU1, GPU2, GPU2]


@pytest.mark.parametrize(("visible", "expected"), [
    (f"[0, {GPU1}]",
     f"4:32: cluster.jobs.worker.visible_gpus[1]: ordinal 0 and UUID '{GPU1}' in one list: CUDA ordinals and "
     "UUIDs do not mix (give every GPU as an ordinal or every GPU as a UUID (nvidia-smi -L prints both): an "
     "ordinal depends on the machine's CUDA device order and a UUID does not, so a mix could name one GPU twice)"),
    ("[GPU-8932f937]",
     "4:29: cluster.jobs.worker.visible_gpus[0]: 'GPU-8932f937' is not a whole GPU UUID (write the UUID in full, "
     f"as nvidia-smi -L prints it: e.g. {GPU1} or MIG-{U1} (MIG-GPU-{U1}/1/0 on drivers before R470))"),
    (f"[{GPU1.upper()}]",
     f"4:29: cluster.jobs.worker.visible_gpus[0]: '{GPU1.upper()}' is not a GPU UUID as nvidia-smi -L prints it "
     f"(write {GPU1}: the hex digits in lower case)"),
    (f"[mig-gpu-{U1}/1/0]",
     f"4:29: cluster.jobs.worker.visible_gpus[0]: 'mig-gpu-{U1}/1/0' is not a GPU UUID as nvidia-smi -L prints it "
     f"(write {MIG_OLD}: the prefix in capitals)"),
    ('["1"]', "4:29: cluster.jobs.worker.visible_gpus[0]: '1' is text, not a CUDA ordinal (write 1 without quotes)"),
    ("[cuda1]", "4:29: cluster.jobs.worker.visible_gpus[0]: 'cuda1' is not a GPU (give CUDA ordinals (0, 1, ...) or "
                f"GPU UUIDs as nvidia-smi -L prints them, e.g. {GPU1} or MIG-{U1} (MIG-GPU-{U1}/1/0 on drivers "
                "before R470))"),
    ("[1.5]", "4:29: cluster.jobs.worker.visible_gpus[0]: expected an integer or a string, got the number 1.5 "
              f"(a CUDA ordinal, e.g. 2, or a GPU UUID as nvidia-smi -L prints it, e.g. {GPU1})"),
    (f"[{GPU1}, {GPU1}]", "4:28: cluster.jobs.worker.visible_gpus: must not list an item twice (each GPU once)"),
])
def test_a_bad_gpu_is_a_diagnostic_with_a_hint(tmp_path: Path, visible: str, expected: str) -> None:
    assert rendered(spec(tmp_path, visible)) == [expected]


def test_a_trailing_newline_the_schema_lets_through_is_refused(tmp_path: Path) -> None:
    """JSON Schema's '$' matches before a final newline; CUDA_VISIBLE_DEVICES must not get one."""
    path = spec(tmp_path, json.dumps([GPU1 + "\n"]))
    assert rendered(path) == [
        f"4:29: cluster.jobs.worker.visible_gpus[0]: '{GPU1}\\n' is not a GPU UUID as nvidia-smi -L prints it "
        f"(write {GPU1}: without white space around it)"]


def test_the_schema_pattern_is_the_one_the_checks_use() -> None:
    schema = json.loads((ROOT / "schemas" / "spec.schema.json").read_text(encoding="utf-8"))
    job = schema["properties"]["cluster"]["properties"]["jobs"]["additionalProperties"]
    assert job["properties"]["visible_gpus"]["items"]["pattern"] == GPU_UUID_PATTERN


# ------------------------------------------------------------------- orchestrate worker --gpus


def test_parse_gpu_ids() -> None:
    assert parse_gpu_ids("0, 2,") == (0, 2)
    assert parse_gpu_ids(f"{MIG_NEW},{MIG_OLD}") == (MIG_NEW, MIG_OLD)
    with pytest.raises(ValueError, match="ordinal 1 and UUID .* in one list"):
        parse_gpu_ids(f"1,{GPU1}")


def worker(path: Path, gpus: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    out = io.StringIO()
    code = run_cli(["worker", str(path), "--job", "worker", "--task", "0", "--scheduler", "tcp://h:8786",
                    "--dask-commands", f"--gpus={gpus}"], out=out)
    return code, out.getvalue().splitlines(), capsys.readouterr().err


def visible_of(lines: list[str]) -> list[str]:
    return [next(w for w in line.split() if w.startswith("CUDA_VISIBLE_DEVICES=")).partition("=")[2]
            for line in lines]


def test_gpus_takes_uuids_as_slurm_exports_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spec written with ordinals runs on the machine's MIG slices; each worker sees its own slice first."""
    code, lines, err = worker(spec(tmp_path, "[0, 1]", ", virtual_gpus: 2"), f"{MIG_NEW},{MIG_OLD}", capsys)
    assert code == 0, err
    assert visible_of(lines) == ["''", f"{MIG_NEW},{MIG_OLD}", f"{MIG_NEW},{MIG_OLD}",
                                 f"{MIG_OLD},{MIG_NEW}", f"{MIG_OLD},{MIG_NEW}"]


@pytest.mark.parametrize(("gpus", "expected"), [
    (f"0,{GPU1}", f"argument --gpus: ordinal 0 and UUID '{GPU1}' in one list: CUDA ordinals and UUIDs do not mix"),
    ("GPU-8932f937,1", "argument --gpus: expected GPU indices like 0,1 or GPU UUIDs, got 'GPU-8932f937,1': "
                       "'GPU-8932f937' is not a whole GPU UUID (write the UUID in full"),
    ("a,b", "argument --gpus: expected GPU indices like 0,1 or GPU UUIDs, got 'a,b': 'a' is not a GPU (give CUDA "
            "ordinals (0, 1, ...) or GPU UUIDs as nvidia-smi -L prints them"),
    ("-1,0", "argument --gpus: GPU indices must be non-negative, got '-1,0'"),
    (f"{GPU1},{GPU1}", f"--gpus must list 2 distinct GPUs, got {GPU1},{GPU1}"),
])
def test_gpus_refuses_what_cuda_would_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: str,
                                               expected: str) -> None:
    code, lines, err = worker(spec(tmp_path, "[0, 1]"), gpus, capsys)
    assert (code, lines) == (2, [])
    assert expected in err
    assert "Traceback" not in err


def test_the_api_checks_gpus_as_the_cli_does(tmp_path: Path) -> None:
    """``select_worker_task`` takes a Python list, which no argument parser has seen."""
    from orchestrator.api import select_worker_task
    from orchestrator.errors import UsageError

    spec_ = plan_file(spec(tmp_path, "[0, 1]")).spec
    assert [d.physical_gpu for d in select_worker_task(spec_, "worker", 0, [GPU2, GPU1]).devices] == [None, GPU2, GPU1]
    with pytest.raises(UsageError, match=f"--gpus: ordinal 1 and UUID '{GPU1}' in one list"):
        select_worker_task(spec_, "worker", 0, [1, GPU1])
    with pytest.raises(UsageError, match="--gpus: 'GPU-1' is not a whole GPU UUID"):
        select_worker_task(spec_, "worker", 0, [GPU1, "GPU-1"])


# ------------------------------------------------------------------- what each worker sees


def test_each_gpu_worker_gets_the_uuids_rotated(tmp_path: Path) -> None:
    plan = plan_file(spec(tmp_path, f"[{GPU1}, {GPU2}]", ", virtual_gpus: 2"))
    cluster = plan.spec.cluster
    env = {d.name.rpartition("/")[2]: worker_options(cluster, d)["env"]["CUDA_VISIBLE_DEVICES"]
           for d in cluster.devices}
    assert env == {"device:CPU:0": "", "device:GPU:0": f"{GPU1},{GPU2}", "device:GPU:1": f"{GPU1},{GPU2}",
                   "device:GPU:2": f"{GPU2},{GPU1}", "device:GPU:3": f"{GPU2},{GPU1}"}


GPU_ENV = '''
import os
import numpy as np

def visible(x, xp):
    return xp.asarray(np.frombuffer(os.environ["CUDA_VISIBLE_DEVICES"].encode(), dtype=np.uint8))
'''


@pytest.mark.cluster
def test_each_gpu_worker_process_sees_its_uuid_first(tmp_path: Path) -> None:
    """On a real embedded cluster (simulated GPUs): what the worker processes themselves read."""
    (tmp_path / "gpuenv.py").write_text(GPU_ENV)
    ops = "\n".join(f"  - {{name: g{i}, op: call, fn: 'gpuenv:visible', kernels: [cpu, gpu], inputs: [x], "
                    f"device: /gpu:{i}}}" for i in range(3))
    path = tmp_path / "env.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        cluster:
          gpu_backend: simulated
          dashboard: false
          jobs:
            localhost: {{visible_gpus: [{GPU1}, {MIG_NEW}, {MIG_OLD}]}}
        graph:
          - {{name: x, op: ones, shape: [1], device: /cpu:0}}
        """) + ops + "\noutputs: {g0: '-', g1: '-', g2: '-'}\n")
    result = run_file(path, echo=lambda _: None)
    seen = [bytes(np.asarray(result.values[f"g{i}"], dtype=np.uint8)).decode() for i in range(3)]
    assert seen == [f"{GPU1},{MIG_NEW},{MIG_OLD}", f"{MIG_NEW},{MIG_OLD},{GPU1}", f"{MIG_OLD},{GPU1},{MIG_NEW}"]


NVML_ON = '''
import dask

def nvml_on(x, xp):
    return xp.asarray(float(bool(dask.config.get("distributed.diagnostics.nvml"))))
'''


@pytest.mark.cluster
def test_simulated_gpu_workers_leave_the_ordinals_they_are_shown_unmonitored(tmp_path: Path) -> None:
    """Dask's NVML monitoring opens a worker's first CUDA_VISIBLE_DEVICES GPU: a simulated GPU:1 on a machine
    with one real GPU stopped its worker at start (seen on an H200). Only real-GPU workers are monitored."""
    (tmp_path / "nvml.py").write_text(NVML_ON)
    path = tmp_path / "nvml.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        cluster:
          gpu_backend: simulated
          dashboard: false
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: x, op: ones, shape: [1], device: /cpu:0}
          - {name: g, op: call, fn: 'nvml:nvml_on', kernels: [cpu, gpu], inputs: [x], device: /gpu:1}
        outputs: {g: '-'}
        """))
    assert run_file(path, echo=lambda _: None).values["g"] == 0.0
    plan = plan_file(path)
    gpu1 = plan.spec.cluster.devices[-1]
    assert worker_options(plan.spec.cluster, gpu1)["config"]["distributed.diagnostics.nvml"] is True  # cupy's
    assert worker_options(plan.spec.cluster, gpu1, real_gpus=False)["config"]["distributed.diagnostics.nvml"] is False
