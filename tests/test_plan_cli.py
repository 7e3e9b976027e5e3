"""Tests of ``orchestrate plan``: text and JSON output, Graphviz files, exit codes.

The CLI runs in-process (``run_cli``); files are real, written to ``tmp_path``.
Rendering SVG needs Graphviz's ``dot``; that test is skipped when it is absent.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from spec_helpers import polyfit_in, write

from orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT / "specs" / "valid"

LOCAL = "/job:localhost/replica:0/task:0/device:"
CPU0, GPU0 = LOCAL + "CPU:0", LOCAL + "GPU:0"


def plan(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_cli(["plan", *args], out=out)
    return code, out.getvalue()


# ------------------------------------------------------------------- text


def test_text_is_the_default_and_has_a_table_per_device() -> None:
    spec = str(VALID / "matmul.yaml")
    code, text = plan(spec)
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"plan for 'matmul' ({spec}): 3 ops on 2 of 2 devices"
    assert re.fullmatch(r"device\s+ops\s+peak / limit\s+used\s+in\s+out", lines[2])
    assert re.fullmatch(rf"{CPU0}\s+2\s+96 B / no limit\s+-\s+0 B\s+96 B", lines[3])
    assert re.fullmatch(rf"{GPU0}\s+1\s+128 B / 16\.0 GiB\s+0\.0%\s+96 B\s+0 B", lines[4])


def test_text_has_one_tf_placement_line_per_op_with_why() -> None:
    _, text = plan(str(VALID / "matmul.yaml"))
    lines = text.splitlines()
    start = lines.index("placement (op: (Type): device  # why):")
    assert lines[start + 1:] == [
        f"a: (Const): {CPU0}  # job, replica, task from default; device from op",
        f"b: (Const): {CPU0}  # job, replica, task from default; device from op",
        f"c: (MatMul): {GPU0}  # job, replica, task, device from default",
        f"    <- a from {CPU0} (48 B)",
        f"    <- b from {CPU0} (48 B)",
    ]


def test_text_why_names_rules_scopes_and_soft_fallbacks() -> None:
    _, text = plan(str(VALID / "round_robin.yaml"))
    assert ("v2: (VariableV2): /job:ps/replica:0/task:1/device:CPU:0  "
            "# job from rule 1; replica, device from default; task from rule 1 (round_robin)") in text.splitlines()
    assert ("p2: (AddV2): /job:worker/replica:0/task:1/device:GPU:1  "
            "# job from placement.default; replica from default; task, device from scope") in text.splitlines()
    _, text = plan(str(VALID / "soft_placement.yaml"))
    (x_line,) = [line for line in text.splitlines() if line.startswith("x: ")]
    assert x_line.startswith(f"x: (Ones): {GPU0}  # job, replica, task from default; type from op; "
                             "index from soft fallback; soft placement: Could not satisfy explicit device")
    assert f"  note: 1 op(s) of unknown size on {CPU0} (data): peak is a lower bound" in text.splitlines()


def test_text_notes_that_dask_picks_the_gpu_of_any_gpu_ops(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: a, op: ones, shape: [2], device: /gpu:*}
        """)
    code, text = plan(str(path))
    assert code == 0
    assert f"a: (Ones): {LOCAL}GPU:*  # job, replica, task from default; device from op" in text
    assert f"  note: Dask picks the GPU of {LOCAL}GPU:* ops at run time; their memory is counted as if on one GPU" \
        in text.splitlines()


# ------------------------------------------------------------------- json


def test_json_shape() -> None:
    code, out = plan(str(VALID / "matmul.yaml"), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"format", "name", "file", "cluster", "devices", "ops", "partitions", "loops", "params",
                         "sweeps", "diagnostics"}
    assert (data["format"], data["name"], data["file"]) == (1, "matmul", str(VALID / "matmul.yaml"))
    assert data["cluster"] == {"devices": [CPU0, GPU0], "default_job": "localhost"}
    c = data["ops"][2]
    assert set(c) == {"name", "op", "device", "sources", "why", "soft_fallback", "out_bytes", "inputs", "transfers"}
    assert (c["name"], c["op"], c["inputs"], c["soft_fallback"]) == ("c", "matmul", ["a", "b"], None)


