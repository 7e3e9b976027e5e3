"""Tests of ``orchestrate plan NEW --diff OLD``: what moved, what was added or removed, memory before and after.

Every case starts from a real file of ``examples/`` or ``specs/valid/``: the test copies it to
``tmp_path`` as ``old.yaml`` and writes an edited copy as ``new.yaml`` (each edit must apply exactly
once, so a changed example fails here loudly instead of testing nothing). The CLI runs in-process
from ``tmp_path``, so file names in the output are the short ones a reviewer sees.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import api
from orchestrator.cli import run_cli
from orchestrator.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted([*(ROOT / "examples").glob("*.yaml"), *(ROOT / "specs" / "valid").glob("*.yaml")])

LOCAL = "/job:localhost/replica:0/task:0/device:"
PS0, PS1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
W0, W1 = "/job:worker/replica:0/task:0/device:", "/job:worker/replica:0/task:1/device:"


def edited(tmp_path: Path, source: Path, *edits: tuple[str, str]) -> tuple[str, str]:
    """``old.yaml`` (the real file) and ``new.yaml`` (with each ``(old, new)`` text edit made once)."""
    text = source.read_text(encoding="utf-8")
    (tmp_path / "old.yaml").write_text(text, encoding="utf-8")
    for before, after in edits:
        assert text.count(before) == 1, f"{source.name} no longer has {before!r} once"
        text = text.replace(before, after)
    (tmp_path / "new.yaml").write_text(text, encoding="utf-8")
    return "new.yaml", "old.yaml"


def diff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    code = run_cli(["plan", "new.yaml", "--diff", "old.yaml", *args], out=out)
    return code, out.getvalue()


def diff_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    code, out = diff(tmp_path, monkeypatch, "--format", "json")
    assert code == 0, out
    data: dict[str, Any] = json.loads(out)
    return data


# ------------------------------------------------------------------- text, exact


def test_pinning_one_op_to_another_gpu_moves_it_and_its_transfer(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "examples" / "quickstart.yaml",
           ("{name: d, op: mul, inputs: [towers.c], scalar: 0.5}",
            "{name: d, op: mul, inputs: [towers.c], scalar: 0.5, device: /gpu:1}"))
    code, text = diff(tmp_path, monkeypatch)
    assert code == 0
    assert text == f"""\
plan diff for 'quickstart': old.yaml -> new.yaml
1 op moved, 0 added, 0 removed; 1 transfer added, 1 removed; peak memory unchanged

