"""Shape expressions: a dimension computed from parameters and a copy's values.

A dimension of a ``shape`` (an op's, or a ``call``'s declared ``output``) may
be text: ``"${copy.hidden}"`` alone is the copy's value, as anywhere, and an
expression such as ``"${copy.hidden} * 2"`` or ``"${params.width} // 4 + 1"``
is whole-number arithmetic once the values are in place (``+ - * // %``,
parentheses). Parameters are put in before validation and a sweep's values
when it makes each copy, so every copy is planned with its own shapes: a
search over widths plans and packs each copy by its own size.

Evaluated here, when the op is made, with Python's own parser and a short
list of the nodes allowed (no names, no calls, no powers: a dimension that
would take a second to compute is a slip), so a spec cannot run code through
its shapes. Every problem is an error at the dimension.

State: none.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import Diagnostic, YamlPath
from ..records import Document

_OPERATORS: Mapping[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_LARGEST = 2**63 - 1  # no dimension of an array NumPy can make is larger
_HINT = "write whole-number arithmetic of the values, e.g. \"${copy.hidden} * 2\" (+ - * // % and parentheses)"


class ShapeExpressionError(ValueError):
    """A dimension's expression that does not give a whole number of zero or more."""


def evaluate(text: str) -> int:
    """The whole number ``text`` computes, e.g. ``"64 * 2 + 1"``; raises :class:`ShapeExpressionError`."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ShapeExpressionError(f"'{text}' is not an arithmetic expression") from None
    value = _value(tree.body, text)
    if value < 0:
        raise ShapeExpressionError(f"'{text}' is {value}; a dimension is zero or more")
    return value


def _value(node: ast.expr, text: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand, text)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, text), _value(node.right, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ShapeExpressionError(f"'{text}' divides by zero")
        value = _OPERATORS[type(node.op)](left, right)
        if abs(value) > _LARGEST:
            raise ShapeExpressionError(f"'{text}' is larger than any dimension can be")
        return value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        raise ShapeExpressionError(f"'{text}' divides with /, which makes a fraction")
    if isinstance(node, ast.Constant) and isinstance(node.value, float):
        raise ShapeExpressionError(f"'{text}' holds the fraction {node.value}")
    raise ShapeExpressionError(f"'{text}' holds '{ast.unparse(node)}', which is not whole-number arithmetic")


def settle_shapes(params: dict[str, Any], doc: Document, path: YamlPath, diagnostics: list[Diagnostic]) -> None:
    """Turn the expressions of an op's ``shape`` and its ``output`` shapes into whole numbers, in place;
    an error at each dimension that does not give one (its value is then left for the schema's error)."""
    if isinstance(params.get("shape"), list):
        params["shape"] = _settled(params["shape"], doc, (*path, "shape"), diagnostics)
    output = params.get("output")
    outputs = output if isinstance(output, list) else [output]
    for index, each in enumerate(outputs):
        if isinstance(each, dict) and isinstance(each.get("shape"), list):
            where = (*path, "output", *((index,) if isinstance(output, list) else ()), "shape")
            outputs[index] = {**each, "shape": _settled(each["shape"], doc, where, diagnostics)}
    if isinstance(output, list):
        params["output"] = outputs
    elif isinstance(output, dict):
        params["output"] = outputs[0]


def _settled(shape: list[Any], doc: Document, path: YamlPath, diagnostics: list[Diagnostic]) -> list[Any]:
    if not any(isinstance(dim, str) for dim in shape):
        return shape
    out: list[Any] = []
    for index, dim in enumerate(shape):
        if isinstance(dim, str) and "${" not in dim:  # a use no sweep replaced is reported after expansion
            try:
                dim = evaluate(dim)
            except ShapeExpressionError as exc:
                diagnostics.append(doc.diagnostic("shape-expression", (*path, index), str(exc), _HINT))
        out.append(dim)
    return out
