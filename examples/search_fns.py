"""User functions of examples/search.yaml: polynomial ridge regression, fitted on a simulated GPU."""

from __future__ import annotations

from typing import Any

MAX_DEGREE = 7  # the weights are padded to MAX_DEGREE + 1: every copy gives the same shape, so they gather


def features(x: Any, degree: int, xp: Any) -> Any:
    """Powers x⁰ … x^degree, a column each."""
    return x[:, None] ** xp.arange(degree + 1)


def fit(x: Any, y: Any, lam: Any, degree: Any, xp: Any) -> Any:
    """Ridge weights (VᵀV + λI)⁻¹ Vᵀy of the degree's polynomial, zero-padded to MAX_DEGREE + 1."""
    d = int(degree)
    v = features(x, d, xp)
    w = xp.linalg.solve(v.T @ v + float(lam) * xp.eye(d + 1), v.T @ y)
    return xp.concatenate([w, xp.zeros(MAX_DEGREE - d)])


def mse(x: Any, y: Any, weights: Any, xp: Any) -> Any:
    """Mean squared error of the padded weights on (x, y)."""
    error = features(x, MAX_DEGREE, xp) @ weights - y
    return xp.mean(error * error)
