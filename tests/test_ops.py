"""The op catalog: every op declares what the other stages need; a new op is one catalog entry."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.api import check_file
from orchestrator.ops import CATALOG, lookup, tf_name, user_op_names
from orchestrator.ops.base import OpDef
from orchestrator.ops.catalog import _def, _pure
from orchestrator.ops.inference import infer_same


class Context:
    """A kernel context on the host, as a CPU worker gives one."""

    xp = np
    device = "/job:localhost/replica:0/task:0/device:CPU:0"
    input_keys = None
    outputs = 1

    def __init__(self, name: str = "x", step: int = 0, base_dir: str = ".") -> None:
        self.name, self.step, self.base_dir = name, step, base_dir

    @property
    def stream(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.name.split("/") if p.isdigit())

    def to_host(self, value: Any) -> Any:
        return value

    def to_device(self, value: Any) -> Any:
        return value

    def user_function(self, fn: str) -> Any:
        raise AssertionError("not used here")


def test_ops_declare_their_files_user_code_and_output_counts() -> None:
    load, save, call, split = (lookup(k) for k in ("load", "save", "call", "split"))
    assert load is not None and load.reads == ("path",) and load.needs_base_dir
    assert save is not None and save.writes == ("path",) and not save.needs_base_dir
    assert call is not None and call.user_code and call.output_count({"outputs": 3}) == 3
    assert split is not None and split.output_count({"num": 4}) == 4
    assert lookup("add").output_count({}) == 1  # type: ignore[union-attr]
    assert all(not d.reads and not d.writes for k, d in CATALOG.items() if k not in ("load", "save"))


def test_kernels_run_with_the_context_they_are_given() -> None:
    add, mean, uniform = CATALOG["add"], CATALOG["mean"], CATALOG["random.uniform"]
    np.testing.assert_array_equal(add.kernel(Context(), {"scalar": 2}, np.ones(3)), np.full(3, 3.0))
    assert mean.kernel(Context(), {"axis": 0}, np.array([[1.0, 3.0], [5.0, 7.0]])).tolist() == [3.0, 5.0]
    one = uniform.kernel(Context("towers/0/x", step=1), {"shape": [4], "seed": 7})
    other_copy = uniform.kernel(Context("towers/1/x", step=1), {"shape": [4], "seed": 7})
    next_step = uniform.kernel(Context("towers/0/x", step=2), {"shape": [4], "seed": 7})
    again = uniform.kernel(Context("towers/0/x", step=1), {"shape": [4], "seed": 7})
    np.testing.assert_array_equal(one, again)
    assert not np.array_equal(one, other_copy) and not np.array_equal(one, next_step)


def test_tf_names_come_from_the_catalog() -> None:
    assert tf_name("matmul") == "MatMul" and tf_name("add") == "AddV2" and tf_name("nope") == "nope"
    assert "mean_n" not in user_op_names() and "matmul" in user_op_names()


def test_a_new_op_is_one_catalog_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering an op is all validation, placement and the memory planner need to know of it."""
    negate: OpDef = _def("negate", "Neg", infer_same, _pure(lambda xp, x: xp.negative(x)), 1, 1, names=("x",))
    monkeypatch.setitem(CATALOG, "negate", negate)
    spec = tmp_path / "negate.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        cluster: {jobs: {localhost: {gpus: 1}}}
        graph:
          - {name: a, op: ones, shape: [1000]}
          - {name: b, op: negate, inputs: [a]}
        """))
    checked = check_file(spec)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.plan is not None
    assert checked.plan.placement("b").device_name.endswith("GPU:0")  # a GPU kernel: TF's default
    assert checked.spec is not None and checked.spec.values["b"][0].nbytes == 8000
    np.testing.assert_array_equal(negate.kernel(Context(), {}, np.ones(2)), -np.ones(2))


CALL_MODULE = '''
import numpy as np

def text(x, xp):
    return "not numbers"

def objects(x, xp):
    return np.array([object(), 1], dtype=object)

def wrong_shape(x, xp):
    return xp.zeros((3, 2), dtype="float32")

def two(x, xp):
    return x, x * 2

def one(x, xp):
    return x
'''


@pytest.mark.cluster
@pytest.mark.parametrize("fn, extra, message", [
    ("text", "", "fn 'calls:text' returned str, not an array of numbers"),
    ("objects", "", "fn 'calls:objects' returned an array of object (ndarray), not of numbers"),
    ("wrong_shape", ", output: {shape: [3], dtype: float64}",
     "fn 'calls:wrong_shape' returned shape [3, 2] float32, but the op declares output [3] float64; the memory plan "
     "relied on the declaration"),
    ("one", ", outputs: 2, output: {shape: [3]}", "fn 'calls:one' must return 2 arrays (outputs: 2), got ndarray"),
])
def test_call_results_are_checked(tmp_path: Path, fn: str, extra: str, message: str) -> None:
    """A user function's value is an array of numbers, of the declared shape: else the op fails, named."""
    from orchestrator import run_file
    from orchestrator.errors import OpFailedError

    (tmp_path / "calls.py").write_text(CALL_MODULE)
    spec = tmp_path / "call.yaml"
    spec.write_text(textwrap.dedent(f"""\
        version: 1
        graph:
          - {{name: x, op: ones, shape: [3]}}
          - {{name: f, op: call, fn: "calls:{fn}", inputs: [x]{extra}}}
        """))
    with pytest.raises(OpFailedError) as info:
        run_file(spec, echo=lambda _: None)
    assert str(info.value) == f"op 'f' failed on /job:localhost/replica:0/task:0/device:CPU:0: {message}"


@pytest.mark.cluster
def test_call_results_of_the_declared_shape_pass(tmp_path: Path) -> None:
    from orchestrator import run_file

    (tmp_path / "calls.py").write_text(CALL_MODULE)
    spec = tmp_path / "call.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        graph:
          - {name: x, op: ones, shape: [3]}
          - {name: f, op: call, fn: "calls:two", inputs: [x], outputs: 2, output: {shape: [3]}}
        outputs: {"f:1": "-"}
        """))
    result = run_file(spec, echo=lambda _: None)
    np.testing.assert_array_equal(result.values["f:1"], np.full(3, 2.0))
