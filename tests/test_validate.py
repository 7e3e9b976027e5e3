"""Unit tests of validation through the Python API (``orchestrator.api.check_file``).

Real files in ``tmp_path``, the real loader, schema and placer; no mocks.
The corpus of invalid specs and their exact messages is in
``test_invalid_corpus.py``; this module checks what validation *builds*
(expanded names, inferred shapes, sizes) and how it reports (all at once,
did-you-mean, cycles), and that it never runs user code or a cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dask.utils import parse_bytes

from orchestrator.api import Checked, check_file
from orchestrator.errors import Diagnostic
from orchestrator.model import OpRef, Spec, ValueInfo

ROOT = Path(__file__).resolve().parent.parent
ORCHESTRATE = Path(sys.executable).parent / "orchestrate"


def check(tmp_path: Path, text: str, name: str = "spec.yaml") -> Checked:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return check_file(path, name)


def valid_spec(tmp_path: Path, text: str) -> Spec:
    checked = check(tmp_path, text)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None and checked.plan is not None
    return checked.spec


def rendered(checked: Checked) -> list[str]:
    return [d.render() for d in checked.diagnostics]


def only_error(checked: Checked) -> Diagnostic:
    assert len(checked.errors) == 1, rendered(checked)
    return checked.errors[0]


# ------------------------------------------------------------------- expansion names


def test_replicate_names_copies_and_combined_outputs(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2}}}
        graph:
          - {name: a, op: constant, value: [[1, 2, 3], [4, 5, 6]], device: /cpu:0}
          - {name: b, op: constant, value: [[1, 2], [3, 4], [5, 6]], device: /cpu:0}
          - name: towers
            replicate:
              devices: [/gpu:0, /gpu:1]
              body:
                - {name: c, op: matmul, inputs: [a, b]}
              combine: {c: add_n}
              combine_device: /cpu:0
        """)
    names = [op.name for op in spec.ops]
    assert {"towers/0/c", "towers/1/c", "towers.c"} <= set(names)
    # Outer names are shared by every copy (broadcast); the combine reads each copy.
    assert spec.op("towers/1/c").inputs == (OpRef("a"), OpRef("b"))
    assert spec.op("towers.c").inputs == (OpRef("towers/0/c"), OpRef("towers/1/c"))
    assert spec.op("towers.c").kind == "add_n"
    assert names.index("towers.c") > names.index("towers/1/c")  # topological order


def test_replicate_split_gives_each_copy_its_piece(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2}}}
        graph:
          - {name: a, op: ones, shape: [5, 3], device: /cpu:0}
          - {name: b, op: ones, shape: [5, 3], device: /cpu:0}
          - name: par
            replicate:
              devices: /gpu:*
              split: {a: 0, b: 0}
              body:
                - {name: c, op: add, inputs: [a, b]}
              combine: {c: concat}
        """)
    split = spec.op("par/split/a")
    assert (split.kind, split.outputs, split.inputs) == ("split", 2, (OpRef("a"),))
    assert spec.op("par/0/c").inputs == (OpRef("par/split/a", 0), OpRef("par/split/b", 0))
    assert spec.op("par/1/c").inputs == (OpRef("par/split/a", 1), OpRef("par/split/b", 1))
    # Uneven pieces as np.array_split makes them: 3 + 2 rows.
    assert spec.value(OpRef("par/split/a", 0)).shape == (3, 3)
    assert spec.value(OpRef("par/split/a", 1)).shape == (2, 3)
    assert spec.values["par.c"] == (ValueInfo((5, 3), "float64"),)


def test_sweep_names_values_copies_and_the_best(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        graph:
          - {name: x, op: ones, shape: [3]}
          - name: hp
            sweep:
              param: lr
              values: [0.1, 0.01]
              body:
                - {name: loss, op: mul, inputs: [x, lr]}
                - {name: total, op: sum, inputs: [loss]}
              select: {min: total}
        outputs:
          hp.best: "-"
          hp.loss: "-"
        """)
    names = {op.name for op in spec.ops}
    assert {"hp/0/lr", "hp/1/lr", "hp/0/loss", "hp/1/total", "hp.best", "hp.loss"} <= names
    assert spec.op("hp/1/lr").params["value"] == 0.01
    assert spec.op("hp/0/loss").inputs == (OpRef("x"), OpRef("hp/0/lr"))
    assert spec.op("hp.best").inputs == (OpRef("hp/0/total"), OpRef("hp/1/total"))
    # hp.<op> is made only for body ops something uses: hp.total is not.
    assert "hp.total" not in names
    assert spec.values["hp.best"] == (ValueInfo((), "float64"),)


