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
from orchestrator.ops.values import ValueInfo
from orchestrator.spec.records import OpRef, Spec

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


# ------------------------------------------------------------------- output indexes


SPLIT = """\
version: 1
graph:
  - {name: x, op: ones, shape: [8]}
  - {name: parts, op: split, inputs: [x], num: 4}
  - {name: one, op: square, inputs: [x]}
"""


@pytest.mark.parametrize("ref, message, hint", [
    ("parts:-1", "input 'parts:-1' of op 'y': output index -1 of op 'parts' is not valid; it has 4 outputs",
     "use parts:0 .. parts:3"),
    ("parts:-0", "input 'parts:-0' of op 'y': output index -0 of op 'parts' is not valid; it has 4 outputs",
     "use parts:0 .. parts:3"),
    ("parts:last", "input 'parts:last' of op 'y': output index 'last' of op 'parts' is not valid; it has 4 outputs",
     "use parts:0 .. parts:3"),
    ("parts:", "input 'parts:' of op 'y' names no output index after ':'", "use parts:0 .. parts:3"),
    ("parts: 1", "input 'parts: 1' of op 'y': output index ' 1' of op 'parts' is not valid; it has 4 outputs",
     "use parts:0 .. parts:3"),
    ("one:-1", "input 'one:-1' of op 'y': output index -1 of op 'one' is not valid; it has 1 output", "use one"),
    # still what they were: a name that is not there, an index past the end
    ("prats:-1", "input 'prats:-1' of op 'y' is not defined", "did you mean 'parts'?"),
    ("parts:4", "input 'parts:4' of op 'y': op 'parts' has 4 outputs", "use parts:0 .. parts:3"),
])
def test_an_output_index_that_is_not_one_is_a_bad_index(tmp_path: Path, ref: str, message: str, hint: str) -> None:
    """OpRef.parse reads only NAME:<digits> as an index: 'parts:-1' was once reported as an undefined op."""
    error = only_error(check(tmp_path, SPLIT + f'  - {{name: y, op: identity, inputs: ["{ref}"]}}\n'))
    assert (error.message, error.hint) == (message, hint)
    assert (error.line, error.path) == (6, ("graph", 3, "inputs", 0))


def test_a_bad_output_index_in_outputs_and_in_an_update(tmp_path: Path) -> None:
    checked = check(tmp_path, SPLIT + """\
  - name: train
    iterate:
      steps: 2
      state: {w: x}
      body:
        - {name: halves, op: split, inputs: [w], num: 2}
        - {name: next, op: concat, inputs: ["halves:1", "halves:0"]}
      update: {w: "next:-1"}
outputs:
  parts:-1: last.npy
""")
    assert sorted(rendered(checked)) == [
        "spec.yaml:13:19: graph[3].iterate.update.w: the update 'next:-1' of state 'w' in 'train': output index -1 "
        "of op 'next' is not valid; it has 1 output (use next)",
        "spec.yaml:15:3: outputs.parts:-1: op 'parts:-1' named in outputs: output index -1 of op 'parts' is not "
        "valid; it has 4 outputs (use parts:0 .. parts:3)",
    ]


# ------------------------------------------------------------------- keys YAML 1.1 reads as booleans


BOOL_HINT = "YAML 1.1 reads yes/no, on/off and true/false as booleans"


@pytest.mark.parametrize("text, where, message", [
    # unknown keys (the schema's check)
    ("graph:\n  - {name: a, op: ones, shape: [2], on: /cpu:0}", "3:37: graph[0].on",
     "unknown key 'on', which YAML reads as the boolean true"),
    ("on: push\ngraph:\n  - {name: a, op: ones, shape: [2]}", "2:1: on",
     "unknown key 'on', which YAML reads as the boolean true"),
    ("cluster: {jobs: {worker: {gpus: 1, gpu_memory: {Off: 1}}}}\ngraph:\n  - {name: a, op: ones, shape: [2]}",
     "2:49: cluster.jobs.worker.gpu_memory.Off", "unknown key 'Off', which YAML reads as the boolean false"),
    ("placement:\n  rules:\n    - {match: {op: ones}, device: /cpu:0, YES: 1}\ngraph:\n  - {name: a, op: ones, shape: [2]}",
     "4:43: placement.rules[0].YES", "unknown key 'YES', which YAML reads as the boolean true"),
    # keys that are names (names.py)
    ("graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: call, fn: 'm:f', inputs: [a], params: {no: 3}}",
     "4:58: graph[1].params.no", "key 'no' is read as the boolean false; names are text"),
    ("graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: call, fn: 'm:f', inputs: {on: a}}",
     "4:45: graph[1].inputs.on", "key 'on' is read as the boolean true; names are text"),
    ("cluster: {jobs: {yes: {gpus: 1}}}\ngraph:\n  - {name: a, op: ones, shape: [2]}",
     "2:18: cluster.jobs.yes", "key 'yes' is read as the boolean true; names are text"),
])
def test_a_key_yaml_reads_as_a_boolean_is_named_as_written_with_a_quote_hint(tmp_path: Path, text: str, where: str,
                                                                            message: str) -> None:
    """``on:`` is the boolean true to YAML 1.1: "unknown key 'True'" once said nothing about why."""
    error = only_error(check(tmp_path, f"version: 1\n{text}\n"))
    written_key = where.rsplit(".", 1)[-1].split(": ")[-1]
    assert error.render() == f"spec.yaml:{where}: {message} (quote it to make it text: '{written_key}'; {BOOL_HINT})"


