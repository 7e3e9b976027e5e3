"""The built-in ops: one :class:`~orchestrator.ops.base.OpDef` each (``CATALOG``)."""

from __future__ import annotations

from typing import Any, Sequence

from . import inference as inf
from . import kernels as k
from . import training as t
from .base import CPU_GPU, CPU_ONLY, Infer, Kernel, OpDef
from .values import without_failed


def _def(name: str, tf: str, infer: Infer, kernel: Kernel, lo: int, hi: int | None, *,
         kernels: frozenset[str] = CPU_GPU, required: Sequence[str] = (), optional: Sequence[str] = (),
         names: Sequence[str] = (), internal: bool = False, description: str = "", reads: Sequence[str] = (),
         writes: Sequence[str] = (), user_code: bool = False, outputs_param: str | None = None) -> OpDef:
    return OpDef(name, tf, kernels, lo, hi, infer, kernel, frozenset(required), frozenset(optional),
                 tuple(names), internal, description, tuple(reads), tuple(writes), user_code, outputs_param)


def _pure(fn: Any) -> Kernel:
    """A kernel that needs only the array module: ``fn(xp, *inputs)``."""
    def run(ctx: Any, p: Any, *ins: Any) -> Any:
        return fn(ctx.xp, *ins)
    return run


_SHAPED = ("dtype",)
_AXIS = ("axis",)

CATALOG: dict[str, OpDef] = {d.name: d for d in [
    _def("constant", "Const", inf.infer_literal, k.constant, 0, 0, required=["value"], optional=["dtype"],
         description="a literal array"),
    _def("zeros", "Zeros", inf.infer_shaped, k.zeros, 0, 0, required=["shape"], optional=_SHAPED),
    _def("ones", "Ones", inf.infer_shaped, k.ones, 0, 0, required=["shape"], optional=_SHAPED),
    _def("fill", "Fill", inf.infer_shaped, k.fill, 0, 0, required=["shape", "value"], optional=_SHAPED),
    _def("random.uniform", "RandomUniform", inf.infer_shaped, k.uniform, 0, 0, required=["shape"],
         optional=["dtype", "low", "high", "seed"]),
    _def("random.normal", "RandomStandardNormal", inf.infer_shaped, k.normal, 0, 0, required=["shape"],
         optional=["dtype", "mean", "stddev", "seed"]),
    _def("variable", "VariableV2", inf.infer_variable, k.variable, 0, 1,
         optional=["value", "shape", "dtype", "init", "seed"], description="a named initial value"),
    _def("add", "AddV2", inf.infer_elementwise, k.binary("add"), 1, 2, optional=["scalar"], names=("x", "y")),
    _def("sub", "Sub", inf.infer_elementwise, k.binary("subtract"), 1, 2, optional=["scalar"], names=("x", "y")),
    _def("mul", "Mul", inf.infer_elementwise, k.binary("multiply"), 1, 2, optional=["scalar"], names=("x", "y")),
    _def("div", "RealDiv", inf.infer_div, k.binary("true_divide"), 1, 2, optional=["scalar"], names=("x", "y")),
    _def("square", "Square", inf.infer_same, _pure(lambda xp, x: xp.square(x)), 1, 1, names=("x",)),
    _def("identity", "Identity", inf.infer_same, _pure(lambda xp, x: x), 1, 1, names=("x",)),
    _def("matmul", "MatMul", inf.infer_matmul, _pure(lambda xp, a, b: xp.matmul(a, b)), 2, 2, names=("a", "b")),
    _def("add_n", "AddN", inf.infer_add_n, k.add_n, 1, None),
    _def("sum", "Sum", inf.infer_sum, k.reduce_sum, 1, 1, optional=["axis", "keepdims"], names=("x",)),
    _def("mean", "Mean", inf.infer_mean, k.reduce_mean, 1, 1, optional=["axis", "keepdims"], names=("x",)),
    _def("concat", "ConcatV2", inf.infer_concat,
         lambda ctx, p, *xs: ctx.xp.concatenate(without_failed(xs), axis=int(p.get("axis", 0) or 0)), 1, None,
         optional=_AXIS),
    _def("split", "Split", inf.infer_split, k.split, 1, 1, required=["num"], optional=_AXIS, names=("x",),
         outputs_param="num"),
    _def("stack", "Pack", inf.infer_stack, k.gathered, 1, None, optional=_AXIS),
    _def("transpose", "Transpose", inf.infer_transpose, lambda ctx, p, x: ctx.xp.transpose(x, p.get("axes")), 1, 1,
         optional=["axes"], names=("x",)),
    _def("reshape", "Reshape", inf.infer_reshape, lambda ctx, p, x: ctx.xp.reshape(x, tuple(p["shape"])), 1, 1,
         required=["shape"], names=("x",)),
    _def("cast", "Cast", inf.infer_cast, lambda ctx, p, x: x.astype(p["dtype"]), 1, 1, required=["dtype"],
         names=("x",)),
    # Files are read and written on the worker that owns the op, never through the client.
    _def("load", "LoadArray", inf.infer_load, k.load, 0, 0, kernels=CPU_ONLY, required=["path"],
         optional=["format", "delimiter", "header", "dtype", "shape"], reads=["path"]),
    _def("save", "SaveArray", inf.infer_same, k.save, 1, 1, required=["path"], optional=["format"],
         names=("x",), writes=["path"]),
    _def("call", "Call", inf.infer_call, k.call, 0, None, required=["fn"],
         optional=["kernels", "params", "output", "outputs"], user_code=True, outputs_param="outputs"),
    # Made by constructs.
    _def("mean_n", "Mean", inf.infer_mean_n, k.mean_n, 1, None, internal=True,
         optional=["split", "weights", "weights_last", "batches"],
         description="replicate's combine: mean, weighed by the rows of each copy's piece"),
    _def("state", "Identity", inf.infer_same, _pure(lambda xp, x: x), 1, 1, internal=True),
    _def("select", "Select", inf.infer_select, k.select, 1, None, internal=True),
    _def("pick", "Select", inf.infer_pick, k.pick, 2, None, internal=True),
    _def("series", "Stack", inf.infer_series, lambda ctx, p, *xs: ctx.xp.stack(xs), 1, None, internal=True),
    _def("minibatch", "Gather", t.infer_minibatch, t.minibatch, 1, 1, internal=True,
         description="iterate's batches: this step's rows of a dataset"),
    _def("evaluations", "Stack", t.infer_evaluations, t.evaluations, 1, None, internal=True,
         description="iterate's evaluate: a metric's (step, value) rows"),
]}
