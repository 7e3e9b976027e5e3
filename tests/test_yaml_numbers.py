"""Numbers in specs: YAML 1.2 floats, strict integers, and no infinite or NaN durations or sizes.

PyYAML follows YAML 1.1, where ``1e-3``, ``1e5`` and ``-2E4`` (no dot, or no
sign in the exponent) are strings: ``scalar: 1e-3`` was refused as text and
``params: {lr: 1e-3}`` handed user code the string ``'1e-3'``. The loader reads
them as YAML 1.2 does, with libyaml's loader and the pure-Python one alike.

Counts and dimensions are integers: ``2.0`` or ``1e3`` there used to pass the
schema (JSON Schema calls 2.0 an integer) and fail at run time inside NumPy.
``.inf`` and ``.nan`` where a duration or a size is expected are errors
(an infinite timeout silently meant none); as values of a constant they stay.
"""

from __future__ import annotations

import importlib
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from orchestrator.spec import load
from orchestrator.api import Checked, check_file
from orchestrator.spec.records import Document

spec_schema = importlib.import_module("orchestrator.spec.validate.schema")  # the package exports a function schema
LOADERS = [load.SpecLoader, load._loader_class(yaml.SafeLoader)]


@pytest.fixture(params=LOADERS, ids=["default", "pure-python"])
def loader_class(request: pytest.FixtureRequest) -> type:
    return request.param


def parse(text: str, loader_class: type) -> Document:
    return load._load_text_with(textwrap.dedent(text), "spec.yaml", ".", loader_class)


def check(tmp_path: Path, text: str) -> Checked:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return check_file(path, "spec.yaml")


def rendered(checked: Checked) -> list[str]:
    return [d.render() for d in checked.diagnostics]


def only_error(checked: Checked) -> str:
    assert len(checked.errors) == 1, rendered(checked)
    return checked.errors[0].render()


# ------------------------------------------------------------------- the loader


@pytest.mark.parametrize("text, value", [
    ("1e-3", 0.001), ("1e5", 100000.0), ("-2E4", -20000.0), ("+1e3", 1000.0), ("1.0e3", 1000.0),
    ("1.e3", 1000.0), (".5e1", 5.0), ("-.5", -0.5), ("+.5", 0.5), ("1E+2", 100.0),
    # forms YAML 1.1 read as floats already
    ("1.5", 1.5), ("-1.5e-3", -0.0015), (".5", 0.5),
])
def test_yaml_12_floats_are_floats(text: str, value: float, loader_class: type) -> None:
    data = parse(f"x: {text}\nin_a_list: [{text}]\n{text}: key\n", loader_class).data
    assert type(data["x"]) is float and data["x"] == value
    assert data["in_a_list"] == [value]
    assert data[value] == "key"


@pytest.mark.parametrize("text, value", [("1", 1), ("-2", -2), ("0", 0), ("0x1f", 31), ("1_000", 1000),
                                         ("123456789012345678901234567890", 123456789012345678901234567890)])
def test_integers_stay_integers(text: str, value: int, loader_class: type) -> None:
    data = parse(f"x: {text}\n", loader_class).data
    assert type(data["x"]) is int and data["x"] == value


@pytest.mark.parametrize("text, value", [("'1e3'", "1e3"), ('"1e-3"', "1e-3"), ("1e", "1e"), ("e5", "e5"),
                                         ("1.2.3", "1.2.3"), ("1e3x", "1e3x"), ("1e-", "1e-"),
                                         ("09", "09"), ("1e 3", "1e 3")])
def test_text_stays_text(text: str, value: str, loader_class: type) -> None:
    assert parse(f"x: {text}\n", loader_class).data == {"x": value}


def test_inf_and_nan_stay_floats_and_a_huge_exponent_is_infinite(loader_class: type) -> None:
    data = parse("a: .inf\nb: -.inf\nc: .nan\nd: 1e400\ne: -1e400\n", loader_class).data
    assert data["a"] == data["d"] == math.inf and data["b"] == data["e"] == -math.inf and math.isnan(data["c"])


