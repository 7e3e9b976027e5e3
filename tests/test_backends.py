"""GPU backends: one registry says their names, whether they need real GPUs and whether outputs go to the host.

The spec's ``cluster.gpu_backend`` (at validation, with its line and column),
``run --gpu-backend`` (a usage error), the API's settings and the runner's
choice all read ``orchestrator.runtime.backends.BACKENDS``; a new backend is one entry.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator import backend_registry as backends
from orchestrator import run_file
from orchestrator.api import check_file
from orchestrator.runtime.backends import BackendEntry
from orchestrator.cli import build_parser, run_cli
from orchestrator.errors import RunError, UsageError
from orchestrator.execute.connect import choose_backend
from orchestrator.plan.records import Plan

SPEC = """\
    version: 1
    cluster:
      gpu_backend: BACKEND
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: a, op: ones, shape: [3], device: /gpu:1}
      - {name: b, op: square, inputs: [a], device: /gpu:1}
    outputs: {b: "-"}
    """


def _spec(tmp_path: Path, backend: str = "auto", text: str = SPEC) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text).replace("BACKEND", backend))
    return path


def _plan(tmp_path: Path, text: str = SPEC) -> Plan:
    checked = check_file(_spec(tmp_path, text=text))
    assert checked.plan is not None and not checked.errors
    return checked.plan


def test_the_names_users_may_choose_come_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    assert backends.gpu_backend_names() == ("auto", "simulated", "cupy")  # host stands for CPUs only
    assert backends.BACKENDS["cupy"].hardware and backends.BACKENDS["cupy"].host_outputs
    assert not backends.BACKENDS["simulated"].hardware and not backends.BACKENDS["simulated"].host_outputs
    assert backends.gpu_backend_problem("cupy") is None
    assert backends.gpu_backend_problem("host") == "unknown GPU backend 'host' (known: auto, simulated, cupy)"
    monkeypatch.setattr(backends, "BACKENDS", {**backends.BACKENDS, "rocm": BackendEntry("rocm", "m:C")})
    assert backends.gpu_backend_names() == ("auto", "simulated", "cupy", "rocm")


def test_an_unknown_gpu_backend_in_the_spec_is_an_error_at_its_line_naming_the_known_ones(tmp_path: Path) -> None:
    checked = check_file(_spec(tmp_path, "cuda"))
    assert [d.render() for d in checked.errors] == [
        f"{tmp_path / 'spec.yaml'}:3:16: cluster.gpu_backend: unknown GPU backend 'cuda' (known: auto, simulated, "
        "cupy) (auto picks cupy when enough CUDA GPUs are visible, else simulated)"]
    assert check_file(_spec(tmp_path, "simulatd")).errors[0].hint == "did you mean 'simulated'?"


def test_an_unknown_gpu_backend_on_the_command_line_is_a_usage_error(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["run", str(_spec(tmp_path)), "--gpu-backend", "cuda"], out=io.StringIO()) == 2
    assert "argument --gpu-backend: invalid choice: 'cuda' (choose from 'auto', 'simulated', 'cupy')" in \
        capsys.readouterr().err


def test_an_unknown_gpu_backend_in_the_settings_is_refused_before_a_cluster_starts(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--gpu-backend: unknown GPU backend 'cuda' \(known: auto, simulated, "
                                         r"cupy\)"):
        run_file(_spec(tmp_path), gpu_backend="cuda", echo=lambda _: None)
    with pytest.raises(UsageError, match="unknown GPU backend 'cuda'"):  # no silent fall-through either
        choose_backend(_plan(tmp_path), "cuda", lambda: 8)


def test_the_choice_reads_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path)  # GPU:1 is used: a hardware backend needs 2 CUDA GPUs
    assert choose_backend(plan, "auto", lambda: 2) == ("cupy", "2 CUDA GPU(s) visible")
    assert choose_backend(plan, "auto", lambda: 1) == ("simulated", "1 CUDA GPU(s) visible, 2 needed")
    assert choose_backend(plan, "simulated", lambda: 8) == ("simulated", "gpu_backend: simulated")
    with pytest.raises(RunError, match=r"gpu_backend: cupy needs 2 CUDA GPU\(s\); 1 visible"):
        choose_backend(plan, "cupy", lambda: 1)
    no_gpus = _plan(tmp_path, SPEC.replace("{gpus: 2}", "{}").replace("/gpu:1", "/cpu:0"))
    assert choose_backend(no_gpus, "auto", lambda: 0) == ("simulated", "no GPUs in the spec")
    # a second real backend is a registry entry: named, it needs the GPUs counted too; auto keeps the first
    monkeypatch.setattr(backends, "BACKENDS", {**backends.BACKENDS,
                                               "rocm": BackendEntry("rocm", "m:C", hardware=True)})
    assert choose_backend(plan, "rocm", lambda: 2) == ("rocm", "gpu_backend: rocm")
    with pytest.raises(RunError, match="gpu_backend: rocm needs 2"):
        choose_backend(plan, "rocm", lambda: 0)
    assert choose_backend(plan, "auto", lambda: 2)[0] == "cupy"


@pytest.mark.cluster
def test_a_new_backend_is_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation and --gpu-backend accept its name, the workers run it, its outputs come back through the host."""
    entry = BackendEntry("tracing", "registered_backend:TracingBackend", host_outputs=True,
                         about="the simulated GPU under a name of its own")
    monkeypatch.setattr(backends, "BACKENDS", {**backends.BACKENDS, "tracing": entry})
    spec = _spec(tmp_path, "tracing")
    assert not check_file(spec).errors
    assert build_parser().parse_args(["run", str(spec), "--gpu-backend", "tracing"]).gpu_backend == "tracing"
    traced = run_file(spec, echo=lambda _: None)
    np.testing.assert_array_equal(traced.values["b"], np.ones(3))
    assert traced.backend == "tracing"
    gpu1 = next(d for d in traced.report["devices"] if d["device"].endswith("GPU:1"))
    assert gpu1["backend"] == "tracing"  # what the worker's own backend reported
    # host_outputs: one more task, copying b to the host on its GPU's worker
    simulated = run_file(spec, echo=lambda _: None, gpu_backend="simulated")
    assert (traced.report["totals"]["tasks"], simulated.report["totals"]["tasks"]) == (2, 1)


