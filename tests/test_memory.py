"""Tests of orchestrator.plan.memory: the static memory plan per device and its limits.

Each spec here is small enough that its peak is worked out by hand in the
comments (float64: 8 bytes an element); the tests assert exact byte counts.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from spec_helpers import plan_json, write

from orchestrator.api import check_file, plan_file
from orchestrator.cli import run_cli
from orchestrator.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT / "specs" / "valid"

LOCAL = "/job:localhost/replica:0/task:0/device:"
CPU0, GPU0, GPU1 = LOCAL + "CPU:0", LOCAL + "GPU:0", LOCAL + "GPU:1"
MiB = 2**20


def memory(path: Path) -> dict[str, dict[str, Any]]:
    return {d["device"]: d for d in plan_json(path)["devices"]}


# ------------------------------------------------------------------- liveness


CHAIN = """\
    version: 1
    graph:
      - {name: a, op: zeros, shape: [1000]}            # step 0: 8000 B, an output: live to the end
      - {name: b, op: mul, inputs: [a], scalar: 2}     # step 1: 8000 B, last read by c
      - {name: c, op: sum, inputs: [b]}                # step 2: 8 B
      - {name: d, op: ones, shape: [2000]}             # step 3: 16000 B (b is gone)
      - {name: e, op: mul, inputs: [d, c]}             # step 4: 16000 B
    outputs:
      a: "-"
      e: "-"
    """


def test_peak_of_a_chain_frees_dead_values_and_keeps_outputs(tmp_path: Path) -> None:
    (cpu,) = plan_json(write(tmp_path, CHAIN))["devices"]
    # live per step: 8000 | 16000 | 16008 | 8000+8+16000 = 24008 | 24008+16000 = 40008
    # (everything summed would be 48008; dropping output a after its last read, 32008)
    assert cpu["device"] == CPU0
    assert (cpu["peak_bytes"], cpu["peak_op"]) == (40008, "e")
    assert cpu["ops"] == ["a", "b", "c", "d", "e"]
    assert (cpu["limit_bytes"], cpu["used"], cpu["unknown_size_ops"]) == (None, None, [])


def test_peak_op_is_the_op_running_at_the_peak(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: zeros, shape: [1000]}          # 8000
          - {name: b, op: square, inputs: [a]}           # a + b = 16000: the peak
          - {name: c, op: sum, inputs: [b]}              # b + c = 8008
          - {name: d, op: ones, shape: [100]}            # c + d = 808
        outputs: {c: "-"}
        """)
    (cpu,) = plan_json(path)["devices"]
    assert (cpu["peak_bytes"], cpu["peak_op"]) == (16000, "b")


CROSS = """\
    version: 1
    cluster:
      jobs:
        localhost: {gpus: 1}
    graph:
      - {name: a, op: zeros, shape: [1000], device: /cpu:0}    # step 0, CPU: 8000
      - {name: b, op: mul, inputs: [a], scalar: 2}             # step 1, GPU: a arrives (8000) + b 8000
      - {name: c, op: square, inputs: [a]}                     # step 2, GPU: a + b + c = 24000
      - {name: d, op: ones, shape: [500], device: /cpu:0}      # step 3, CPU: a was sent, gone: d 4000
      - {name: e, op: add, inputs: [b, c], device: /cpu:0}     # step 4, CPU: b, c arrive + e = 24000
    outputs: {e: "-"}
    """


def test_values_from_another_device_count_on_the_consumer_once(tmp_path: Path) -> None:
    mem = memory(write(tmp_path, CROSS))
    cpu, gpu = mem[CPU0], mem[GPU0]
    assert (cpu["peak_bytes"], cpu["peak_op"]) == (24000, "e")
    assert (gpu["peak_bytes"], gpu["peak_op"]) == (24000, "c")
    # a moves to the GPU once although two ops read it there
    assert (gpu["bytes_in"], gpu["bytes_out"]) == (8000, 16000)
    assert (cpu["bytes_in"], cpu["bytes_out"]) == (16000, 8000)


def test_seed_matmul_memory() -> None:
    mem = memory(VALID / "matmul.yaml")
    assert (mem[CPU0]["peak_bytes"], mem[CPU0]["peak_op"], mem[CPU0]["bytes_out"]) == (96, "b", 96)
    assert (mem[GPU0]["peak_bytes"], mem[GPU0]["peak_op"], mem[GPU0]["bytes_in"]) == (128, "c", 96)
    # a GPU without gpu_memory is capped by its total (16 GiB by default), a CPU without memory_limit is not
    assert (mem[GPU0]["limit_bytes"], mem[CPU0]["limit_bytes"]) == (16 * 2**30, None)


