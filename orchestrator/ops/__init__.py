"""The op catalog: a registry of every built-in op, by the name specs use.

Each :class:`OpDef` says which device types have a kernel (``CPU``,
``GPU``), how many inputs it takes, which parameters it accepts, how to infer
the shape and dtype of its outputs from its inputs alone (used by validation
and the memory planner, so it never touches data), and its kernel: the
function a worker runs with a :class:`KernelContext` (the device's array
module ``xp``, the loop step, the spec's directory, ...). What an op does
with files and user code is declared here too (``reads``, ``writes``,
``user_code``), so no other stage special-cases an op by its name.

How to add an op: add an :class:`OpDef` to :data:`CATALOG` in
``ops/catalog.py`` (its inference in ``ops/inference.py`` and its kernel in
``ops/kernels.py`` when no existing one fits). A parameter no op had before
also needs its line in ``schemas/spec.schema.json`` (docs/extending.md).
"""

from __future__ import annotations

from typing import Sequence

from .values import ValueInfo
from .base import COMMON_KEYS, CPU_GPU, CPU_ONLY, KernelContext, KernelError, OpDef, Params
from .catalog import CATALOG
from .inference import ShapeError, literal_problem, split_sizes


def lookup(kind: str) -> OpDef | None:
    return CATALOG.get(kind)


def user_op_names() -> list[str]:
    return sorted(name for name, d in CATALOG.items() if not d.internal)


def kernels_of(kind: str, params: Params) -> frozenset[str]:
    """Device types with a kernel; ``call`` ops declare theirs (default CPU only)."""
    definition = lookup(kind)
    if definition is not None and definition.user_code:
        return frozenset(k.upper() for k in params.get("kernels", ["cpu"]))
    return definition.kernels if definition else CPU_GPU


def infer(kind: str, params: Params, inputs: Sequence[ValueInfo]) -> tuple[ValueInfo, ...]:
    """Output infos of one op; raises :class:`ShapeError` for inputs it cannot combine."""
    definition = lookup(kind)
    assert definition is not None, kind
    return definition.infer(params, inputs)


def tf_name(kind: str) -> str:
    """The op type TensorFlow's placement log would show (``MatMul``)."""
    definition = lookup(kind)
    return definition.tf_name if definition else kind


__all__ = ["CATALOG", "COMMON_KEYS", "CPU_GPU", "CPU_ONLY", "KernelContext", "KernelError", "OpDef", "ShapeError", "infer", "kernels_of",
           "literal_problem", "lookup", "split_sizes", "tf_name", "user_op_names"]
