"""Checks of the flat graph: op types and parameters, names, references, cycles, shapes, devices.

Every check collects its diagnostics and goes on; references get
"did you mean", cycles are drawn as a path (``a -> b -> a``), and a mistake
inside a construct's body is reported as the user wrote it (``'c' in
'towers'``), not once per copy.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from ..constructs import CONSTRUCTS, Construct
from ...devices import DeviceSpec
from ...errors import YamlPath, did_you_mean
from ...ops.values import ValueInfo
from ..records import Cluster, Op, OpRef, PlacementConfig
from ...ops import ShapeError, infer, kernels_of, lookup, user_op_names
from .checker import MAX_SIZE, Checker
from .schema import finite_problem
from .topology import device_exists

FN_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def written(op: Op) -> bool:
    """True for an op the user wrote as a mapping (it has ``name``, ``inputs``, ... keys to point at).

    Ops that constructs make (splits, combines, loop state, sweep values) live
    at a key or list entry of the construct; diagnostics point at that node.
    """
    return len(op.path) >= 2 and isinstance(op.path[-1], int) and op.path[-2] in ("graph", "ops", "body")


# Internal op kinds, and what a user writes instead (each construct says for the ops it makes).
_INTERNAL_HINTS = {kind: hint for construct in CONSTRUCTS.values() for kind, hint in construct.internal_ops.items()}


def _made_at(op: Op) -> tuple[Construct | None, str | None]:
    """The construct that made a non-written op, and the field it was made at (``update``, ``split``)."""
    if len(op.path) < 3 or op.group is None:
        return None, None
    return CONSTRUCTS.get(str(op.path[-3])), str(op.path[-2])


def check_ops(c: Checker, ops: Sequence[Op]) -> dict[str, Op]:
    by_name: dict[str, Op] = {}
    for op in ops:
        if op.name in by_name:
            first = by_name[op.name]
            line = c.doc.locate(first.path)[0]
            origin = f"first defined on line {line}" if written(first) else \
                f"'{first.group}' on line {line} already makes it"
            c.error("duplicate-name", (*op.path, "name") if written(op) else op.path,
                    f"duplicate op name {label(op)} ({origin})", "op names must be unique; rename one of them")
            continue
        by_name[op.name] = op
        definition = lookup(op.kind)
        if definition is not None and definition.internal and op.group is None:
            c.error("unknown-op", (*op.path, "op"), f"op '{op.kind}' is internal: constructs make it, users cannot",
                    _INTERNAL_HINTS.get(op.kind) or "see the op list: orchestrate schema")
            continue
        if definition is None:
            c.error("unknown-op", (*op.path, "op"), f"unknown op '{op.kind}'",
                    did_you_mean(op.kind, user_op_names()) or "see the op list: orchestrate schema")
            continue
        if op.group is not None and definition.internal:
            continue
        for key in sorted(definition.required - set(op.params)):
            c.error("op-param", op.path, f"op {label(op)} ({op.kind}) needs parameter '{key}'", _param_hint(op.kind, key))
        for key in sorted(set(op.params) - definition.params):
            accepted = sorted(definition.params)
            c.error("op-param", (*op.path, key), f"parameter '{key}' does not apply to op '{op.kind}'",
                    did_you_mean(key, accepted) or (f"{op.kind} accepts: {', '.join(accepted)}" if accepted
                                                     else f"{op.kind} takes no parameters"), key=True)
        n = len(op.inputs)
        lo, hi = definition.min_inputs, definition.max_inputs
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo} or {hi}" if hi == lo + 1 else \
                f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            c.error("op-arity", (*op.path, "inputs") if op.inputs else op.path,
                    f"op {label(op)} ({op.kind}) takes {want} input{'s' if want != '1' else ''}, got {n}",
                    _arity_hint(op.kind, definition.input_names, n, hi))
        if op.input_keys is not None and op.kind != "call":
            bad = [k for k in op.input_keys if k not in definition.input_names]
            for key in bad:
                names = ", ".join(definition.input_names) or "none (use a list)"
                c.error("op-input-name", (*op.path, "inputs", key), f"op '{op.kind}' has no input named '{key}'",
                        did_you_mean(key, definition.input_names) or f"input names: {names}", key=True)
        if op.kind == "call":
            fn = str(op.params.get("fn", ""))
            if fn and not FN_PATTERN.match(fn):
                c.error("call-fn", (*op.path, "fn"), *_fn_problem(fn))
        if op.kind == "variable" and "value" not in op.params and "shape" not in op.params and not op.inputs:
            c.error("op-param", op.path, f"variable {label(op)} needs a value, a shape, or an input",
                    "e.g. value: [0.0, 0.0] or shape: [3] with init: zeros")
        if op.timeout is not None and not math.isfinite(op.timeout):  # the schema lets .inf and .nan through
            c.error("duration", (*op.path, "timeout") if written(op) else op.path,
                    *finite_problem("timeout", op.timeout))
    return by_name


def _arity_hint(kind: str, input_names: Sequence[str], n: int, hi: int | None) -> str:
    if kind in ("add", "sub", "mul", "div"):
        extra = "; add_n sums any number of inputs" if kind == "add" and hi is not None and n > hi else ""
        return f"{kind} takes inputs: [x, y], or inputs: [x] and scalar: N{extra}"
    if hi == 0:
        return f"{kind} makes its value from its parameters: remove inputs"
    if input_names:
        return f"e.g. inputs: [{', '.join(input_names)}]"
    if n == 0:
        return "e.g. inputs: [a, b]"
    return "add_n sums any number of inputs" if hi is not None and n > hi else "list one op name per input"


def _fn_problem(fn: str) -> tuple[str, str]:
    """Message and hint for a ``call`` fn that is not ``package.module:function``."""
    module, colon, function = fn.rpartition(":")
    if not colon:
        head, dot, tail = fn.rpartition(".")
        hint = f"did you mean '{head}:{tail}'?" if dot and head and tail else "e.g. fn: mypkg.losses:mse"
        return f"fn '{fn}' has no ':' between the module and the function", hint
    if not module:
        return f"fn '{fn}' names no module before ':'", f"e.g. fn: mypkg.losses:{function or 'mse'}"
    if not function:
        return f"fn '{fn}' names no function after ':'", f"e.g. fn: {module}:mse"
    return f"fn '{fn}' is not of the form package.module:function", \
        "module and function are Python names: letters, digits and _, not starting with a digit"


def _param_hint(kind: str, key: str) -> str:
    return {"value": "e.g. value: [[1, 2], [3, 4]]", "shape": "e.g. shape: [1000, 100]", "num": "e.g. num: 2",
            "fn": "e.g. fn: mypkg.module:function", "path": "e.g. path: data/x.npy", "dtype": "e.g. dtype: float32"
            }.get(key, f"add {key}: to op '{kind}'")


def label(op: Op) -> str:
    """An op as the user wrote it: ``'c'``, or ``'c' in 'towers'`` for an op of a construct's body.

    Copies are named ``towers/0/c``, ``towers/1/c``; the user wrote ``c`` once.
    """
    scope = _scope_of(op) if written(op) else ""
    if scope and op.group is not None:
        return f"'{op.name[len(scope) + 1:]}' in '{op.group}'"
    return f"'{op.name}'"


def _ref_role(op: Op, ref: OpRef) -> str:
    """How the user wrote a reference, for messages: ``input 'b' of op 'c'``, ``state 'w' starts from ...``."""
    if not written(op):
        construct, where = _made_at(op)
        role = construct.reference_roles.get(where or "") if construct is not None else None
        if role is not None:
            return role.format(ref=ref, var=op.path[-1], group=op.group)
    return f"input '{ref}' of op {label(op)}"


def _scope_of(op: Op) -> str:
    """The name prefix a reference inside ``op`` was resolved in ("" for the top level).

    A body op ``towers/0/c`` resolves in ``towers/0``; a loop's update and
    metrics in the loop's body ``train``; a state's initial value and a
    replicate's split input in the scope around the construct.
    """
    if written(op) or op.group is None:
        return op.name.rpartition("/")[0]
    construct, where = _made_at(op)
    if construct is not None and where in construct.body_fields:
        return op.group
    return op.group.rpartition("/")[0]


def _candidates(op: Op, names: Sequence[str]) -> list[str]:
    """Names to suggest for a reference made inside ``op``, as the user would write them there.

    Inside a replicate/sweep/iterate body users write local names (``c``),
    which expand to ``towers/0/c``; suggesting the expanded name would be
    wrong to write. Top-level names are visible everywhere.
    """
    scope = _scope_of(op)
    top = [n for n in names if "/" not in n]
    if not scope:
        return top
    prefix = scope + "/"
    return [n[len(prefix):] for n in names if n.startswith(prefix) and "/" not in n[len(prefix):]] + top


def check_refs(c: Checker, ops: Sequence[Op], by_name: Mapping[str, Op]) -> None:
    names = list(by_name)
    for op in ops:
        keyed: Sequence[str | int] = op.input_keys or range(len(op.inputs))
        for key, ref in zip(keyed, op.inputs):
            if not _ref_ok(ref, by_name):  # the common case stays a dict lookup: specs have 100k ops
                check_ref(c, ref, by_name, _candidates(op, names),
                          (*op.path, "inputs", key) if written(op) else op.path, _ref_role(op, ref),
                          scope=_scope_of(op))
        for i, name in enumerate(op.after):
            if name not in by_name:
                c.error("unknown-after", (*op.path, "after", i) if written(op) else op.path,
                        f"op {label(op)} runs after '{name}', which is not defined",
                        did_you_mean(name, _candidates(op, names)) or "after lists op names")


def _ref_ok(ref: OpRef, by_name: Mapping[str, Op]) -> bool:
    target = by_name.get(ref.op)
    if target is None:
        return False
    return ref.output < target.outputs if ref.output is not None else target.outputs == 1


def check_ref(c: Checker, ref: OpRef, by_name: Mapping[str, Op], names: Sequence[str], path: YamlPath,
               what: str, key: bool = False, scope: str = "") -> None:
    """One reference that is not fine: no such op, no such output, or an output not said.

    ``scope`` is the name prefix the reference was resolved in (``train`` for
    a loop's body), for names that resolution left as written (``next:-1``).
    """
    target = by_name.get(ref.op)
    if target is None:
        _check_missing(c, ref, by_name, names, path, what, key, scope)
    elif ref.output is not None and ref.output >= target.outputs:
        c.error("unknown-output", path, f"{what}: op '{ref.op}' has {target.outputs} output"
                f"{'s' if target.outputs != 1 else ''}", _outputs_hint(target), key=key)
    elif ref.output is None and target.outputs > 1:
        c.error("multi-output", path, f"{what}: op '{ref.op}' has {target.outputs} outputs; say which",
                _outputs_hint(target), key=key)


def _check_missing(c: Checker, ref: OpRef, by_name: Mapping[str, Op], names: Sequence[str], path: YamlPath,
                   what: str, key: bool, scope: str) -> None:
    """A reference to no op: an op that is not there, or a defined op with an index that is not one.

    ``OpRef.parse`` reads only ``NAME:<digits>`` as an output index, so
    ``s:-1``, ``s:x`` or ``s:`` stay whole names, which no op has (names cannot
    contain ':'). When the part before the last ':' is an op, the index is the
    mistake, not the name.
    """
    name, colon, index = ref.op.rpartition(":")
    target = (by_name.get(f"{scope}/{name}") if scope else None) or by_name.get(name) if colon else None
    if target is None:
        c.error("unknown-input", path, f"{what} is not defined", did_you_mean(ref.op, names) or
                "name an op defined in the graph, or in the same body", key=key)
    elif not index.strip():
        c.error("unknown-output", path, f"{what} names no output index after ':'", _outputs_hint(target, name),
                key=key)
    else:
        shown = index if re.fullmatch(r"[-+]?\d+", index) else f"'{index}'"
        c.error("unknown-output", path, f"{what}: output index {shown} of op '{name}' is not valid; it has "
                f"{target.outputs} output{'s' if target.outputs != 1 else ''}", _outputs_hint(target, name),
                key=key)


def _outputs_hint(target: Op, name: str | None = None) -> str:
    """How to name the outputs of an op (as ``name``, the way the user wrote it): ``use s:0 .. s:3``, or ``use s``."""
    name = name or target.name
    if target.outputs > 1:
        return f"use {name}:0 .. {name}:{target.outputs - 1}"
    return f"use {name}"


def infer_values(c: Checker, order: Sequence[Op], by_name: Mapping[str, Op]) -> dict[str, tuple[ValueInfo, ...]]:
    values: dict[str, tuple[ValueInfo, ...]] = {}
    unknown = ValueInfo(None, None)
    reported: set[tuple[YamlPath, str]] = set()
    for op in order:
        infos = []
        for ref in op.inputs:
            outs = values.get(ref.op, ())
            i = ref.output or 0
            infos.append(outs[i] if i < len(outs) else unknown)
        try:
            values[op.name] = infer(op.kind, op.params, infos) if lookup(op.kind) else (unknown,)
            _check_array_size(op, values[op.name])
        except ShapeError as exc:
            message = f"op {label(op)} ({op.kind}): {exc}"
            if (op.path, str(exc)) not in reported:
                reported.add((op.path, str(exc)))
                # Point at the field at fault when the user wrote it (value, shape,
                # axis), else at the inputs whose shapes do not fit.
                field = exc.key if exc.key in op.params else "inputs" if op.inputs and exc.key is None else None
                c.error("shape", (*op.path, field) if field and written(op) else op.path, message,
                        exc.hint or "check the shapes of its inputs and parameters")
            values[op.name] = tuple(unknown for _ in range(op.outputs))
        except (KeyError, TypeError, ValueError, IndexError, OverflowError):
            values[op.name] = tuple(unknown for _ in range(op.outputs))
    return values


def _check_array_size(op: Op, infos: Sequence[ValueInfo]) -> None:
    """NumPy (and CuPy) cannot make an array of more than 2^63 - 1 bytes: ``shape: [10**30]`` is a slip."""
    for info in infos:
        if info.shape is None:
            continue
        size = info.nbytes
        if size is None:  # dtype unknown: at least one byte per element
            size = 1
            for dim in info.shape:
                size *= dim
        if size > MAX_SIZE:
            raise ShapeError(f"its output of shape {fmt_shape(info.shape)} would be larger than any array can be "
                             f"(8 EiB at most)", "check the dimensions",
                             key="shape" if "shape" in op.params else "value" if "value" in op.params else None)


def fmt_shape(shape: tuple[int, ...]) -> str:
    def dim(d: int) -> str:  # 10**400 has no float: shorten by hand
        digits = str(d)
        return digits if len(digits) <= 12 else f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return "[" + ", ".join(dim(d) for d in shape) + "]"


def check_devices(c: Checker, ops: Sequence[Op], cluster: Cluster, placement: PlacementConfig) -> None:
    seen: set[YamlPath] = set()
    fine: set[DeviceSpec] = set()  # found to exist: thousands of ops name the same few devices
    for op in ops:
        for req in op.device_chain:
            if req.path not in seen and req.spec not in fine:
                seen.add(req.path)
                said = len(c.diags)
                device_exists(c, req.spec, req.path, cluster, placement.soft)
                if len(c.diags) == said:  # (one that does not is reported at each path that names it)
                    fine.add(req.spec)
    if placement.default is not None:
        device_exists(c, placement.default, ("placement", "default"), cluster, False)
    for rule in placement.rules:
        if rule.device is not None:
            device_exists(c, rule.device, (*rule.path, "device"), cluster, placement.soft)
        if rule.round_robin is not None:
            device_exists(c, rule.round_robin, (*rule.path, "round_robin"), cluster, False)


def check_rules(c: Checker, ops: Sequence[Op], placement: PlacementConfig) -> None:
    for rule in placement.rules:
        if rule.index in c.rules_with_unknown_ops:
            continue
        if not any(rule.matches(op) for op in ops):
            c.warn("rule-unused", (*rule.path, "match"), f"rule {rule.index + 1} matches no op in the graph",
                   "check its op type, name glob and tags")


def check_kernels(c: Checker, ops: Sequence[Op]) -> None:
    for op in ops:
        if op.kind == "call" and "kernels" not in op.params:
            continue
        if not kernels_of(op.kind, op.params):
            c.error("kernels", op.path, f"op {label(op)} declares no kernels", "kernels: [cpu] or [cpu, gpu]")
