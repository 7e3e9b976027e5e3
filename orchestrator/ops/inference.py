"""Shape and dtype inference: each op's outputs from its inputs' shapes alone, never their data.

Validation and the memory planner call these through the catalog; they
follow NumPy's rules (broadcasting, weak scalar promotion, true division)
and raise :class:`ShapeError` naming both shapes when inputs do not fit.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from .values import ValueInfo

Params = Mapping[str, Any]


class ShapeError(ValueError):
    """Inputs whose shapes or dtypes an op cannot combine; message names both.

    ``key`` names the op's field at fault (``"value"``, ``"shape"``, ``"axis"``)
    so a diagnostic can point at it; ``None`` means the inputs.
    """

    def __init__(self, message: str, hint: str = "", key: str | None = None):
        super().__init__(message)
        self.hint = hint
        self.key = key


def _shape(p: Params, key: str = "shape") -> tuple[int, ...]:
    return tuple(int(d) for d in p[key])


def _dtype(p: Params, default: str = "float64") -> str:
    return str(p.get("dtype", default))


def _known(infos: Sequence[ValueInfo]) -> bool:
    return all(i.shape is not None and i.dtype is not None for i in infos)


def _unknown(n: int = 1) -> tuple[ValueInfo, ...]:
    return tuple(ValueInfo(None, None) for _ in range(n))


def _fmt(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "[" + ", ".join(map(str, shape)) + "]"


@lru_cache(maxsize=None)
def _result_dtype(*dtypes: str | None) -> str | None:
    if any(d is None for d in dtypes):
        return None
    return str(np.result_type(*[np.dtype(d) for d in dtypes if d is not None]))


@lru_cache(maxsize=None)
def _scalar_result(dtype: str, scalar_type: str) -> str:
    # NumPy 2 promotes a Python scalar weakly: int array * 2 stays int, * 0.5 becomes float64
    scalar = {"bool": True, "int": 1, "float": 1.0, "complex": 1j}.get(scalar_type, 1.0)
    return str(np.result_type(np.dtype(dtype), scalar))


# --------------------------------------------------------------------------- inference


def infer_literal(p: Params, _: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    problem = literal_problem(p["value"])
    if problem is not None:
        raise ShapeError(*problem, key="value")
    try:
        arr = np.asarray(p["value"], dtype=p.get("dtype", "float64"))
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. 300 as uint8, 1.5 as bool
        raise ShapeError(f"value cannot be stored as {p.get('dtype', 'float64')}: {exc}",
                         "change the value or the dtype", key="value") from None
    return (ValueInfo(tuple(arr.shape), str(arr.dtype)),)


def literal_problem(value: Any, where: str = "value") -> tuple[str, str] | None:
    """Why ``value`` is not a rectangular array of numbers, naming the first bad spot; None if it is.

    NumPy's own error ("inhomogeneous shape after 1 dimensions ...") names
    neither the row nor the lengths, so the nested lists are walked here.
    """
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return None
    if isinstance(value, str):
        return (f"{where} must be a number or nested lists of numbers, got the string {value!r}",
                "write numbers without quotes, e.g. 1.5 rather than '1.5'")
    if value is None or isinstance(value, dict):
        found = "null" if value is None else "a mapping"
        return (f"{where} must be a number or nested lists of numbers, got {found}",
                "e.g. value: [[1, 2], [3, 4]]")
    if not isinstance(value, list):  # pragma: no cover - YAML data holds nothing else
        return (f"{where} must be a number or nested lists of numbers", "e.g. value: [[1, 2], [3, 4]]")
    for i, item in enumerate(value):
        problem = literal_problem(item, f"{where}[{i}]")
        if problem is not None:
            return problem
    shapes = [_nested_shape(item) for item in value]
    for i, shape in enumerate(shapes[1:], start=1):
        if shape != shapes[0]:
            return (f"{where} is ragged: {where}[0] has shape {_fmt(shapes[0])} but {where}[{i}] has "
                    f"shape {_fmt(shape)}", "every row of a nested list must have the same length")
    return None


def _nested_shape(value: Any) -> tuple[int, ...]:
    """Shape of a nested list already known to be rectangular below its top level."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def infer_shaped(p: Params, _: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return (ValueInfo(_shape(p), _dtype(p)),)