def test_pyyamls_own_loaders_are_left_alone() -> None:
    """The YAML 1.2 floats are added to the spec loader's class only, never to PyYAML's shared ones."""
    assert yaml.safe_load("x: 1e3") == {"x": "1e3"}
    assert yaml.load("x: 1e3", Loader=load.LOADER_BASE) == {"x": "1e3"}


def test_floats_are_read_everywhere_in_a_spec(loader_class: type) -> None:
    data = parse("""\
        version: 1
        cluster: {jobs: {worker: {memory_limit: 2e9}}}
        graph:
          - {name: a, op: constant, value: [1e-3, -2E4, 1e5]}
          - {name: b, op: mul, inputs: [a], scalar: 1e-3}
          - {name: c, op: call, fn: "m:f", inputs: [b], params: {lr: 1e-3, decay: {rate: 5e-1}, steps: 10}}
          - name: hp
            sweep: {param: lam, values: [1e-3, 1e-2], body: [{name: y, op: mul, inputs: [a, lam]}]}
        """, loader_class).data
    graph = data["graph"]
    assert data["cluster"]["jobs"]["worker"]["memory_limit"] == 2e9
    assert graph[0]["value"] == [0.001, -20000.0, 100000.0]
    assert graph[1]["scalar"] == 0.001
    assert graph[2]["params"] == {"lr": 0.001, "decay": {"rate": 0.5}, "steps": 10}
    assert type(graph[2]["params"]["steps"]) is int
    assert graph[3]["sweep"]["values"] == [0.001, 0.01]


# ------------------------------------------------------------------- valid specs with exponents


def test_a_scalar_written_with_an_exponent_is_valid(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
          - {name: b, op: mul, inputs: [a], scalar: 1e-3}
          - {name: c, op: call, fn: "m:f", inputs: [b], params: {lr: 1e-3}}
        """)
    assert not checked.errors, rendered(checked)
    assert checked.spec is not None
    ops = {op.name: op for op in checked.spec.ops}
    assert ops["b"].params["scalar"] == 0.001
    assert ops["c"].params["params"] == {"lr": 0.001}
    assert checked.spec.values["b"][0].dtype == "float64"


def test_sweep_values_with_exponents_are_numbers(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
          - name: hp
            sweep: {param: lam, values: [1e-3, 1e-2], body: [{name: y, op: mul, inputs: [a, lam]}]}
        """)
    assert not checked.errors, rendered(checked)
    assert checked.spec is not None
    lams = [op.params.get("value") for op in checked.spec.ops if op.name.endswith("/lam")]
    assert lams == [0.001, 0.01]


@pytest.mark.parametrize("size, expected", [("2e9", 2_000_000_000), ("1.5e9", 1_500_000_000), ("1024", 1024),
                                            ("1e6", 1_000_000), ("'1e9'", 1_000_000_000)])
def test_sizes_may_be_whole_numbers_in_any_notation(tmp_path: Path, size: str, expected: int) -> None:
    checked = check(tmp_path, f"""\
        version: 1
        cluster: {{jobs: {{localhost: {{memory_limit: {size}}}}}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """)
    assert not checked.errors, rendered(checked)
    assert checked.spec is not None
    assert checked.spec.cluster.jobs[0].memory_limit == expected


def test_a_size_that_is_not_a_whole_number_of_bytes_is_an_error(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {memory_limit: 1.5}}}
        graph:
          - {name: a, op: ones, shape: [2]}
        """)
    assert only_error(checked) == ("spec.yaml:2:44: cluster.jobs.localhost.memory_limit: 1.5 is not a whole number "
                                   "of bytes (write e.g. 512MB, 2GiB or a number of bytes)")


def test_inf_and_nan_as_values_are_left_alone(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: constant, value: [.inf, -.inf, .nan, 1e400]}
          - {name: b, op: add, inputs: [a], scalar: .nan}
        """)
    assert not checked.errors, rendered(checked)


# ------------------------------------------------------------------- integers