def test_seed_towers_memory() -> None:
    mem = memory(VALID / "towers.yaml")
    # towers.c: four 32 B towers arrive, plus its own 32 B; a and b are gone by then
    assert (mem[CPU0]["peak_bytes"], mem[CPU0]["peak_op"]) == (160, "towers.c")
    assert (mem[CPU0]["bytes_in"], mem[CPU0]["bytes_out"]) == (128, 4 * 96)
    assert {d: m["limit_bytes"] for d, m in mem.items() if "GPU" in d} == \
        {LOCAL + f"GPU:{i}": 64 * MiB for i in range(4)}


# ------------------------------------------------------------------- unknown sizes


def unknown_spec(cluster: str, call: str = "{name: f, op: call, fn: mypkg.mod:f, inputs: [a]}") -> str:
    return f"""\
version: 1
cluster:
  jobs:
    localhost: {cluster}
graph:
  - {{name: a, op: ones, shape: [2]}}
  - {call}
"""


def test_unknown_sizes_warn_where_a_limit_was_declared(tmp_path: Path) -> None:
    checked = check_file(write(tmp_path, unknown_spec("{memory_limit: 1GiB}")))
    assert not checked.errors
    (warning,) = checked.warnings
    assert warning.code == "memory-unknown"
    assert warning.message == (f"1 op(s) of unknown size on {CPU0} (first: 'f'); "
                               "peak is at least 16 B of a 1.0 GiB limit")
    assert warning.path == ("graph", 1)
    (cpu,) = plan_json(tmp_path / "spec.yaml")["devices"]
    assert (cpu["unknown_size_ops"], cpu["peak_bytes"]) == (["f"], 16)


def test_unknown_sizes_are_only_noted_without_a_declared_limit(tmp_path: Path) -> None:
    path = write(tmp_path, unknown_spec("{cpu_threads: 1}"))
    assert check_file(path).diagnostics == ()
    (cpu,) = plan_json(path)["devices"]
    assert cpu["unknown_size_ops"] == ["f"]


def test_a_gpu_with_its_default_total_is_not_a_declared_limit(tmp_path: Path) -> None:
    gpu_call = "{name: f, op: call, fn: mypkg.mod:f, kernels: [cpu, gpu], inputs: [a], device: /gpu:*}"
    path = write(tmp_path, unknown_spec("{gpus: 2}", gpu_call))
    assert check_file(path).diagnostics == ()
    declared = write(tmp_path, unknown_spec("{gpus: 2, gpu_memory: {limit: 1GiB}}", gpu_call), "declared.yaml")
    (warning,) = check_file(declared).warnings
    assert warning.message.startswith(f"1 op(s) of unknown size on {LOCAL}GPU:* (first: 'f')")


def test_a_declared_output_makes_a_call_op_count(tmp_path: Path) -> None:
    call = "{name: f, op: call, fn: mypkg.mod:f, inputs: [a], output: {shape: [10, 10], dtype: float32}}"
    path = write(tmp_path, unknown_spec("{memory_limit: 1GiB}", call))
    assert check_file(path).diagnostics == ()
    (cpu,) = plan_json(path)["devices"]
    assert (cpu["unknown_size_ops"], cpu["peak_bytes"], cpu["peak_op"]) == ([], 16 + 400, "f")


def test_a_device_of_unknown_sizes_only_still_names_a_peak_op() -> None:
    mem = memory(VALID / "soft_placement.yaml")
    assert (mem[CPU0]["peak_bytes"], mem[CPU0]["peak_op"], mem[CPU0]["unknown_size_ops"]) == (0, "data", ["data"])


# ------------------------------------------------------------------- limits


def big_spec(limit: str, shape: str = "[512, 1024]") -> str:  # 512 x 1024 float64 = 4 MiB
    return f"""\
version: 1
name: big
cluster:
  jobs:
    localhost: {{gpus: 1, gpu_memory: {limit}}}
graph:
  - {{name: small, op: ones, shape: [4]}}
  - {{name: big, op: zeros, shape: {shape}}}
"""


BIG_MESSAGE = f"op 'big' takes {GPU0} over its limit of 1.0 MiB: 4.0 MiB at the peak (big 4.0 MiB)"


