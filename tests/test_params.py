"""Parameters: the ``params:`` block, ``${params.NAME}`` uses and ``--set`` overrides.

Substitution comes before every check, so a value is checked where it is used;
errors point at the use (file:line:col) and name the override that put it there.
"""

from __future__ import annotations

import contextlib
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.cli import run_cli
from orchestrator.spec.load import load_file, load_text, parse_value
from orchestrator.spec.records import Spec
from orchestrator.spec.validate import validate

SPEC = """\
    version: 1
    name: sized
    params:
      lr: {type: number, default: 0.1, description: step size}
      n: {type: integer, default: 4}
      tag: {type: string, default: base}
      dev: {type: string, default: /cpu:0, choices: [/cpu:0, /gpu:0]}
      dims: {type: list, default: [2, 3]}
      scaled: {type: boolean, default: true}
    cluster: {jobs: {localhost: {gpus: 1}}}
    graph:
      - {name: a, op: ones, shape: ["${params.n}"], device: "${params.dev}"}
      - {name: b, op: mul, inputs: [a], scalar: "${params.lr}"}
      - {name: m, op: zeros, shape: "${params.dims}"}
    outputs: {b: "results/${params.tag}-b.npy", m: "-"}
    """


def _file(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _check(path: Path, overrides: dict[str, Any] | None = None) -> tuple[Spec | None, list[str]]:
    spec, diags = validate(load_file(path, "spec.yaml"), overrides)
    return spec, [d.render() for d in diags]


def test_defaults_are_substituted_with_their_types(tmp_path: Path) -> None:
    spec, diags = _check(_file(tmp_path))
    assert spec is not None, diags
    assert diags == ["spec.yaml:9:3: warning: params.scaled: parameter 'scaled' is declared but never used "
                     "(use it as ${params.scaled}, or remove it)"]
    assert spec.op("a").params["shape"] == [4] and spec.op("b").params["scalar"] == 0.1
    assert spec.op("m").params["shape"] == [2, 3]
    assert spec.op("a").device_chain[-1].spec.to_string() == "/device:CPU:0"
    assert spec.outputs[0].target == "results/base-b.npy"
    assert [(p.name, p.value, p.source) for p in spec.params][:3] == [
        ("lr", 0.1, "default"), ("n", 4, "default"), ("tag", "base", "default")]


def test_overrides_are_read_as_yaml_values_and_strings_keep_their_text(tmp_path: Path) -> None:
    spec, diags = _check(_file(tmp_path), {"lr": "1e-3", "n": "7", "tag": "007", "dims": "[5]", "dev": "/gpu:0"})
    assert spec is not None, diags
    assert spec.op("b").params["scalar"] == 0.001 and spec.op("a").params["shape"] == [7]
    assert spec.outputs[0].target == "results/007-b.npy"  # not results/7-b.npy: a string keeps the text
    assert spec.op("m").params["shape"] == [5] and spec.op("a").device_chain[-1].spec.to_string() == "/device:GPU:0"
    assert {p.name: p.source for p in spec.params}["lr"] == "--set lr=1e-3"


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"lr": "abc"}, "spec.yaml:13:45: graph[1].scalar: parameter 'lr' is number, but --set lr=abc gives text "
                    "(write a number, e.g. --set lr=0.01; 'lr' is declared at spec.yaml:4:3)"),
    ({"n": "2.5"}, "spec.yaml:12:33: graph[0].shape[0]: parameter 'n' is integer, but --set n=2.5 gives a number "
                   "(write a whole number, e.g. --set n=10; 'n' is declared at spec.yaml:5:3)"),
    ({"lrr": "1"}, "spec.yaml:3:1: params: --set lrr=1: the spec has no parameter 'lrr' (did you mean 'lr'?)"),
    ({"dev": "/gpu:1"}, "spec.yaml:12:57: graph[0].device: --set dev=/gpu:1: '/gpu:1' is not one of the choices of "
                        "parameter 'dev' (one of '/cpu:0', '/gpu:0')"),
    # the right type, but not a valid value where it is used: the check of that place, and where the value came from
    ({"n": "-2"}, "spec.yaml:12:33: graph[0].shape[0]: must be at least 0, got -2 (dimensions are counts: 0 or more; "
                  "${params.n} = -2, from --set n=-2)"),
    ({"dev": "/cpu:0", "lr": "[1, 2"}, "spec.yaml:13:45: graph[1].scalar: --set lr=[1, 2 is not a value (did not "
                                       "find expected ',' or ']' while parsing a flow sequence) (write a number, e.g. "
                                       "--set lr=0.01)"),
])
def test_a_bad_override_is_an_error_at_the_use_naming_the_override(tmp_path: Path, overrides: dict[str, str],
                                                                   expected: str) -> None:
    spec, diags = _check(_file(tmp_path), overrides)
    assert spec is None
    assert [d for d in diags if "warning" not in d] == [expected]