def test_y_and_n_are_text_keys(tmp_path: Path) -> None:
    """PyYAML reads only yes/no, on/off, true/false as booleans (not YAML 1.1's y and n): no quote hint."""
    error = only_error(check(tmp_path, "version: 1\ngraph:\n  - {name: a, op: ones, shape: [2], y: 1}\n"))
    assert error.message == "unknown key 'y'"


# ------------------------------------------------------------------- every error has a hint


@pytest.mark.parametrize("text", [
    "outputs: {c: 100}",                                       # a number where a path is expected
    "outputs: {c: false}",
    "outputs: [c]",
    "run: {timeout: 30s}",
    "run: {retries: -1}",
    "run: {no_workers_timeout: 0}",
    "cluster: {jobs: {localhost: {cpu_threads: null}}}",
    "cluster: {jobs: {localhost: {tasks: []}}}",
    "cluster: {jobs: {localhost: {tasks: ['']}}}",
    "cluster: true",
    "cluster: {dashboard: 8787}",
    "cluster: {tls: {ca_file: ca.pem}}",
    "cluster: {jobs: {localhost: {visible_gpus: [0, 0]}}}",
    "placement: {rules: [split]}",
    "placement: {rules: [{match: {}, device: /cpu:0}]}",
    "placement: {rules: [{match: {op: []}, device: /cpu:0}]}",
    "placement: {soft: 1}",
    "graph:\n  - false",
    "graph:\n  - {name: '', op: ones, shape: [2]}",
    "graph:\n  - {name: 0.5, op: ones, shape: [2]}",
    "graph:\n  - {name: a, op: ones, shape: [2], header: [1]}",
    "graph:\n  - {name: a, op: ones, shape: [2], dtype: float}",
    "graph:\n  - {name: a, op: ones, shape: [2], axes: {a: 1}}",
    "graph:\n  - {name: a, op: ones, shape: [2], kernels: []}",
    "graph:\n  - {name: a, op: ones, shape: [2], seed: -1}",
    "graph:\n  - {name: a, op: ones, shape: [2], high: {}}",
    "graph:\n  - {name: a, op: ones, shape: [2], tags: heavy}",
    "graph:\n  - {name: a, op: ones, shape: [2], output: {dtype: float32}}",
    "graph:\n  - {name: a, op: ones, shape: [2], inputs: ['']}",
    "graph:\n  - {name: a, op: fill, shape: [2], value: 1, inputs: [a]}",
    "graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: square, inputs: [a, a]}",
    "graph:\n  - {scope: /cpu:0}",
    "graph:\n  - {scope: /cpu:0, ops: null}",
    "graph:\n  - {name: t, iterate: {steps: 1, state: {}, body: [], update: {}}}",
    "graph:\n  - {name: s, sweep: {param: p, values: [], body: [{name: a, op: ones, shape: [2]}], "
    "select: {min: a, max: a}}}",
    "graph:\n  - {name: r, replicate: {devices: [], body: [{name: a, op: ones, shape: [2]}], "
    "combine: {a: sum}}}",
    "graph:\n  - {name: r, replicate: {body: [{name: a, op: ones, shape: [2]}]}}",
])
def test_every_error_has_a_hint(tmp_path: Path, text: str) -> None:
    """A message says what is wrong, the hint what to write: none of these once had one, or crashed."""
    if not text.startswith("graph"):
        text += "\ngraph:\n  - {name: a, op: ones, shape: [2]}"
    checked = check(tmp_path, f"version: 1\n{text}\n")
    assert checked.errors, rendered(checked)
    assert all(d.hint.strip() for d in checked.errors), rendered(checked)
    assert not any("another kind of value" in d.message for d in checked.errors), rendered(checked)


def test_a_number_where_text_is_expected_says_to_quote_it_as_written(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, "version: 1\ngraph:\n  - {name: 1e3, op: ones, shape: [2]}\n"))
    assert error.render() == ("spec.yaml:3:12: graph[0].name: expected a string, got the number 1000.0 "
                              "(quote it to make it text: '1e3')")


def test_an_empty_value_says_it_is_null(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, "version: 1\ngraph:\n  - {name: , op: ones, shape: [2]}\n"))
    assert error.render() == ("spec.yaml:3:12: graph[0].name: expected a string, got null "
                              "(give it a value: an empty value is null)")


def test_an_input_with_a_space_after_the_colon(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, SPLIT + "  - {name: y, op: square, inputs: [parts: 1]}\n"))
    assert error.hint == "write 'parts:1' with no space after ':', or quote it; ': ' makes a mapping"


def test_a_quoted_version(tmp_path: Path) -> None:
    error = only_error(check(tmp_path, "version: '1'\ngraph:\n  - {name: a, op: ones, shape: [2]}\n"))
    assert error.render() == "spec.yaml:1:10: version: must be 1, not '1' (write 1 without quotes: quoted, it is text)"


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
