"""Attention math as pure numpy functions: a stable softmax, the blend, the tail bound, top-k.

    attention(Q, K, V) = softmax(sim(Q, K) / T) · V

With ``similarity="scaled_dot"`` and ``temperature=1`` this is exactly the seed formula
softmax(QKᵀ/√d)V, which the tests check against a naive implementation. Nothing here knows about
keys, encoders, stores or indexes; they call these functions on the scores they have selected.
"""

from __future__ import annotations

import numpy as np

from softdict._similarity import Similarity

__all__ = ["attention", "blend", "softmax", "tail_mass_bound", "top_of_scores"]

# Below this, exp underflows to 0 in float64 (its smallest subnormal is e^-745.13).
_EXP_UNDERFLOW = -745.2


def softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    """Softmax of ``scores / temperature`` along the last axis, finite for any finite scores.

    The row maximum is subtracted before dividing by the temperature, so the largest term is
    exp(0) = 1 and nothing overflows, however large the scores or small the temperature. Scores of
    -inf (masked keys, padding) get weight exactly 0; every row needs at least one finite score.
    """
    shifted = np.asarray(scores, dtype=np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    # With a tiny temperature a gap divides to -inf, whose exp is the weight 0 it should be.
    with np.errstate(over="ignore"):
        shifted /= temperature
    # exp is computed only where it is not 0 in float64: the same weights, and 6x faster when
    # most keys are far below the best (exp's slow path for results that underflow).
    weights = np.zeros_like(shifted)
    np.exp(shifted, out=weights, where=shifted > _EXP_UNDERFLOW)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


def blend(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Weighted sum of value rows: (m, n) weights with (n,) or (n, d) values -> (m,) or (m, d)."""
    return np.asarray(weights, dtype=np.float64) @ np.asarray(values, dtype=np.float64)


def attention(
    queries: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    *,
    similarity: Similarity | str = Similarity.SCALED_DOT,
    temperature: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(softmax(sim(Q, K) / T) · V, weights)`` for raw embeddings.

    >>> import numpy as np
    >>> out, w = attention(np.eye(2), np.eye(2), np.array([1.0, 3.0]), temperature=1.0)
    >>> np.round(w, 3).tolist()
    [[0.67, 0.33], [0.33, 0.67]]
    """
    weights = softmax(Similarity(similarity).scores(queries, keys), temperature)
    return blend(weights, values), weights


def tail_mass_bound(
    top_scores: np.ndarray,
    n_total: int,
    temperature: float,
    ceiling: np.ndarray | None = None,
) -> np.ndarray:
    """Upper bound on the attention mass of keys left out of a top-k softmax, per query.

    ``top_scores`` (m, k) are each query's best scores, best first, padded with -inf. Every
    omitted key scores at most s_k (the k-th best), so with s_1 the best score the omitted mass is
    at most  (n − k)·e^((s_k − s_1)/T) / (Σ_top e^((s_i − s_1)/T) + (n − k)·e^((s_k − s_1)/T)).
    ``ceiling`` (m,) replaces s_k where omitted keys are known to score at most something else
    (a spelling channel's candidates bound the spelling part of the score separately).
    """
    scores = np.asarray(top_scores, dtype=np.float64)
    found = np.isfinite(scores).sum(axis=1)
    omitted = np.maximum(n_total - found, 0)
    best = scores[:, :1]
    if ceiling is None:
        kth = np.take_along_axis(scores, np.maximum(found - 1, 0)[:, None], axis=1)[:, 0]
    else:
        kth = np.asarray(ceiling, dtype=np.float64)
    top_sum = np.exp((scores - best) / temperature).sum(axis=1)
    with np.errstate(over="ignore"):
        omitted_each = np.exp((kth - best[:, 0]) / temperature)
    with np.errstate(invalid="ignore"):
        bound = omitted * omitted_each / (top_sum + omitted * omitted_each)
    # A ceiling far above the best score makes both terms infinite: then nothing is bounded.
    return np.where(omitted > 0, np.nan_to_num(bound, nan=1.0), 0.0)


def top_of_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each row of a score matrix (m, n), best first: scores and
    columns (m, k). Entries scored -inf, and the tail where n < k, are padded with column -1."""
    m, n = scores.shape
    take = min(k, n)
    if take == 0:
        return np.full((m, k), -np.inf), np.full((m, k), -1, dtype=np.int64)
    if take < n:
        part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
    else:
        part = np.broadcast_to(np.arange(n), (m, n))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    columns = np.take_along_axis(part, order, axis=1)
    best = np.take_along_axis(part_scores, order, axis=1)
    columns = np.where(np.isfinite(best), columns, -1).astype(np.int64)
    if take < k:
        columns = np.pad(columns, ((0, 0), (0, k - take)), constant_values=-1)
        best = np.pad(best, ((0, 0), (0, k - take)), constant_values=-np.inf)
    return best, columns