moved (op: (Type): before -> after  # why, in the new plan):
  d: (Mul): {LOCAL}GPU:0 -> {LOCAL}GPU:1  # job, replica, task from default; device from op

transfers (value from device to device):
  + towers.c from {LOCAL}CPU:0 to {LOCAL}GPU:1 (32 B)
  - towers.c from {LOCAL}CPU:0 to {LOCAL}GPU:0 (32 B)
"""


def test_changing_a_placement_rule_moves_exactly_the_ops_it_decides(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """round_robin over two ps tasks -> all variables on ps task 1: v1, v3, v5 move; v2, v4 were there."""
    edited(tmp_path, ROOT / "specs" / "valid" / "round_robin.yaml",
           ("round_robin: /job:ps", "device: /job:ps/task:1"))
    code, text = diff(tmp_path, monkeypatch)
    assert code == 0
    why = "job, task from rule 1; replica, device from default"
    assert text == f"""\
plan diff for 'round-robin': old.yaml -> new.yaml
3 ops moved, 0 added, 0 removed; 4 transfers added, 4 removed; peak memory changed on 2 devices (1 grew)

moved (op: (Type): before -> after  # why, in the new plan):
  v1: (VariableV2): {PS0} -> {PS1}  # {why}
  v3: (VariableV2): {PS0} -> {PS1}  # {why}
  v5: (VariableV2): {PS0} -> {PS1}  # {why}

transfers (value from device to device):
  + v1 from {PS1} to {W0}GPU:0 (8 B)
  + v1 from {PS1} to {W0}GPU:1 (8 B)
  + v3 from {PS1} to {W0}GPU:1 (8 B)
  + v5 from {PS1} to {W1}GPU:1 (8 B)
  - v1 from {PS0} to {W0}GPU:0 (8 B)
  - v1 from {PS0} to {W0}GPU:1 (8 B)
  - v3 from {PS0} to {W0}GPU:1 (8 B)
  - v5 from {PS0} to {W1}GPU:1 (8 B)

peak memory per device (before -> after, change):
  {PS0}  24 B ->    -  -24 B (no longer used)
  {PS1}  16 B -> 40 B  +24 B
  (3 other devices unchanged)
"""


def test_changing_placement_default_moves_the_ops_whose_task_came_from_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """s and p1 take their task from placement.default and move to task 1; p2's task comes from its scope."""
    edited(tmp_path, ROOT / "specs" / "valid" / "round_robin.yaml",
           ("  default: /job:worker\n", "  default: /job:worker/task:1\n"))
    code, text = diff(tmp_path, monkeypatch)
    assert code == 0
    lines = text.splitlines()
    assert lines[1] == ("2 ops moved, 0 added, 0 removed; 5 transfers added, 5 removed; "
                        "peak memory changed on 4 devices (2 grew)")
    assert lines[3:6] == [
        "moved (op: (Type): before -> after  # why, in the new plan):",
        f"  s: (AddV2): {W0}GPU:0 -> {W1}GPU:0  # job, task from placement.default; replica, device from default",
        f"  p1: (AddN): {W0}GPU:1 -> {W1}GPU:1  # job, task from placement.default; replica from default; "
        "device from scope",
    ]
    assert lines[-6:] == [
        "peak memory per device (before -> after, change):",
        f"  {W0}GPU:0  24 B ->    -  -24 B (no longer used)",
        f"  {W0}GPU:1  32 B ->    -  -32 B (no longer used)",
        f"  {W1}GPU:0     - -> 24 B  +24 B (newly used)",
        # p1 and p2 share GPU:1 and p2 does not wait for p1: v1, v2, v3 may still be there while p2 runs
        f"  {W1}GPU:1  24 B -> 56 B  +32 B",
        "  (2 other devices unchanged)",
    ]


def test_adding_an_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "matmul.yaml",
           ("  - {name: c, op: matmul, inputs: [a, b]}\n",
            "  - {name: c, op: matmul, inputs: [a, b]}\n  - {name: d, op: matmul, inputs: [c, c], device: /cpu:0}\n"))
    code, text = diff(tmp_path, monkeypatch)
    assert code == 0
    assert text == f"""\
plan diff for 'matmul': old.yaml -> new.yaml
0 ops moved, 1 added, 0 removed; 1 transfer added, 0 removed; peak memory unchanged

added (op: (Type): device  # why):
  d: (MatMul): {LOCAL}CPU:0  # job, replica, task from default; device from op

transfers (value from device to device):
  + c from {LOCAL}GPU:0 to {LOCAL}CPU:0 (32 B)
"""


def test_removing_an_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "pipeline.yaml",
           ("  - {name: scaled, op: mul, inputs: [centred], scalar: 2.0, device: /cpu:0}\n", ""),
           ("inputs: [scaled, w]", "inputs: [centred, w]"))
    code, text = diff(tmp_path, monkeypatch)
    assert code == 0
    assert text == f"""\
plan diff for 'pipeline': old.yaml -> new.yaml
0 ops moved, 0 added, 1 removed; 1 transfer added, 1 removed; peak memory unchanged

removed (op: (Type): device it had):
  scaled: (Mul): {LOCAL}CPU:0

transfers (value from device to device):
  + centred from {LOCAL}CPU:0 to {LOCAL}GPU:0 (8.0 KiB)
  - scaled from {LOCAL}CPU:0 to {LOCAL}GPU:0 (8.0 KiB)
"""