@pytest.mark.parametrize("where, text, line", [
    ("cluster.jobs.localhost.tasks", "cluster: {jobs: {localhost: {tasks: 2.0}}}", 2),
    ("cluster.jobs.localhost.gpus", "cluster: {jobs: {localhost: {gpus: 1e0}}}", 2),
    ("graph[1].shape[0]", "graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: zeros, shape: [1e3]}", 4),
    ("graph[1].num", "graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: split, inputs: [a], num: 2.0}", 4),
    ("graph[1].axis", "graph:\n  - {name: a, op: ones, shape: [2]}\n  - {name: b, op: sum, inputs: [a], axis: 0.0}", 4),
    ("graph[1].iterate.steps", "graph:\n  - {name: a, op: ones, shape: [2]}\n  - name: t\n    iterate: {steps: 1e2, "
     "state: {w: a}, body: [{name: n, op: add, inputs: [w], scalar: 1}], update: {w: n}}", 5),
])
def test_a_float_where_an_integer_is_expected_is_an_error(tmp_path: Path, where: str, text: str, line: int) -> None:
    """JSON Schema calls 2.0 an integer; range() and NumPy do not: these once failed only at run time."""
    if not text.startswith("graph"):
        text += "\ngraph:\n  - {name: a, op: ones, shape: [2]}"
    path = tmp_path / "spec.yaml"
    path.write_text("version: 1\n" + text + "\n", encoding="utf-8")
    checked = check_file(path, "spec.yaml")
    assert len(checked.errors) == 1, rendered(checked)
    error = checked.errors[0]
    assert (error.code, error.line) == ("schema-type", line)
    assert error.render().startswith(f"spec.yaml:{line}:"), error.render()
    assert f": {where}: expected an integer" in error.render()
    assert "a number with a decimal point or an exponent is a float in YAML" in error.hint


