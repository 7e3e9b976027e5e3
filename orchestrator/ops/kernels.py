"""Kernels: what a worker runs for each op, with the device's array module ``ctx.xp``.

Random ops draw on the host with NumPy's PCG64 and then move the array to the
device: the same seed gives the same numbers on CPU, simulated GPU and CuPy.
Each copy a construct makes (``towers/1/x``) and each loop step draws its own
stream. File ops read and write through :mod:`orchestrator.formats`; ``call``
runs a user function the worker imports from the spec's directory, with that
directory as the working directory while it runs (``orchestrator.runtime.usercode``
says how, with threads), and explains a function that cannot take what it passes.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Mapping, Sequence

import numpy as np

from .. import formats
from ..atomic import atomic_open
from ..errors import RunError
from .base import KernelContext, KernelError
from .values import CopyFailed
from .training import partial_step

Params = Mapping[str, Any]


def _shape(p: Params) -> tuple[int, ...]:
    return tuple(int(d) for d in p["shape"])


def _dtype(p: Params) -> str:
    return str(p.get("dtype", "float64"))


def _as_dtype(arr: np.ndarray[Any, Any], p: Params) -> np.ndarray[Any, Any]:
    # a draw is float64: no conversion (nor a dtype parsed from its name) for the default
    dtype = p.get("dtype", "float64")
    return arr if dtype == "float64" else arr.astype(str(dtype), copy=False)


def _host_rng(p: Params, step: int = 0, stream: tuple[int, ...] = ()) -> np.random.Generator:
    # one PCG64 stream per (seed, copy of a construct, loop step): replicas draw different
    # batches, every step draws a fresh one, and a plain op is reproducible from its seed
    return np.random.default_rng([int(p.get("seed", 0)), *stream, step])


def constant(ctx: KernelContext, p: Params) -> Any:
    return ctx.xp.asarray(np.asarray(p["value"], dtype=p.get("dtype", "float64")))


def zeros(ctx: KernelContext, p: Params) -> Any:
    return ctx.xp.zeros(_shape(p), dtype=_dtype(p))


def ones(ctx: KernelContext, p: Params) -> Any:
    return ctx.xp.ones(_shape(p), dtype=_dtype(p))


def fill(ctx: KernelContext, p: Params) -> Any:
    return ctx.xp.full(_shape(p), p["value"], dtype=_dtype(p))


def uniform(ctx: KernelContext, p: Params) -> Any:
    arr = _host_rng(p, ctx.step, ctx.stream).uniform(p.get("low", 0.0), p.get("high", 1.0), size=_shape(p))
    return ctx.xp.asarray(_as_dtype(arr, p))


def normal(ctx: KernelContext, p: Params) -> Any:
    arr = _host_rng(p, ctx.step, ctx.stream).normal(p.get("mean", 0.0), p.get("stddev", 1.0), size=_shape(p))
    return ctx.xp.asarray(_as_dtype(arr, p))


def variable(ctx: KernelContext, p: Params, *ins: Any) -> Any:
    if "value" in p:
        return constant(ctx, p)
    if ins:
        return ctx.xp.array(ins[0], copy=True)
    init = p.get("init", "zeros")
    if init == "uniform":
        return uniform(ctx, p)
    if init == "normal":
        return normal(ctx, p)
    return (ones if init == "ones" else zeros)(ctx, p)


def binary(fn_name: str) -> Any:
    """An elementwise kernel of two inputs, or of one input and ``scalar``."""
    def run(ctx: KernelContext, p: Params, a: Any, b: Any = None) -> Any:
        return getattr(ctx.xp, fn_name)(a, p["scalar"] if b is None else b)
    run.__name__ = fn_name
    return run


def reduce_sum(ctx: KernelContext, p: Params, x: Any) -> Any:
    return ctx.xp.sum(x, axis=p.get("axis"), keepdims=bool(p.get("keepdims", False)))


def reduce_mean(ctx: KernelContext, p: Params, x: Any) -> Any:
    return ctx.xp.mean(x, axis=p.get("axis"), keepdims=bool(p.get("keepdims", False)))


def split(ctx: KernelContext, p: Params, x: Any) -> Any:
    parts = tuple(ctx.xp.array_split(x, int(p["num"]), axis=int(p.get("axis", 0) or 0)))
    # one piece is one output, which is the value itself (a replicate shrunk to one device by a re-plan)
    return parts[0] if len(parts) == 1 else parts


def gathered(ctx: KernelContext, p: Params, *xs: Any) -> Any:
    """``stack`` of a sweep's copies (gather, table): a failed copy's row is NaN, shaped as the others'."""
    axis = int(p.get("axis", 0) or 0)
    good = [x for x in xs if not isinstance(x, CopyFailed)]
    if len(good) == len(xs):
        return ctx.xp.stack(xs, axis=axis)
    if not good:
        raise KernelError(f"every copy failed ({len(xs)} copies): nothing to gather")
    nan = ctx.xp.full_like(ctx.xp.asarray(good[0], dtype=float), float("nan"))
    return ctx.xp.stack([nan if isinstance(x, CopyFailed) else x for x in xs], axis=axis)