def test_iterate_names_state_body_and_final_state(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        graph:
          - {name: w0, op: zeros, shape: [3]}
          - name: train
            iterate:
              steps: 10
              state: {w: w0}
              body:
                - {name: w_next, op: add, inputs: [w], scalar: 0.1}
                - {name: norm, op: sum, inputs: [w_next]}
              update: {w: w_next}
              metrics: {norm: norm}
        outputs:
          train.w: "-"
        """)
    assert spec.op("train/w").kind == "state"
    assert spec.op("train/w").inputs == (OpRef("w0"),)
    assert spec.op("train/w_next").inputs == (OpRef("train/w"),)
    assert spec.op("train.w").inputs == (OpRef("train/w_next"),)
    assert spec.values["train.norm"] == (ValueInfo((10,), "float64"),)
    (loop,) = spec.loops
    assert (loop.name, loop.steps, loop.body) == ("train", 10, ("train/w", "train/w_next", "train/norm"))
    assert loop.state[0].update == OpRef("train/w_next")


def test_scope_keeps_names_and_adds_its_device(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - scope: /cpu:0
            ops:
              - {name: a, op: ones, shape: [2]}
        """)
    (op,) = spec.ops
    assert op.name == "a"
    assert [str(req.spec) for req in op.device_chain] == ["/device:CPU:0"]


# ------------------------------------------------------------------- shapes and sizes


def test_matmul_shape_and_dtype_are_inferred(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: constant, value: [[1, 2, 3], [4, 5, 6]]}
          - {name: b, op: constant, value: [[1, 2], [3, 4], [5, 6]]}
          - {name: c, op: matmul, inputs: [a, b]}
        """)
    assert spec.values["a"] == (ValueInfo((2, 3), "float64"),)
    assert spec.values["c"] == (ValueInfo((2, 2), "float64"),)
    assert spec.values["c"][0].nbytes == 32


def test_matmul_mismatch_names_both_shapes(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: constant, value: [[1, 2, 3], [4, 5, 6]]}
          - {name: b, op: constant, value: [[1, 2], [3, 4]]}
          - {name: c, op: matmul, inputs: [a, b]}
        """))
    assert error.code == "shape"
    assert "[2, 3]" in error.message and "[2, 2]" in error.message
    assert (error.line, error.path) == (5, ("graph", 2, "inputs"))


@pytest.mark.parametrize("text, expected", [
    ("2GiB", 2 * 2**30),
    ("512MB", 512 * 10**6),
    ("1.5 GB", 1_500_000_000),
    ("1000", 1000),
])
def test_sizes_are_read_as_dask_reads_them(tmp_path: Path, text: str, expected: int) -> None:
    spec = valid_spec(tmp_path, f"""\
        version: 1
        cluster:
          jobs:
            worker: {{memory_limit: "{text}", gpus: 1, gpu_memory: {{limit: "{text}"}}}}
        graph:
          - {{name: a, op: ones, shape: [2], device: /cpu:0}}
        """)
    (job,) = spec.cluster.jobs
    assert job.memory_limit == expected == parse_bytes(text)
    assert job.gpu_memory.limit == expected
    assert spec.cluster.device("/job:worker/replica:0/task:0/device:CPU:0").memory_limit == expected  # type: ignore[union-attr]