def infer_variable(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    if "value" in p:
        return infer_literal(p, ins)
    if ins:
        return (ins[0],)
    return infer_shaped(p, ins)


def infer_elementwise(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    if len(ins) == 1:
        if "scalar" not in p:
            raise ShapeError("needs two inputs, or one input and 'scalar'", "add 'scalar: 2' or a second input")
        dtype = _scalar_result(ins[0].dtype, type(p["scalar"]).__name__) if ins[0].dtype else None
        return (ValueInfo(ins[0].shape, dtype),)
    if "scalar" in p:
        raise ShapeError("takes either two inputs or one input and 'scalar', not both", "remove 'scalar'",
                         key="scalar")
    a, b = ins
    if a.shape is None or b.shape is None:
        return (ValueInfo(None, _result_dtype(a.dtype, b.dtype)),)
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ShapeError(f"shapes {_fmt(a.shape)} and {_fmt(b.shape)} cannot be broadcast together",
                         "elementwise ops need equal shapes or NumPy-broadcastable ones") from None
    return (ValueInfo(shape, _result_dtype(a.dtype, b.dtype)),)


def infer_div(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (out,) = infer_elementwise(p, ins)
    dtype = out.dtype
    if dtype is not None and not dtype.startswith(("float", "complex")):
        dtype = "float64"  # true division, as NumPy
    return (ValueInfo(out.shape, dtype),)


def infer_same(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return (ins[0],)


def infer_matmul(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    a, b = ins
    dtype = _result_dtype(a.dtype, b.dtype)
    if a.shape is None or b.shape is None:
        return (ValueInfo(None, dtype),)
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise ShapeError(f"matmul needs arrays of rank >= 1, got {_fmt(a.shape)} x {_fmt(b.shape)}",
                         "use mul for scalars")
    if a.shape[-1] != b.shape[-2 if len(b.shape) > 1 else 0]:
        raise ShapeError(f"matmul shapes {_fmt(a.shape)} and {_fmt(b.shape)} do not match: "
                         f"{a.shape[-1]} != {b.shape[-2 if len(b.shape) > 1 else 0]}",
                         "the last dimension of the first input must equal the first of the second")
    # NumPy's rules, computed from the shapes alone: running np.matmul on empty
    # arrays of these shapes would allocate and multiply them (hours for [60000, 60000]).
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ShapeError(f"matmul shapes {_fmt(a.shape)} and {_fmt(b.shape)} do not match: batch dimensions "
                         f"{_fmt(a.shape[:-2])} and {_fmt(b.shape[:-2])} cannot be broadcast together",
                         "leading (batch) dimensions must be equal or 1") from None
    rows = a.shape[-2:-1]  # dropped for a 1-D first input
    cols = b.shape[-1:] if len(b.shape) > 1 else ()
    return (ValueInfo((*batch, *rows, *cols), dtype),)


def infer_add_n(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    shapes = {i.shape for i in ins if i.shape is not None}
    if len(shapes) > 1:
        a, b = sorted(shapes, key=str)[:2]
        raise ShapeError(f"add_n inputs must have equal shapes, got {_fmt(a)} and {_fmt(b)}",
                         "add_n sums arrays of one shape; use add for broadcasting")
    shape = shapes.pop() if shapes and all(i.shape is not None for i in ins) else None
    return (ValueInfo(shape, _result_dtype(*[i.dtype for i in ins])),)


def infer_mean_n(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    # add_n's shapes, mean's dtype: the weighted sum is divided, so integers average to float64
    (out,) = infer_add_n(p, ins)
    dtype = out.dtype
    if dtype is not None and not dtype.startswith(("float", "complex")):
        dtype = "float64"
    return (ValueInfo(out.shape, dtype),)


def _norm_axis(axis: int, ndim: int, shape: tuple[int, ...]) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for shape {_fmt(shape)}",
                         f"valid axes here are {-ndim}..{ndim - 1}" if ndim else "a scalar has no axes",
                         key="axis")
    return axis % ndim


def infer_sum(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return _infer_reduce(p, ins, mean=False)


def infer_mean(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return _infer_reduce(p, ins, mean=True)


def _infer_reduce(p: Params, ins: Sequence[ValueInfo], mean: bool) -> tuple[ValueInfo, ...]:
    (x,) = ins
    dtype = x.dtype
    if mean or (dtype and dtype == "bool"):
        dtype = "float64" if dtype and not dtype.startswith(("float", "complex")) else dtype
    if x.shape is None:
        return (ValueInfo(None, dtype),)
    axis, keep = p.get("axis"), bool(p.get("keepdims", False))
    if axis is None:
        return (ValueInfo(tuple(1 for _ in x.shape) if keep else (), dtype),)
    ax = _norm_axis(int(axis), len(x.shape), x.shape)
    shape = tuple(1 if i == ax else d for i, d in enumerate(x.shape) if keep or i != ax)
    return (ValueInfo(shape, dtype),)


def infer_concat(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    dtype = _result_dtype(*[i.dtype for i in ins])
    if not _known(ins):
        return (ValueInfo(None, dtype),)
    first = ins[0].shape
    assert first is not None
    if len(first) == 0:
        raise ShapeError("concat needs arrays of rank >= 1", "use stack for scalars")
    ax = _norm_axis(int(p.get("axis", 0) or 0), len(first), first)
    total = 0
    for info in ins:
        s = info.shape
        assert s is not None
        if len(s) != len(first) or any(d != e for i, (d, e) in enumerate(zip(s, first)) if i != ax):
            raise ShapeError(f"concat shapes {_fmt(first)} and {_fmt(s)} differ outside axis {ax}",
                             f"inputs must have equal shapes except along axis {ax}")
        total += s[ax]
    return (ValueInfo(tuple(total if i == ax else d for i, d in enumerate(first)), dtype),)


def infer_stack(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    dtype = _result_dtype(*[i.dtype for i in ins])
    if not _known(ins):
        return (ValueInfo(None, dtype),)
    first = ins[0].shape
    assert first is not None
    for info in ins:
        if info.shape != first:
            raise ShapeError(f"stack inputs must have equal shapes, got {_fmt(first)} and {_fmt(info.shape)}",
                             "use concat to join arrays of different lengths")
    axis = int(p.get("axis", 0) or 0)
    ax = _norm_axis(axis, len(first) + 1, first)
    shape = list(first)
    shape.insert(ax, len(ins))
    return (ValueInfo(tuple(shape), dtype),)


def infer_split(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (x,) = ins
    num = int(p["num"])
    if x.shape is None:
        return tuple(ValueInfo(None, x.dtype) for _ in range(num))
    if len(x.shape) == 0:
        raise ShapeError("cannot split a scalar", "split needs an array of rank >= 1")
    ax = _norm_axis(int(p.get("axis", 0) or 0), len(x.shape), x.shape)
    sizes = split_sizes(x.shape[ax], num)
    return tuple(ValueInfo(tuple(s if i == ax else d for i, d in enumerate(x.shape)), x.dtype) for s in sizes)


def split_sizes(length: int, num: int) -> list[int]:
    """np.array_split's piece lengths: the first ``length % num`` pieces get one more."""
    base, extra = divmod(length, num)
    return [base + 1 if i < extra else base for i in range(num)]


def infer_transpose(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (x,) = ins
    if x.shape is None:
        return (x,)
    axes = p.get("axes")
    if axes is None:
        return (ValueInfo(tuple(reversed(x.shape)), x.dtype),)
    ndim = len(x.shape)
    # an axis outside -ndim..ndim-1 is no axis (modulo would let [0, 3] pass for rank 2)
    if any(not -ndim <= int(a) < ndim for a in axes) or \
            sorted(int(a) % max(ndim, 1) for a in axes) != list(range(ndim)):
        raise ShapeError(f"axes {list(axes)} are not a permutation of the {len(x.shape)} axes of {_fmt(x.shape)}",
                         f"e.g. axes: {list(reversed(range(len(x.shape))))}", key="axes")
    return (ValueInfo(tuple(x.shape[int(a)] for a in axes), x.dtype),)


def infer_reshape(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (x,) = ins
    target = [int(d) for d in p["shape"]]
    if x.shape is None:
        return (ValueInfo(None if -1 in target else tuple(target), x.dtype),)
    size = math.prod(x.shape)
    if target.count(-1) > 1:
        raise ShapeError("reshape can infer at most one dimension (-1)", key="shape")
    if -1 in target:
        rest = math.prod(d for d in target if d != -1)
        if rest == 0 or size % rest:
            raise ShapeError(f"cannot reshape {_fmt(x.shape)} into {target}", key="shape")
        target[target.index(-1)] = size // rest
    if math.prod(target) != size:
        raise ShapeError(f"cannot reshape {_fmt(x.shape)} ({size} elements) into {_fmt(tuple(target))} "
                         f"({math.prod(target)} elements)", "the new shape must hold the same number of elements",
                         key="shape")
    return (ValueInfo(tuple(target), x.dtype),)


def infer_cast(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return (ValueInfo(ins[0].shape, _dtype(p)),)


def infer_load(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    # the file is read on the worker, never at plan time: its size is known only if declared
    shape = tuple(int(d) for d in p["shape"]) if "shape" in p else None
    return (ValueInfo(shape, p.get("dtype", "float64" if shape is not None else None)),)


def infer_call(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    declared = p.get("output")
    n = int(p.get("outputs", 1))
    if not declared:
        return _unknown(n)
    each = declared if isinstance(declared, list) else [declared] * n
    if len(each) != n:
        raise ShapeError(f"output declares {len(each)} value(s) but outputs is {n}",
                         "give one {shape, dtype} per output, or a single one for all")
    return tuple(ValueInfo(tuple(d["shape"]), d.get("dtype", "float64")) for d in each)


def infer_select(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    """The best copy's value (or index): the copies are ranked by one number each."""
    shaped = next((x for x in ins if x.shape is not None and x.shape != ()), None)
    if shaped is not None:
        raise ShapeError(f"select ranks the copies by one number each, but the metric is of shape "
                         f"{_fmt(shaped.shape)}", "reduce it in the body to one number (e.g. {name: m, op: mean, "
                         "inputs: [...]}) and select on that; a loop's metric is a series, its final state a value")
    return (ValueInfo((), "float64"),)


def infer_pick(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    return (ins[int(p["n"])],)


def infer_series(p: Params, ins: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    (x,) = ins
    return (ValueInfo(None if x.shape is None else (int(p["steps"]), *x.shape), x.dtype),)