def test_raising_a_shape_grows_memory_and_fail_on_memory_exits_1(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """x: [64, 32] -> [128, 32] float64, 16 KiB -> 32 KiB: ps CPU:0 makes it, worker GPU:0 receives it."""
    edited(tmp_path, ROOT / "specs" / "valid" / "pin_across_jobs.yaml", ("shape: [64, 32]", "shape: [128, 32]"))
    expected = f"""\
plan diff for 'across-jobs': old.yaml -> new.yaml
0 ops moved, 0 added, 0 removed; 0 transfers added, 0 removed; peak memory changed on 2 devices (2 grew)

peak memory per device (before -> after, change):
  {PS0}      18.0 KiB -> 34.0 KiB  +16.0 KiB
  {W0}GPU:0  22.0 KiB -> 42.0 KiB  +20.0 KiB
"""
    assert diff(tmp_path, monkeypatch) == (0, expected)
    assert diff(tmp_path, monkeypatch, "--fail-on", "memory") == (1, expected)
    assert diff(tmp_path, monkeypatch, "--fail-on", "moved")[0] == 0  # nothing moved


# ------------------------------------------------------------------- every example and seed spec


@pytest.mark.parametrize("source", SPECS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_spec_against_itself_has_no_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    edited(tmp_path, source)
    code, text = diff(tmp_path, monkeypatch, "--fail-on", "moved,memory")
    name = api.plan_file(source).spec.name
    assert (code, text) == (0, f"plan diff for '{name}': old.yaml -> new.yaml\nno changes: the same ops on the "
                               "same devices, the same transfers, the same peak memory\n")


@pytest.mark.parametrize("source", SPECS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_added_op_is_the_only_change_and_grows_only_its_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  source: Path) -> None:
    """An 8 MB zeros op on /cpu:0 first in the graph (more than any of these specs holds on a CPU): listed
    as added, nothing else moves, and the only memory change is growth on the device it landed on."""
    edited(tmp_path, source,
           ("\ngraph:\n", "\ngraph:\n  - {name: zz_added, op: zeros, shape: [1000000], device: /cpu:0}\n"))
    data = diff_json(tmp_path, monkeypatch)
    (added,) = data["added"]
    assert (added["name"], added["op"], added["file"]) == ("zz_added", "zeros", "new.yaml")
    assert added["device"].endswith("/device:CPU:0")
    assert (data["moved"], data["removed"], data["transfers_added"], data["transfers_removed"]) == ([], [], [], [])
    changed = [m for m in data["memory"] if m["changed"]]
    assert [m["device"] for m in changed] == [added["device"]]
    assert changed[0]["delta_bytes"] > 0 and changed[0]["after_bytes"] >= 8_000_000


# ------------------------------------------------------------------- json and github


def test_json_lists_moves_transfers_and_every_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "examples" / "quickstart.yaml",
           ("{name: d, op: mul, inputs: [towers.c], scalar: 0.5}",
            "{name: d, op: mul, inputs: [towers.c], scalar: 0.5, device: /gpu:1}"))
    data = diff_json(tmp_path, monkeypatch)
    assert set(data) == {"format", "old", "new", "changed", "summary", "moved", "added", "removed",
                         "transfers_added", "transfers_removed", "memory"}
    assert (data["format"], data["old"], data["new"], data["changed"]) == (
        1, {"file": "old.yaml", "name": "quickstart"}, {"file": "new.yaml", "name": "quickstart"}, True)
    assert data["summary"] == {"moved": 1, "added": 0, "removed": 0, "transfers_added": 1, "transfers_removed": 1,
                               "memory_changed": 0, "memory_grew": 0}
    assert data["moved"] == [{
        "name": "d", "op": "mul", "before": f"{LOCAL}GPU:0", "after": f"{LOCAL}GPU:1",
        "why": "job, replica, task from default; device from op",
        "why_before": "job, replica, task, device from default",
        "file": "new.yaml", "line": 29, "column": 5}]
    assert data["transfers_added"] == [
        {"value": "towers.c", "from": f"{LOCAL}CPU:0", "to": f"{LOCAL}GPU:1", "bytes": 32}]
    assert [(m["device"], m["before_bytes"], m["after_bytes"], m["changed"]) for m in data["memory"]] == [
        (f"{LOCAL}CPU:0", 96, 96, False), (f"{LOCAL}GPU:0", 128, 128, False), (f"{LOCAL}GPU:1", 128, 128, False)]


def test_github_annotates_moved_ops_and_memory_growth_then_summarises(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "round_robin.yaml",
           ("  - {name: v5, op: variable, value: 5.0}   # ps task 0\n",
            "  - {name: v5, op: variable, value: 5.0, device: /job:ps/task:1}\n"))
    code, text = diff(tmp_path, monkeypatch, "--format", "github", "--fail-on", "moved")
    assert code == 1
    assert text == f"""\
::warning file=new.yaml,line=20,col=5,title=op moved%3A v5::v5 (VariableV2) moved from {PS0} to {PS1} \
(job, task from op; replica, device from default)
::notice file=new.yaml,line=18,col=5,title=peak memory changed::peak memory of {PS0}: 24 B -> 16 B (-8 B); \
the op at the peak is 'v3'
::warning file=new.yaml,line=20,col=5,title=peak memory grew::peak memory of {PS1}: 16 B -> 24 B (+8 B); \
the op at the peak is 'v5'
### Plan diff: `old.yaml` → `new.yaml`

1 op moved, 0 added, 0 removed; 1 transfer added, 1 removed; peak memory changed on 2 devices (1 grew)

| moved op | type | before | after | why (new plan) |
|---|---|---|---|---|
| `v5` | VariableV2 | `{PS0}` | `{PS1}` | job, task from op; replica, device from default |

Transfers:
- added: `v5` `{PS1}` → `{W1}GPU:1`
- removed: `v5` `{PS0}` → `{W1}GPU:1`

| device | peak before | peak after | change |
|---|---:|---:|---:|
| `{PS0}` | 24 B | 16 B | -8 B |
| `{PS1}` | 16 B | 24 B | +8 B |
"""


def test_github_annotates_added_ops_in_the_new_file_and_removed_ones_without_a_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "pipeline.yaml",
           ("  - {name: scaled, op: mul, inputs: [centred], scalar: 2.0, device: /cpu:0}\n",
            "  - {name: doubled, op: mul, inputs: [centred], scalar: 2.0, device: /cpu:0}\n"),
           ("inputs: [scaled, w]", "inputs: [doubled, w]"))
    code, text = diff(tmp_path, monkeypatch, "--format", "github", "--fail-on", "moved", "--fail-on", "memory")
    assert code == 0  # a renamed op is one added and one removed: nothing moved, no peak grew
    annotations = [line for line in text.splitlines() if line.startswith("::")]
    assert annotations == [
        f"::notice file=new.yaml,line=13,col=5,title=op added%3A doubled::doubled (Mul) on {LOCAL}CPU:0 "
        "(job, replica, task from default; device from op)",
        f"::notice title=op removed%3A scaled::scaled (Mul) was on {LOCAL}CPU:0 in old.yaml",
    ]