def test_warnings_go_to_stderr_and_the_plan_still_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {memory_limit: 1GiB}
        graph:
          - {name: f, op: call, fn: mypkg.mod:f}
        """)
    code, out = plan(str(path), "--format", "json")
    assert code == 0
    assert json.loads(out)["devices"][0]["unknown_size_ops"] == ["f"]
    assert "warning: graph[0]: 1 op(s) of unknown size" in capsys.readouterr().err


def test_an_invalid_spec_exits_1_with_diagnostics_on_stderr(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, """\
        version: 1
        cluster:
          jobs:
            localhost: {gpus: 2}
        graph:
          - {name: x, op: ones, shape: [2, 2], device: /device:GPU:2}
        """)
    code, out = plan(str(path), "--format", "json")
    assert (code, out) == (1, "")
    err = capsys.readouterr().err
    assert (f"{path}:6:48: graph[0].device: Could not satisfy explicit device specification "
            f"'{LOCAL}GPU:2' for op 'x': the cluster has GPU:0..GPU:1 on that task") in err
    assert err.endswith("1 file checked: 1 invalid, 1 error\n")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(str(VALID / "matmul.yaml"), "--format", "xml")[0] == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


# ------------------------------------------------------------------- graphviz


def test_dot_has_a_cluster_per_used_device_and_bytes_on_crossing_edges(tmp_path: Path) -> None:
    target = tmp_path / "out.dot"
    code, text = plan(str(VALID / "towers_gpu23.yaml"), "--dot", str(target))
    assert code == 0 and text.startswith("plan for 'towers-gpu23'")
    dot = target.read_text(encoding="utf-8")
    assert dot.startswith('digraph "towers-gpu23" {') and dot.endswith("}\n")
    clusters = re.findall(r'subgraph "cluster_(\d+)" \{\n    label="([^"]+)"', dot)
    assert clusters == [("0", CPU0), ("1", LOCAL + "GPU:2"), ("2", LOCAL + "GPU:3")]
    assert '"towers/0/c" [label="towers/0/c\\nMatMul"' in dot
    crossing = re.findall(r'"([^"]+)" -> "([^"]+)" \[label="([^"]+)", color=red', dot)
    assert crossing == [("a", "towers/0/c", "48 B"), ("b", "towers/0/c", "48 B"),
                        ("a", "towers/1/c", "48 B"), ("b", "towers/1/c", "48 B"),
                        ("towers/0/c", "towers.c", "32 B"), ("towers/1/c", "towers.c", "32 B")]


def test_dot_same_device_edges_are_plain_and_control_edges_dashed(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
          - {name: b, op: add, inputs: [a, a]}
          - {name: c, op: ones, shape: [2], after: [b]}
        """)
    target = tmp_path / "out.dot"
    assert plan(str(path), "--dot", str(target))[0] == 0
    dot = target.read_text(encoding="utf-8")
    assert dot.count('subgraph "cluster_') == 2  # the device, and its one task of three ops
    assert dot.count('  "a" -> "b";\n') == 1
    assert '  "b" -> "c" [style=dashed];\n' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed; SVG rendering untested")
def test_dot_renders_svg_with_graphviz(tmp_path: Path) -> None:
    target = tmp_path / "out.svg"
    assert plan(str(VALID / "towers.yaml"), "--dot", str(target))[0] == 0
    svg = target.read_text(encoding="utf-8")
    assert "<svg" in svg
    assert GPU0 in svg  # a cluster's label


def test_svg_without_graphviz_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no 'dot' on this PATH, whatever the machine has
    target = tmp_path / "out.svg"
    code, out = plan(str(VALID / "towers.yaml"), "--dot", str(target))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == \
        f"cannot render {target}: Graphviz 'dot' is not installed (write a .dot file instead)\n"
    assert not target.exists()


# ------------------------------------------------------------------- partitions


def test_plan_says_how_many_tasks_run_and_how_loops_run() -> None:
    code, text = plan(str(VALID / "pipeline.yaml"))
    assert code == 0
    assert "tasks: 4 device partitions for 8 ops outside loops (one Dask task each; run --granularity op for one " \
           "per op)" in text
    code, text = plan(str(ROOT / "examples" / "polyfit.yaml"))
    assert "loop 'train': gang: one task per window of 100 steps (3 devices in one worker process), values handed " \
           "over within it" in text


@pytest.mark.parametrize("ps, worker, said", [
    ("device", "device", "one task per device per window of 100 steps (3 devices), values sent worker to worker"),
    ("device", "host", "one task per worker process per window of 100 steps (3 devices in 2 processes), values "
                       "handed over within a process and sent worker to worker between them"),
])
def test_plan_says_how_a_loops_devices_share_processes(tmp_path: Path, ps: str, worker: str, said: str) -> None:
    spec = polyfit_in(tmp_path, "host")
    text = spec.read_text(encoding="utf-8")
    text = text.replace("ps: {tasks: 1, processes: host}", f"ps: {{tasks: 1, processes: {ps}}}")
    text = text.replace("64MiB}, processes: host}", f"64MiB}}, processes: {worker}}}")
    spec.write_text(text, encoding="utf-8")
    code, printed = plan(str(spec))
    assert code == 0 and f"loop 'train': gang: {said}" in printed


def test_json_lists_the_partitions_and_loop_modes() -> None:
    code, out = plan(str(VALID / "pipeline.yaml"), "--format", "json")
    data = json.loads(out)
    assert [p["ops"] for p in data["partitions"]] == [["x", "centred", "scaled"], ["w"], ["y", "y2", "total"],
                                                      ["mean"]]
    assert [p["device"] for p in data["partitions"]] == [CPU0, GPU0, GPU0, CPU0]
    code, out = plan(str(ROOT / "examples" / "polyfit.yaml"), "--format", "json")
    assert json.loads(out)["loops"]["train"]["mode"] == "gang"


def test_dot_draws_each_partition_of_several_ops_inside_its_device(tmp_path: Path) -> None:
    target = tmp_path / "plan.dot"
    assert plan(str(VALID / "pipeline.yaml"), "--dot", str(target))[0] == 0
    dot = target.read_text()
    assert 'subgraph "cluster_0_task_0" {' in dot and 'label="task x+2"; style=dashed' in dot
    assert 'label="task y+2"' in dot
    # a partition of one op is its node alone
    assert 'task w"' not in dot and 'task mean"' not in dot