CROSSING = """\
    version: 1
    cluster:
      gpu_backend: BACKEND
      jobs:
        localhost: {gpus: 2}
    graph:
      - {name: a, op: random.uniform, shape: [6, 4], seed: 3, device: /cpu:0}
      - {name: parts, replicate: {devices: /gpu:*, split: {a: 0}, body: [{name: sq, op: square, inputs: [a]}],
                                  combine: {sq: concat}, combine_device: /cpu:0}}
      - {name: total, op: sum, inputs: [parts.sq], device: /cpu:0}
      - {name: twice, op: add, inputs: [parts.sq, parts.sq], device: /gpu:1}
    outputs: {total: "-", twice: "-"}
    """


@pytest.mark.cluster
def test_device_arrays_bound_for_a_cpu_cross_as_host_copies_made_on_their_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CuPy array Dask sends to a worker without a GPU cannot be rebuilt there (seen on an H200: the run
    hung): a backend whose outputs are device arrays crosses to a CPU as a host copy made on its GPU."""
    entry = BackendEntry("device-only", "registered_backend:DeviceOnlyBackend", host_outputs=True,
                         about="the simulated GPU, with CuPy's arrays' crossing")
    monkeypatch.setattr(backends, "BACKENDS", {**backends.BACKENDS, "device-only": entry})
    spec = _spec(tmp_path, "device-only", CROSSING)
    for granularity in ("partition", "op"):
        result = run_file(spec, echo=lambda _: None, granularity=granularity, write_outputs=False, use_cache=False)
        a = np.random.default_rng([3, 0]).uniform(0, 1, (6, 4))
        np.testing.assert_allclose(result.values["total"], (a ** 2).sum(), rtol=1e-12)
        np.testing.assert_allclose(result.values["twice"], 2 * a ** 2, rtol=1e-12)
        assert type(result.values["twice"]) is np.ndarray
