"""Learning from the data in the store: choosing the temperature by leave-one-out.

``calibrate`` asks, for each candidate temperature T, how well attention over the *other* keys
predicts each key's own value: softmax(sim(k_i, K_{-i}) / T) · V_{-i} against v_i. Scalar and
vector stores are scored by mean squared error, categorical stores by the log-likelihood of each
key's own label. The T with the best score is the one the store's values support.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from softdict._attention import prepared_scores, softmax
from softdict._config import Similarity, ValueKind

__all__ = ["CalibrationResult", "leave_one_out_temperature"]

# Temperatures tried: the measured default for the similarity times these factors (a log grid
# from 1/50 to 50: for cosine, 0.001 to 2.5).
_FACTORS = np.geomspace(1 / 50, 50, 61)


@dataclass(frozen=True)
class CalibrationResult:
    temperature: float
    loss: float
    default_loss: float
    n_keys: int


def _loss(weights: np.ndarray, targets: np.ndarray, kind: ValueKind) -> float:
    if kind is ValueKind.CATEGORICAL:
        mass = weights @ targets  # targets: one-hot labels (n, n_labels); rows are own labels
        own = np.sum(mass * targets, axis=1)
        return float(-np.mean(np.log(np.maximum(own, 1e-12))))
    predicted = weights @ targets
    return float(np.mean((predicted - targets) ** 2))


def leave_one_out_temperature(
    vectors: np.ndarray,
    targets: np.ndarray,
    kind: ValueKind,
    similarity: Similarity,
    default_temperature: float,
) -> CalibrationResult:
    """The temperature that best predicts each row of ``targets`` from the others.

    Args:
        vectors: prepared key vectors (n, d) of the keys used (all, or a sample).
        targets: their values, (n,) or (n, d_v) numbers, or one-hot labels (n, n_labels).
        kind: the store's value kind (categorical targets are scored by log-likelihood).
        similarity: how keys are scored against each other.
        default_temperature: the measured default for ``similarity``; the grid is laid around it.
    """
    scores = prepared_scores(vectors, vectors, similarity)
    np.fill_diagonal(scores, -np.inf)  # leave each key out of its own prediction
    targets = targets.astype(np.float64)
    if kind is not ValueKind.CATEGORICAL and targets.ndim == 1:
        targets = targets[:, None]
    losses = [
        (float(t), _loss(softmax(scores, t), targets, kind)) for t in default_temperature * _FACTORS
    ]
    best_t, best_loss = min(losses, key=lambda pair: pair[1])
    default_loss = _loss(softmax(scores, default_temperature), targets, kind)
    return CalibrationResult(best_t, best_loss, default_loss, len(vectors))