def add_n(ctx: KernelContext, p: Params, *xs: Any) -> Any:
    xs = tuple(x for x in xs if not isinstance(x, CopyFailed))  # a sweep's combine leaves failed copies out
    if not xs:
        raise KernelError("every copy failed: nothing to combine")
    total = xs[0].copy() if len(xs) > 1 else xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def mean_n(ctx: KernelContext, p: Params, *xs: Any) -> Any:
    """Σ wᵢ·xᵢ / Σ wᵢ with the weights validation fixed (the rows of each copy's piece, else equal).

    Dividing the weighted sum once, rather than adding wᵢ/Σw·xᵢ, rounds as a
    mean over the whole batch does: rows of 0..6 over 4 + 3 rows give 3.0,
    exactly NumPy's mean. A copy of weight 0 (an empty piece) is left out: its
    mean of no rows is NaN, which 0·NaN would carry into the result.
    """
    weights = ctx.memo
    if weights is None:  # worked out once per op and device
        weights = ctx.memo = [w if isinstance(w, float) else int(w) for w in p["weights"]]  # a sweep's: any number
    if "weights_last" in p and partial_step(p["batches"], ctx.step):
        weights = [int(w) for w in p["weights_last"]]  # the epoch's partial batch, cut otherwise
    if CopyFailed in map(type, xs):  # a sweep's combine: the copies that did not fail, reweighed
        weights = [w for w, x in zip(weights, xs) if not isinstance(x, CopyFailed)]
        xs = tuple(x for x in xs if not isinstance(x, CopyFailed))
        if not xs:
            raise KernelError("every copy failed: nothing to combine")
    terms = [(w, x) for w, x in zip(weights, xs) if w]
    total = terms[0][1] * terms[0][0]
    for w, x in terms[1:]:
        total = total + x * w
    return total / sum(weights)


def _best(p: Params, metrics: Sequence[Any]) -> int:
    """The copy with the best metric; a NaN metric (or a failed copy's) is never the best (min() would keep
    one seen first)."""
    scores = [float("nan") if isinstance(m, CopyFailed) else float(m) for m in metrics]
    usable = [s for s in scores if s == s]
    if not usable:
        raise KernelError(f"every copy's metric is NaN or its copy failed ({len(scores)} copies): "
                          f"no best {p['mode']} to select")
    return scores.index(min(usable) if p["mode"] == "min" else max(usable))


def select(ctx: KernelContext, p: Params, *metrics: Any) -> Any:
    return ctx.xp.asarray(float(p["values"][_best(p, metrics)]))


def pick(ctx: KernelContext, p: Params, *ins: Any) -> Any:
    n = int(p["n"])
    best = _best(p, ins[:n])
    if isinstance(ins[n + best], CopyFailed):  # its metric was made, this value's op then failed
        raise KernelError(f"the best copy ({best}) failed after its metric: {ins[n + best].error}")
    return ins[n + best]


