"""User functions of examples/polyfit.yaml: a batch's gradient and loss, and Adam.

Each receives its inputs as arrays of the device's array module and ``xp``
(numpy, or cupy on a real GPU), and returns arrays of that module.
"""

from __future__ import annotations

from typing import Any


def _error(x: Any, w: Any, xp: Any) -> tuple[Any, Any]:
    features = xp.stack([x * x, x, xp.ones_like(x)], axis=1)
    target = 5.0 * x * x + 3.0
    return features, features @ w - target


def grad(x: Any, w: Any, xp: Any) -> Any:
    """Gradient in w of the mean squared error of w·[x², x, 1] against y = 5x² + 3."""
    features, error = _error(x, w, xp)
    return (2.0 / x.shape[0]) * (features.T @ error)


def loss(x: Any, w: Any, xp: Any) -> Any:
    """Mean squared error of w·[x², x, 1] against y = 5x² + 3."""
    _, error = _error(x, w, xp)
    return xp.mean(error * error)


def adam(w: Any, m: Any, v: Any, t: Any, grad: Any, xp: Any, lr: float = 0.1, beta1: float = 0.9,
         beta2: float = 0.999, eps: float = 1e-8) -> tuple[Any, Any, Any]:
    """One Adam step (Kingma & Ba); ``t`` is the 1-based step number."""
    m = beta1 * m + (1.0 - beta1) * grad
    v = beta2 * v + (1.0 - beta2) * grad * grad
    m_hat = m / (1.0 - beta1 ** t)
    v_hat = v / (1.0 - beta2 ** t)
    return w - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