def test_a_dimension_written_with_an_exponent_says_which_integer_to_write(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        graph:
          - {name: x, op: zeros, shape: [1e3, 10]}
        """)
    assert only_error(checked) == ("spec.yaml:3:34: graph[0].shape[0]: expected an integer or an expression in quotes, "
                                   "got the number 1000.0 "
                                   "(write 1000: a number with a decimal point or an exponent is a float in YAML)")


def test_the_fast_schema_check_reads_integers_strictly_too() -> None:
    """fastjsonschema accepts 2.0 as an integer; the compiled validators here must not (never a false yes)."""
    top, kinds = spec_schema._fast_validators()
    assert callable(top) and all(callable(v) for v in kinds.values())
    good = {"version": 1, "graph": [{"name": "a", "op": "ones", "shape": [2]}]}
    assert spec_schema._fast_valid(good)
    assert not spec_schema._fast_valid({"version": 1, "graph": [{"name": "a", "op": "ones", "shape": [2.0]}]})
    assert not spec_schema._fast_valid({**good, "cluster": {"jobs": {"w": {"tasks": 2.0}}}})
    assert spec_schema._fast_valid({**good, "cluster": {"jobs": {"w": {"tasks": 2, "memory_limit": 2e9}}}})


# ------------------------------------------------------------------- infinite and NaN durations and sizes


SECONDS_HINT = "e.g. timeout: 600; leave timeout out for no time limit"


@pytest.mark.parametrize("run, op, where, message, hint", [
    ("{timeout: .inf}", "", "2:16: run.timeout", "must be a finite number of seconds, got .inf", SECONDS_HINT),
    ("{timeout: .nan}", "", "2:16: run.timeout", "must be a finite number of seconds, got .nan", SECONDS_HINT),
    ("{timeout: -.inf}", "", "2:16: run.timeout", "must be a finite number of seconds, got -.inf", SECONDS_HINT),
    ("{no_workers_timeout: .inf}", "", "2:27: run.no_workers_timeout", "must be a finite number of seconds, got .inf",
     "e.g. no_workers_timeout: 30; leave it out for the default of 5 seconds"),
    ("{no_workers_timeout: .NaN}", "", "2:27: run.no_workers_timeout",
     "must be a finite number of seconds, got .nan",
     "e.g. no_workers_timeout: 30; leave it out for the default of 5 seconds"),
    ("{}", ", timeout: .inf", "4:46: graph[0].timeout", "must be a finite number of seconds, got .inf", SECONDS_HINT),
    ("{}", ", timeout: .nan", "4:46: graph[0].timeout", "must be a finite number of seconds, got .nan", SECONDS_HINT),
    ("{}", ", timeout: -.Inf", "4:46: graph[0].timeout", "must be a finite number of seconds, got -.inf",
     SECONDS_HINT),
])
def test_an_infinite_or_nan_timeout_is_an_error(tmp_path: Path, run: str, op: str, where: str, message: str,
                                                hint: str) -> None:
    checked = check(tmp_path, f"""\
        version: 1
        run: {run}
        graph:
          - {{name: a, op: ones, shape: [2]{op}}}
        """)
    assert only_error(checked) == f"spec.yaml:{where}: {message} ({hint})"


def test_an_infinite_timeout_inside_a_construct_is_reported_once(tmp_path: Path) -> None:
    checked = check(tmp_path, """\
        version: 1
        cluster: {jobs: {localhost: {gpus: 2}}}
        graph:
          - {name: x, op: ones, shape: [4]}
          - name: towers
            replicate:
              devices: [/gpu:0, /gpu:1]
              body:
                - {name: y, op: square, inputs: [x], timeout: .inf}
        """)
    assert only_error(checked) == (f"spec.yaml:9:55: graph[1].replicate.body[0].timeout: must be a finite number "
                                   f"of seconds, got .inf ({SECONDS_HINT})")


@pytest.mark.parametrize("job, where, message, hint", [
    ("{memory_limit: .inf}", "2:44: cluster.jobs.localhost.memory_limit", "must be a finite size, got .inf",
     "e.g. 2GiB; leave memory_limit out for no limit"),
    ("{memory_limit: .nan}", "2:44: cluster.jobs.localhost.memory_limit", "must be a finite size, got .nan",
     "e.g. 2GiB; leave memory_limit out for no limit"),
    ("{memory_limit: -.inf}", "2:44: cluster.jobs.localhost.memory_limit", "must be a finite size, got -.inf",
     "e.g. 2GiB; leave memory_limit out for no limit"),
    ("{memory_limit: 1e400}", "2:44: cluster.jobs.localhost.memory_limit", "must be a finite size, got .inf",
     "e.g. 2GiB; leave memory_limit out for no limit"),
    ("{gpus: 1, gpu_memory: {limit: .inf}}", "2:59: cluster.jobs.localhost.gpu_memory.limit",
     "must be a finite size, got .inf", "e.g. 2GiB; leave limit out for no limit"),
    ("{gpus: 1, gpu_memory: {total: .nan}}", "2:59: cluster.jobs.localhost.gpu_memory.total",
     "must be a finite size, got .nan", "e.g. 16GiB"),
])
def test_an_infinite_or_nan_size_is_an_error(tmp_path: Path, job: str, where: str, message: str, hint: str) -> None:
    checked = check(tmp_path, f"""\
        version: 1
        cluster: {{jobs: {{localhost: {job}}}}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
        """)
    assert only_error(checked) == f"spec.yaml:{where}: {message} ({hint})"


# ------------------------------------------------------------------- at run time


FNS = """\
def scale(x, *, xp, lr, steps):
    assert type(lr) is float and type(steps) is int, (type(lr), type(steps))
    return x * lr * steps
"""


@pytest.mark.cluster
def test_call_params_with_exponents_reach_user_code_as_floats(tmp_path: Path) -> None:
    from orchestrator import run_file

    (tmp_path / "numfns_1e.py").write_text(FNS, encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        graph:
          - {name: x, op: ones, shape: [3]}
          - {name: y, op: call, fn: "numfns_1e:scale", inputs: [x], params: {lr: 1e-3, steps: 2}}
          - {name: z, op: mul, inputs: [y], scalar: 1e3}
        outputs: {y: y.npy, z: z.npy}
        """), encoding="utf-8")
    result = run_file(spec, echo=lambda _: None)
    values: dict[str, Any] = result.values
    np.testing.assert_allclose(values["y"], np.full(3, 0.002))
    np.testing.assert_allclose(values["z"], np.full(3, 2.0))