def test_each_use_of_a_bad_value_is_reported(tmp_path: Path) -> None:
    path = _file(tmp_path, SPEC.replace('shape: "${params.dims}"', 'shape: ["${params.n}", "${params.n}"]'))
    _, diags = _check(path, {"n": "x"})
    assert [d.split(": ")[0] for d in diags if "--set n=x gives text" in d] == [
        "spec.yaml:12:33", "spec.yaml:14:34", "spec.yaml:14:49"]


@pytest.mark.parametrize(("text", "expected"), [
    ("scalar: '${params.lrr}'", "${params.lrr}: no parameter 'lrr' is declared (did you mean 'lr'?)"),
    ("scalar: '${lr}'", "${lr} is not a parameter reference (write ${params.NAME}; a literal '${' is written $${)"),
])
def test_a_use_of_an_unknown_name_is_an_error_at_the_use(tmp_path: Path, text: str, expected: str) -> None:
    spec = textwrap.dedent(f"""\
        version: 1
        params:
          lr: {{type: number, default: 0.1}}
        graph:
          - {{name: a, op: ones, shape: [2]}}
          - {{name: b, op: mul, inputs: [a], {text}}}
        """)
    doc = load_text(spec, "s.yaml")
    result, diags = validate(doc)
    assert result is None
    assert [d.render() for d in diags if d.is_error] == [f"s.yaml:6:45: graph[1].scalar: {expected}"]


@pytest.mark.parametrize(("block", "expected"), [
    ("lr: {type: float, default: 0.1}", "3:14: params.lr.type: unknown parameter type 'float' "
                                        "(one of number, integer, string, boolean, list)"),
    ("lr: {type: numbr, default: 0.1}", "3:14: params.lr.type: unknown parameter type 'numbr' (did you mean 'number'?)"),
    ("lr: {default: 0.1}", "3:7: params.lr: parameter 'lr' has no type (add type: one of number, integer, string, "
                           "boolean, list)"),
    ("lr: {type: integer, default: 0.5}", "3:32: params.lr.default: the default of parameter 'lr' is a number, but its "
                                          "type is integer (write a whole number, e.g. default: 10)"),
    ("lr: {type: number}", "3:3: params.lr: parameter 'lr' has no default and no --set (pass --set lr=0.01, or give "
                           "it a default)"),
    ("lr: 0.1", "3:7: params.lr: parameter 'lr' must be declared as a mapping, got a number (e.g. lr: {type: number, "
                "default: 0.1})"),
    ("lr: {type: number, default: 1, choices: [0.1, 0.2]}", "3:31: params.lr.default: the default 1 of parameter 'lr' "
                                                            "is not one of its choices (one of 0.1, 0.2)"),
    ("2lr: {type: number, default: 1}", "3:3: params.2lr: parameter name '2lr' is not a name (letters, digits and _, "
                                        "not starting with a digit: e.g. lr, batch_size)"),
])
def test_a_wrong_declaration_is_an_error_at_the_declaration(block: str, expected: str) -> None:
    text = f"version: 1\nparams:\n  {block}\ngraph:\n  - {{name: b, op: ones, shape: [2], scalar: 1}}\n"
    text = text.replace("scalar: 1", "value: '${params.lr}'") if "2lr" not in block else text
    _, diags = validate(load_text(text, "p.yaml"))
    assert [d.render() for d in diags if d.is_error][:1] == [f"p.yaml:{expected}"]


def test_text_uses_and_escapes(tmp_path: Path) -> None:
    spec, diags = _check(_file(tmp_path, """\
        version: 1
        params:
          run: {type: string, default: exp1}
          k: {type: integer, default: 3}
        graph:
          - {name: a, op: ones, shape: [2], description: "costs $${dollars} in ${params.run}"}
        outputs: {a: "out/${params.run}/k${params.k}.npy"}
        """))
    assert spec is not None, diags
    assert spec.outputs[0].target == "out/exp1/k3.npy"
    assert spec.op("a").params.get("description", "costs ${dollars} in exp1") == "costs ${dollars} in exp1"


def test_a_list_inside_text_is_an_error(tmp_path: Path) -> None:
    _, diags = _check(_file(tmp_path, SPEC.replace('"results/${params.tag}-b.npy"', '"r/${params.dims}.npy"')))
    assert "spec.yaml:15:14: outputs.b: parameter 'dims' is a list and cannot be part of text ('r/${params.dims}.npy') " \
           "(use it as the whole value: ${params.dims})" in diags


def test_parse_value_reads_one_yaml_value() -> None:
    assert parse_value("1e-3") == 0.001 and parse_value("[1, 2]") == [1, 2] and parse_value("true") is True
    assert parse_value("abc") == "abc" and parse_value("") == ""
    for bad in ("[1,", "a: b", "1\nextra: 2", "!!python/object:os.system x"):
        with pytest.raises(ValueError):
            parse_value(bad)


