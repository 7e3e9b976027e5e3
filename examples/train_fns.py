"""User functions of examples/train.yaml: synthetic clusters, a softmax classifier's gradient, loss and accuracy.

Each receives its inputs as arrays of the device's array module and ``xp``
(numpy, or cupy on a real GPU), and returns arrays of that module. The model
is ``w`` of shape (d + 1, k): a column of ones is appended to the points, so
its last row is the bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def clusters(xp: Any, n: int = 600, d: int = 4, k: int = 3, seed: int = 0, centers: int = 0,
             spread: float = 1.0) -> tuple[Any, Any]:
    """``n`` points of ``k`` Gaussian clusters in ``d`` dims, and their classes one-hot (n, k).

    The cluster centres come from the seed ``centers`` alone, so a training set
    and a validation set drawn with different ``seed`` share them.
    """
    means = np.random.default_rng(centers).normal(0.0, 2.0, (k, d))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    points = means[labels] + spread * rng.normal(size=(n, d))
    return xp.asarray(points), xp.asarray(np.eye(k)[labels])


def _probabilities(w: Any, x: Any, xp: Any) -> tuple[Any, Any]:
    features = xp.concatenate([x, xp.ones((x.shape[0], 1), dtype=x.dtype)], axis=1)
    logits = features @ w
    logits = logits - logits.max(axis=1, keepdims=True)  # exp never overflows
    e = xp.exp(logits)
    return features, e / e.sum(axis=1, keepdims=True)


def grad(w: Any, x: Any, y: Any, xp: Any) -> Any:
    """Gradient in w of the mean cross-entropy of softmax(x̃ w) against the one-hot classes y."""
    features, p = _probabilities(w, x, xp)
    return features.T @ (p - y) / x.shape[0]


def loss(w: Any, x: Any, y: Any, xp: Any) -> Any:
    """Mean cross-entropy (natural log) of softmax(x̃ w) against y."""
    _, p = _probabilities(w, x, xp)
    return -xp.mean(xp.log(xp.sum(p * y, axis=1) + 1e-300))


def accuracy(w: Any, x: Any, y: Any, xp: Any) -> Any:
    """The share of rows whose most probable class is theirs."""
    _, p = _probabilities(w, x, xp)
    return xp.mean((xp.argmax(p, axis=1) == xp.argmax(y, axis=1)).astype(xp.float64))


def sgd(w: Any, velocity: Any, g: Any, xp: Any, lr: float = 0.05, momentum: float = 0.9) -> tuple[Any, Any]:
    """One step of SGD with momentum (as tf.keras.optimizers.SGD): the new weights and velocity."""
    velocity = momentum * velocity - lr * g
    return w + velocity, velocity


def table(val_loss: Any, val_acc: Any, xp: Any) -> Any:
    """One validation table from the two (step, value) series: rows of (step, loss, accuracy)."""
    return xp.concatenate([val_loss, val_acc[:, 1:]], axis=1)