def test_an_integer_size_is_bytes(tmp_path: Path) -> None:
    spec = valid_spec(tmp_path, """\
        version: 1
        cluster: {jobs: {worker: {memory_limit: 4096}}}
        graph: [{name: a, op: ones, shape: [2]}]
        """)
    assert spec.cluster.jobs[0].memory_limit == 4096


def test_unreadable_and_non_positive_sizes_are_errors(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        cluster:
          jobs:
            a: {memory_limit: lots}
            b: {memory_limit: -1GiB}
            c: {memory_limit: 0}
        graph: [{name: x, op: ones, shape: [2]}]
        """)
    assert [(d.line, d.code, d.message) for d in checked.errors] == [
        (4, "size", "cannot read 'lots' as a size"),
        (5, "size", "must be a positive size, got '-1GiB'"),
        (6, "size", "must be a positive size, got 0"),
    ]


# ------------------------------------------------------------------- reporting


def test_every_problem_is_reported_in_one_pass(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        cluster:
          jobs:
            worker: {memory_limit: lots}
        graph:
          - {name: a, op: constant, value: [1, 2]}
          - {name: b, op: sqaure, inputs: [a]}
          - {name: c, op: add, inputs: [a, bb]}
        """)
    assert [d.code for d in checked.errors] == ["size", "unknown-op", "unknown-input"]
    assert [d.line for d in checked.errors] == [4, 7, 8]
    assert checked.spec is None and checked.plan is None


def test_schema_problems_are_all_reported_too(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 2
        grpah: []
        cluster: {jobs: {ps: {tasks: two}}}
        """)
    assert sorted(d.code for d in checked.errors) == [
        "schema-const", "schema-required", "schema-type", "schema-unknown-key"]
    unknown = next(d for d in checked.errors if d.code == "schema-unknown-key")
    assert (unknown.line, unknown.column, unknown.hint) == (2, 1, "did you mean 'graph'?")
    tasks = next(d for d in checked.errors if d.code == "schema-type")
    assert tasks.message == "expected an integer or a list, got the string 'two'"


@pytest.mark.parametrize("text, code, hint", [
    ("- {name: c, op: matmull, inputs: [a, b]}", "unknown-op", "did you mean 'matmul'?"),
    ("- {name: c, op: matmul, inputs: [a, bb]}", "unknown-input", "did you mean 'b'?"),
    ("- {name: c, op: matmul, inputs: [a, b], devise: /cpu:0}", "schema-unknown-key", "did you mean 'device'?"),
    ("- {name: c, op: matmul, inputs: [a, b], device: /job:wroker}", "device-job", "did you mean 'worker'?"),
    ("- {name: c, op: matmul, inputs: [a, b], after: [aa]}", "unknown-after", "did you mean 'a'?"),
])
def test_did_you_mean(tmp_path: Path, text: str, code: str, hint: str) -> None:
    error = only_error(check(tmp_path, f"""\
        version: 1
        cluster: {{jobs: {{worker: {{}}}}}}
        graph:
          - {{name: a, op: ones, shape: [2, 2]}}
          - {{name: b, op: ones, shape: [2, 2]}}
          {text}
        """))
    assert (error.code, error.hint) == (code, hint)
    assert error.line == 6


def test_did_you_mean_inside_a_body_suggests_the_local_name(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2}}}
        graph:
          - {name: a, op: ones, shape: [2, 2]}
          - name: towers
            replicate:
              devices: [/gpu:0, /gpu:1]
              body:
                - {name: c, op: square, inputs: [a]}
                - {name: d, op: square, inputs: [cc]}
        """))
    # Reported once (not per copy), by the name the user wrote.
    assert error.message == "input 'cc' of op 'd' in 'towers' is not defined"
    assert error.hint == "did you mean 'c'?"
    assert error.path == ("graph", 1, "replicate", "body", 1, "inputs", 0)