# ------------------------------------------------------------------- exit codes, usage, invalid specs


def test_fail_on_moved_exits_1_only_when_an_op_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "examples" / "quickstart.yaml",
           ("{name: d, op: mul, inputs: [towers.c], scalar: 0.5}",
            "{name: d, op: mul, inputs: [towers.c], scalar: 0.5, device: /gpu:1}"))
    assert diff(tmp_path, monkeypatch)[0] == 0
    assert diff(tmp_path, monkeypatch, "--fail-on", "moved")[0] == 1
    assert diff(tmp_path, monkeypatch, "--fail-on", "memory,moved")[0] == 1
    assert diff(tmp_path, monkeypatch, "--fail-on", "memory")[0] == 0  # same peaks: the two GPUs swapped work


@pytest.mark.parametrize("args, message", [
    (["--fail-on", "moved"], "orchestrate plan: --fail-on needs --diff OLD or --without DEVICE"),
    (["--format", "github"], "orchestrate plan: --format github needs --diff OLD"),
    (["--diff", "old.yaml", "--format", "dot"], "orchestrate plan: --diff cannot render --format dot "
                                                "(choose from text, json, github)"),
    (["--diff", "old.yaml", "--fail-on", "moved,grown"], "orchestrate plan: --fail-on: unknown condition 'grown' "
                                                         "(choose from memory, moved)"),
])
def test_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                             args: list[str], message: str) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "matmul.yaml")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    assert run_cli(["plan", "new.yaml", *args], out=out) == 2
    assert (out.getvalue(), capsys.readouterr().err) == ("", message + "\n")


def test_an_invalid_spec_prints_its_diagnostics_as_validate_does_and_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "matmul.yaml", ("inputs: [a, b]", "inputs: [a, bb]"))
    assert diff(tmp_path, monkeypatch) == (1, "new.yaml:12:39: graph[2].inputs[1]: input 'bb' of op 'c' is not "
                                              "defined (did you mean 'b'?)\n1 file checked: 1 invalid, 1 error\n")
    for fmt in ("github", "json"):
        code, out = diff(tmp_path, monkeypatch, "--format", fmt, "--fail-on", "moved")
        validate = io.StringIO()
        assert run_cli(["validate", "new.yaml", "--format", fmt], out=validate) == 1
        assert (code, out) == (1, validate.getvalue())


def test_api_diff_files_raises_with_the_errors_of_both_specs(tmp_path: Path) -> None:
    edited(tmp_path, ROOT / "specs" / "valid" / "matmul.yaml", ("inputs: [a, b]", "inputs: [a, bb]"))
    shutil.copy(tmp_path / "new.yaml", tmp_path / "also_bad.yaml")
    with pytest.raises(SpecError) as caught:
        api.diff_files(tmp_path / "new.yaml", tmp_path / "also_bad.yaml")
    assert sorted({d.file for d in caught.value.diagnostics}) == sorted(
        {str(tmp_path / "new.yaml"), str(tmp_path / "also_bad.yaml")})
    assert {d.code for d in caught.value.diagnostics} == {"unknown-input"}
    same = api.diff_files(tmp_path / "old.yaml", tmp_path / "old.yaml")
    assert same.empty and not same.fails({"moved", "memory"})


def test_plan_diff_imports_neither_distributed_nor_user_code(tmp_path: Path) -> None:
    """polyfit calls its own functions (polyfit_fns, importable from the working directory here): the diff
    of two versions of it imports none of them, nor distributed (so no cluster can exist)."""
    edited(tmp_path, ROOT / "examples" / "polyfit.yaml", ("description: data-parallel", "description: a data-parallel"))
    shutil.copy(ROOT / "examples" / "polyfit_fns.py", tmp_path / "polyfit_fns.py")
    probe = ("import io, sys\nfrom orchestrator.cli import run_cli\n"
             "code = run_cli(['plan', 'new.yaml', '--diff', 'old.yaml', '--format', 'github'], out=io.StringIO())\n"
             "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'distributed', 'tornado', 'polyfit_fns'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"