def test_an_op_over_the_gpu_limit_is_an_error_from_the_api(tmp_path: Path) -> None:
    path = write(tmp_path, big_spec("{limit: 1MiB}"))
    (error,) = check_file(path).errors
    assert (error.code, error.message, error.path, error.line) == ("memory", BIG_MESSAGE, ("graph", 1), 8)
    with pytest.raises(SpecError) as caught:
        plan_file(path)
    assert caught.value.diagnostics == (error,)


def test_an_op_over_the_gpu_limit_fails_validate_and_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, big_spec("{limit: 1MiB}"))
    out = io.StringIO()
    assert run_cli(["validate", str(path)], out=out) == 1
    assert f"{path}:8:5: graph[1]: {BIG_MESSAGE} (" in out.getvalue()
    out = io.StringIO()
    assert run_cli(["plan", str(path), "--format", "json"], out=out) == 1
    assert out.getvalue() == ""
    assert f"{path}:8:5: graph[1]: {BIG_MESSAGE} (" in capsys.readouterr().err


def test_the_same_op_fits_a_larger_limit(tmp_path: Path) -> None:
    path = write(tmp_path, big_spec("{limit: 8MiB}"))
    assert run_cli(["validate", str(path)], out=io.StringIO()) == 0
    gpu = memory(path)[GPU0]
    assert (gpu["peak_bytes"], gpu["peak_op"], gpu["limit_bytes"], gpu["used"]) == (4 * MiB, "big", 8 * MiB, 0.5)


def test_fraction_of_a_declared_total_is_the_limit(tmp_path: Path) -> None:
    # 0.25 x 64 MiB = 16 MiB; 2048 x 2048 float64 = 32 MiB
    path = write(tmp_path, big_spec("{fraction: 0.25, total: 64MiB}", "[2048, 2048]"))
    (error,) = check_file(path).errors
    assert error.message == f"op 'big' takes {GPU0} over its limit of 16.0 MiB: 32.0 MiB at the peak (big 32.0 MiB)"
    fits = write(tmp_path, big_spec("{fraction: 0.25, total: 64MiB}"), "fits.yaml")
    assert memory(fits)[GPU0]["limit_bytes"] == 16 * MiB


def test_virtual_gpus_share_their_physical_gpu_fraction(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1, virtual_gpus: 2, gpu_memory: {fraction: 0.5, total: 1GiB}}
        graph:
          - {name: a, op: ones, shape: [4], device: /gpu:0}
          - {name: b, op: ones, shape: [4], device: /gpu:1}
        """)
    mem = memory(path)
    assert (mem[GPU0]["limit_bytes"], mem[GPU1]["limit_bytes"]) == (256 * MiB, 256 * MiB)


def test_cpu_memory_limit_is_checked(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {memory_limit: 4KiB}
        graph:
          - {name: a, op: zeros, shape: [1000]}
        """)
    (error,) = check_file(path).errors
    assert error.message == f"op 'a' takes {CPU0} over its limit of 4.0 KiB: 7.8 KiB at the peak (a 7.8 KiB)"


def test_an_unknown_size_over_the_limit_says_at_least(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {memory_limit: 4KiB}
        graph:
          - {name: a, op: zeros, shape: [1000]}
          - {name: f, op: call, fn: mypkg.mod:f, inputs: [a]}
        """)
    (error,) = check_file(path).errors
    assert error.message == f"op 'a' takes {CPU0} over its limit of 4.0 KiB: at least 7.8 KiB at the peak (a 7.8 KiB)"


def test_the_op_whose_allocation_goes_over_the_limit_is_named_not_the_op_at_the_peak(tmp_path: Path) -> None:
    """4 MiB of zeros, then a sum: the peak is at the sum (it holds the zeros and its own 8 bytes),
    but it is the zeros that do not fit; the largest values live at the peak are listed."""
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 1, gpu_memory: {limit: 1MiB}}
        graph:
          - {name: z, op: zeros, shape: [524288], device: /gpu:0}
          - {name: s, op: sum, inputs: [z], device: /gpu:0}
        outputs: {s: "-"}
        """)
    (error,) = check_file(path).errors
    assert error.message == (f"op 'z' takes {GPU0} over its limit of 1.0 MiB: 4.0 MiB at the peak "
                             "(z 4.0 MiB, s 8 B)")
    assert error.line == 6
    gpu = memory(write(tmp_path, path.read_text().replace("1MiB", "8MiB"), "fits.yaml"))
    assert (gpu[GPU0]["peak_op"], gpu[GPU0]["over_limit_op"]) == ("s", None)
    assert gpu[GPU0]["largest_at_peak"] == [{"value": "z", "bytes": 4 * MiB}, {"value": "s", "bytes": 8}]