@pytest.mark.parametrize("graph, cycle, line", [
    (["{name: a, op: add, inputs: [b], scalar: 1}", "{name: b, op: mul, inputs: [a], scalar: 2}"],
     "a -> b -> a", 3),
    (["{name: x, op: ones, shape: [2]}", "{name: a, op: add, inputs: [x, c]}",
      "{name: b, op: square, inputs: [a]}", "{name: c, op: square, inputs: [b]}"],
     "a -> b -> c -> a", 4),
    (["{name: a, op: square, inputs: [a]}"], "a -> a", 3),
    (["{name: a, op: ones, shape: [2], after: [b]}", "{name: b, op: square, inputs: [a]}"],
     "a -> b -> a", 3),
])
def test_cycles_are_shown_as_a_path(tmp_path: Path, graph: list[str], cycle: str, line: int) -> None:
    items = "\n".join(f"  - {item}" for item in graph)
    error = only_error(check(tmp_path, f"version: 1\ngraph:\n{items}\n"))
    assert error.code == "cycle"
    assert error.message == f"the graph has a cycle: {cycle}"
    assert error.line == line


def test_a_duplicate_name_is_reported_once_and_makes_no_false_cycle(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, """\
        version: 1
        graph:
          - {name: x, op: constant, value: [1, 2]}
          - scope: /cpu:0
            ops:
              - {name: y, op: square, inputs: [x]}
              - {name: x, op: mul, inputs: [y], scalar: 2}
        """))
    assert error.code == "duplicate-name"
    assert error.message == "duplicate op name 'x' (first defined on line 3)"


def test_warnings_do_not_stop_the_plan(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        placement:
          rules:
            - {match: {name: "load_*"}, device: /cpu:0}
        graph: [{name: a, op: ones, shape: [2]}]
        """)
    assert not checked.errors
    assert [d.code for d in checked.warnings] == ["rule-unused"]
    assert checked.ok() and not checked.ok(strict=True)
    assert checked.plan is not None


# ------------------------------------------------------------------- no user code, no cluster


EVIL_MODULE = """\
# If this module is ever imported, validation ran user code: leave a trace.
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("imported")


def boom(x, xp):
    return x
"""

CALL_SPEC = """\
version: 1
graph:
  - {name: x, op: ones, shape: [2]}
  - {name: y, op: call, fn: "evil_mod_xyz:boom", inputs: [x], output: {shape: [2], dtype: float64}}
outputs:
  y: "-"
"""


@pytest.fixture
def evil_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spec whose call op names a module that would be importable (it is on sys.path and PYTHONPATH)."""
    (tmp_path / "evil_mod_xyz.py").write_text(EVIL_MODULE, encoding="utf-8")
    (tmp_path / "spec.yaml").write_text(CALL_SPEC, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("evil_mod_xyz", None)
    return tmp_path


def test_check_file_never_imports_user_code(evil_dir: Path) -> None:
    checked = check_file(evil_dir / "spec.yaml")
    assert not checked.errors, rendered(checked)
    assert checked.plan is not None
    assert "evil_mod_xyz" not in sys.modules
    assert not (evil_dir / "IMPORTED").exists()


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_the_cli_never_imports_user_code(evil_dir: Path, command: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(evil_dir)}
    done = subprocess.run([str(ORCHESTRATE), command, "spec.yaml"], cwd=evil_dir, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (evil_dir / "IMPORTED").exists()


PROBE = """\
import io, json, sys
from orchestrator.api import check_file
from orchestrator.cli import run_cli

checked = check_file("spec.yaml")
assert checked.plan is not None and not checked.errors, [d.render() for d in checked.diagnostics]
codes = [run_cli([command, "spec.yaml"], out=io.StringIO()) for command in ("validate", "plan")]
watched = ("distributed", "tornado", "cupy", "evil_mod_xyz")
print(json.dumps({"codes": codes,
                  "imported": sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in watched})}))
"""


def test_validate_and_plan_import_neither_distributed_nor_user_code(evil_dir: Path) -> None:
    # A fresh interpreter: this test process may have imported distributed for other tests.
    # Without distributed imported, no cluster (LocalCluster, SpecCluster, Nanny) can exist.
    env = {**os.environ, "PYTHONPATH": str(evil_dir)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=evil_dir, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"codes": [0, 0], "imported": []}
    assert not (evil_dir / "IMPORTED").exists()