# ---------------------------------------------------------------------- the three commands


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_cli(args, out=out)
    return code, out.getvalue(), err.getvalue()


def test_set_on_validate_plan_and_run(tmp_path: Path) -> None:
    path = _file(tmp_path)
    assert _cli(["validate", str(path), "--set", "lr=0.5", "--set", "n=2"])[0] == 0
    code, out, err = _cli(["validate", str(path), "--set", "lr=abc"])
    assert code == 1 and f"{path}:13:45: graph[1].scalar: parameter 'lr' is number, but --set lr=abc gives text" in out
    code, out, _ = _cli(["plan", str(path), "--set", "lr=0.5", "--set", "tag=x"])
    assert code == 0
    assert "params: lr = 0.5 (--set lr=0.5), n = 4, tag = 'x' (--set tag=x), dev = '/cpu:0', dims = [2, 3], " \
           "scaled = true" in out
    code, out, _ = _cli(["plan", str(path), "--format", "json", "--set", "n=6"])
    params = {p["name"]: p for p in json.loads(out)["params"]}
    assert params["n"] == {"name": "n", "type": "integer", "value": 6, "source": "--set n=6", "description": ""}
    code, out, err = _cli(["run", str(path), "--set", "n=3", "--set", "lr=2", "--output-dir", str(tmp_path / "o")])
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "results" / "base-b.npy"), np.full(3, 2.0))
    code, _, err = _cli(["run", str(path), "--set", "nn=3"])
    assert code == 1 and "--set nn=3: the spec has no parameter 'nn' (did you mean 'n'?)" in err


def test_a_malformed_set_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = _cli(["validate", str(_file(tmp_path)), "--set", "lr"])
    assert code == 2 and "--set lr: write NAME=VALUE" in err


# ---------------------------------------------------------------------- ${ that would stay in a value as written


@pytest.mark.parametrize(("block", "expected"), [
    ('b: {type: string, default: "${params.a}"}',
     "4:30: params.b.default: the default of parameter 'b' is '${params.a}', but nothing inside params: is "
     "substituted (write the value itself: the default cannot use a parameter)"),
    ('b: {type: list, default: [x, "r/${params.a"]}',
     "4:32: params.b.default[1]: the default of parameter 'b' is 'r/${params.a', but nothing inside params: is "
     "substituted (write the value itself: the default cannot use a parameter)"),
    ('b: {type: string, default: x, choices: [x, "${params.a}"]}',
     "4:46: params.b.choices[1]: a choice of parameter 'b' is '${params.a}', but nothing inside params: is "
     "substituted (write the value itself: a choice cannot use a parameter)"),
])
def test_a_reference_inside_params_is_an_error_at_the_declaration(block: str, expected: str) -> None:
    text = (f"version: 1\nparams:\n  a: {{type: string, default: x}}\n  {block}\ngraph:\n"
            "  - {name: o, op: ones, shape: [2]}\noutputs: {o: 'r/${params.a}-${params.b}.npy'}\n")
    spec, diags = validate(load_text(text, "p.yaml"))
    assert spec is None
    assert [d.render() for d in diags] == [f"p.yaml:{expected}"]  # the uses of 'b' stay quiet: said once


@pytest.mark.parametrize("target", ["r/${params.tag.npy", "r/${params.tag}-${params.tag.npy", "r/${.npy"])
def test_a_use_without_its_closing_brace_is_an_error_at_the_use(target: str) -> None:
    text = (f"version: 1\nparams:\n  tag: {{type: string, default: x}}\ngraph:\n  - {{name: o, op: ones, "
            f"shape: [2]}}\noutputs: {{o: '{target}'}}\n")
    spec, diags = validate(load_text(text, "u.yaml"))
    assert spec is None
    assert [d.render() for d in diags if d.is_error] == [
        f"u.yaml:6:14: outputs.o: '${{' without a closing '}}' in {target!r} (close it: ${{params.NAME}}; a literal "
        "'${' is written $${)"]


def test_an_escaped_brace_without_a_closing_one_stays_text(tmp_path: Path) -> None:
    spec, diags = _check(_file(tmp_path, """\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2]}
        outputs: {a: "out/$${x.npy"}
        """))
    assert spec is not None, diags
    assert spec.outputs[0].target == "out/${x.npy"


def test_a_reference_in_a_set_value_is_an_error_at_each_use(tmp_path: Path) -> None:
    _, diags = _check(_file(tmp_path), {"tag": "${params.n}"})
    assert diags == ["spec.yaml:15:14: outputs.b: --set tag=${params.n}: a --set value is not substituted, and '${' "
                     "cannot stay in it (write the value itself, e.g. --set tag=name)"]