def load(ctx: KernelContext, p: Params) -> Any:
    """Read a file on the worker that owns the op (never through the client)."""
    path = os.path.join(ctx.base_dir, str(p["path"]))
    array = formats.read_array(path, p)
    if "shape" in p and tuple(array.shape) != tuple(p["shape"]):
        raise RunError(f"op '{ctx.name}': {p['path']} holds an array of shape {list(array.shape)}, "
                       f"but the spec declares shape {list(p['shape'])}")
    return ctx.xp.asarray(array)


def save(ctx: KernelContext, p: Params, x: Any) -> Any:
    """Write a checkpoint (``path`` was made absolute under the output directory).

    It is written, atomically, to a staging file beside its target, and
    renamed into place only when the whole run has succeeded: a failed run
    leaves an existing checkpoint as it was.
    """
    path = str(p["path"])
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with atomic_open(ctx.stage(path), "wb") as handle:
            formats.write_array(handle, path, np.asarray(ctx.to_host(x)), p.get("format"))
    except OSError as exc:  # a full disk names no file: say which
        raise KernelError(f"cannot write {path}: {exc.strerror or exc}") from None
    return x


def call(ctx: KernelContext, p: Params, *inputs: Any) -> Any:
    """Run the user function ``fn`` with the inputs as device arrays, ``xp`` and the params.

    It runs with the spec's folder as the working directory (``ctx.working_directory``):
    relative paths in user code mean that folder, wherever the client was started.
    The function and its keyword params are worked out at the op's first step on its device (``ctx.memo``);
    the working directory is lent, and the value checked, afresh at every call.
    """
    plan = ctx.memo
    if plan is None:  # (fn, its keyword params): once per op and device
        plan = ctx.memo = (ctx.user_function(str(p["fn"])), dict(p.get("params") or {}))
    if not ctx.on_device or tuple in map(type, inputs):
        inputs = tuple([ctx.to_device(x) if x is not None else x for x in inputs])
    xp, (fn, kwargs) = ctx.xp, plan
    args: tuple[Any, ...] = inputs
    if ctx.input_keys is not None:
        args, kwargs = (), dict(kwargs)
        kwargs.update(zip(ctx.input_keys, inputs))
    try:
        with ctx.working_directory():
            result = fn(*args, xp=xp, **kwargs)
    except TypeError:
        why = _mismatch(fn, args, xp, kwargs)
        if why is None:  # the function's own TypeError, raised inside it: the user's line says where
            raise
        raise KernelError(_call_hint(ctx, p, fn, len(args), kwargs, why)) from None
    if ctx.outputs > 1:
        if not isinstance(result, (tuple, list)) or len(result) != ctx.outputs:
            got = f"{len(result)} values" if isinstance(result, (tuple, list)) else type(result).__name__
            raise KernelError(f"fn '{p['fn']}' must return {ctx.outputs} arrays (outputs: {ctx.outputs}), got {got}")
        arrays = tuple([_numeric(xp, r, p, i) for i, r in enumerate(result)])
    else:
        arrays = (_numeric(xp, result, p, None),)
    declared = p.get("output")
    if declared:
        each = declared if isinstance(declared, list) else [declared] * len(arrays)
        for i, (array, spec) in enumerate(zip(arrays, each)):
            wanted = spec.get("dtype")  # as declared at a glance (a dtype NumPy's own, compared by identity)
            if array.shape == tuple(spec.get("shape", ())) and (wanted is None or array.dtype is _named(wanted)):
                continue
            _check_declared(p, array, spec, i if len(arrays) > 1 else None)  # a closer look, and the error
    return arrays if ctx.outputs > 1 else arrays[0]


_DTYPES: dict[str, Any] = {}  # a dtype's name -> the dtype named so exactly, or False (never compared by identity)


def _named(wanted: Any) -> Any:
    found = _DTYPES.get(wanted) if type(wanted) is str else False
    if found is None:
        try:
            dtype = np.dtype(wanted)
        except TypeError:
            dtype = None
        found = _DTYPES[wanted] = dtype if dtype is not None and str(dtype) == wanted else False
    return found


def _mismatch(fn: Any, args: Sequence[Any], xp: Any, kwargs: Mapping[str, Any]) -> str | None:
    """Why ``fn`` cannot take the arguments call passes, or None when it can (the TypeError was its own).

    Only looked at after a TypeError: a call that works pays nothing.
    """
    if "xp" in kwargs:
        return "the op's params or input names include 'xp', which call passes itself"
    if not callable(fn):
        return f"it is a {type(fn).__name__}, not a function"
    try:
        inspect.signature(fn).bind(*args, xp=xp, **kwargs)
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to read (some builtins): nothing to say beyond its own error
        return None
    return None


def _call_hint(ctx: KernelContext, p: Params, fn: Any, n_args: int, kwargs: Mapping[str, Any], why: str) -> str:
    """One line: what call passed, and what the function declares (and where)."""
    name = getattr(fn, "__name__", str(p["fn"]).rpartition(":")[2])
    keys = set(ctx.input_keys or ())
    passed = [f"<input {i}>" for i in range(n_args)] + [f"xp={getattr(ctx.xp, '__name__', 'xp')}"]
    passed += [f"{k}=<{'input' if k in keys else 'param'}>" for k in kwargs]
    inputs = "by their names" if ctx.input_keys is not None else "in order"
    try:
        declared = f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        declared = name
    code = getattr(fn, "__code__", None)
    where = f" at {code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return (f"fn '{p['fn']}' cannot take what call passes it ({why}): call runs {name}({', '.join(passed)}), "
            f"the op's inputs {inputs}, xp= the device's array module (numpy or cupy) and the op's params as "
            f"keywords; it is defined as {declared}{where}")


def _numeric(xp: Any, value: Any, p: Params, index: int | None) -> Any:
    """The user function's value as an array of numbers (bool, int, float, complex), else an error."""
    if type(value) is np.ndarray and xp is np and value.dtype.kind in "biufc":  # what asarray gives back as is
        return value
    if value is None or isinstance(value, (str, bytes, dict)):
        raise KernelError(f"{_which(p, index)} returned {type(value).__name__}, not an array of numbers")
    try:
        array = xp.asarray(value)
    except (TypeError, ValueError) as exc:
        raise KernelError(f"{_which(p, index)} returned {type(value).__name__}, which is not an array: "
                          f"{exc}") from None
    if array.dtype.kind not in "biufc":
        raise KernelError(f"{_which(p, index)} returned an array of {array.dtype} ({type(value).__name__}), "
                          "not of numbers")
    return array


def _which(p: Params, index: int | None) -> str:
    return f"fn '{p['fn']}'" + ("" if index is None else f" (value {index})")


def _check_declared(p: Params, array: Any, spec: Mapping[str, Any], index: int | None) -> None:
    """The spec declared this output's shape (and maybe dtype): the memory plan relied on it."""
    declared_shape = spec.get("shape", ())
    wanted_dtype = spec.get("dtype")  # without one, only the shape is promised
    if wanted_dtype is None or str(array.dtype) == str(wanted_dtype):
        # the spec's shape is a list of ints: compared as it is, then (should it differ) as ints, as it means
        if array.shape == tuple(declared_shape):
            return
        if tuple(array.shape) == tuple(int(d) for d in declared_shape):
            return
    shape = tuple(int(d) for d in declared_shape)
    declared = f"{list(shape)}" + (f" {wanted_dtype}" if wanted_dtype else "")
    raise KernelError(f"{_which(p, index)} returned shape {list(array.shape)} {array.dtype}, but the op declares "
                      f"output {declared}; the memory plan relied on the declaration")
