"""Attention math as pure numpy functions: similarity scores, a stable softmax, and the blend.

    attention(Q, K, V) = softmax(sim(Q, K) / T) · V

With ``similarity="scaled_dot"`` and ``temperature=1`` this is exactly the seed formula
softmax(QKᵀ/√d)V, which the tests check against a naive implementation. Nothing here knows about
keys, encoders or indexes; the store calls these functions on the rows it has selected.

Keys are "prepared" once when they are inserted (unit-normalised for cosine), and queries so that
the score is a plain inner product (or, for "l2", a negative squared distance): a lookup is then a
single matrix product, and a FAISS index with an inner-product or L2 metric computes the same
scores.
"""

from __future__ import annotations

import numpy as np

from softdict._config import Similarity

__all__ = [
    "attention",
    "blend",
    "prepare_keys",
    "prepare_queries",
    "prepared_scores",
    "similarity_scores",
    "softmax",
    "tail_mass_bound",
]


def prepare_keys(vectors: np.ndarray, similarity: Similarity) -> np.ndarray:
    """Key rows as float32 in the form the index stores: unit-normalised for cosine.

    A zero vector stays zero rather than becoming NaN, so it scores 0 against everything.
    """
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    if similarity is not Similarity.COSINE:
        return rows
    norms = np.linalg.norm(rows.astype(np.float64), axis=-1, keepdims=True)
    return (rows / np.maximum(norms, np.finfo(np.float32).tiny)).astype(np.float32)


def prepare_queries(vectors: np.ndarray, similarity: Similarity) -> np.ndarray:
    """Query rows as float32, prepared so that a plain inner product with prepared keys is the
    similarity score: normalised for cosine, scaled by 1/√d for scaled_dot (l2 uses distances).
    """
    if similarity is Similarity.SCALED_DOT:
        rows = np.asarray(vectors, dtype=np.float64)
        return np.ascontiguousarray(rows / np.sqrt(rows.shape[-1]), dtype=np.float32)
    return prepare_keys(vectors, similarity)


def prepared_scores(
    queries: np.ndarray,
    keys: np.ndarray,
    similarity: Similarity,
    key_sq_norms: np.ndarray | None = None,
) -> np.ndarray:
    """Score prepared queries (m, d) against prepared keys (n, d); returns float64 (m, n).

    Every similarity but "l2" is then the inner product. ``key_sq_norms`` (the squared norms of
    the keys) is only used by "l2"; it is computed when not given.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        dots = queries @ keys.T
    if not np.all(np.isfinite(dots)):
        # Finite float32 inputs can overflow float32 in the product; float64 cannot overflow here.
        dots = queries.astype(np.float64) @ keys.astype(np.float64).T
    dots = dots.astype(np.float64, copy=False)
    if similarity is not Similarity.L2:
        return dots
    if key_sq_norms is None:
        key_sq_norms = np.einsum("ij,ij->i", keys, keys, dtype=np.float64)
    query_sq_norms = np.einsum("ij,ij->i", queries, queries, dtype=np.float64)
    squared_distance = query_sq_norms[:, None] - 2.0 * dots + key_sq_norms[None, :]
    # The expansion can round to a tiny negative distance; a distance is never negative.
    return -np.maximum(squared_distance, 0.0)


def similarity_scores(queries: np.ndarray, keys: np.ndarray, similarity: Similarity) -> np.ndarray:
    """Score raw query embeddings (m, d) against raw key embeddings (n, d); float64 (m, n)."""
    return prepared_scores(
        prepare_queries(queries, similarity), prepare_keys(keys, similarity), similarity
    )


def softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    """Softmax of ``scores / temperature`` along the last axis, finite for any finite scores.

    The row maximum is subtracted before dividing by the temperature, so the largest term is
    exp(0) = 1 and nothing overflows, however large the scores or small the temperature. Scores of
    -inf (masked keys) get weight exactly 0; every row needs at least one finite score.
    """
    shifted = np.asarray(scores, dtype=np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    # With a tiny temperature a gap divides to -inf, whose exp is the weight 0 it should be.
    with np.errstate(over="ignore"):
        weights = np.exp(shifted / temperature)
    return weights / weights.sum(axis=-1, keepdims=True)


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
    weights = softmax(similarity_scores(queries, keys, Similarity(similarity)), temperature)
    return blend(weights, values), weights


def tail_mass_bound(top_scores: np.ndarray, n_total: int, temperature: float) -> np.ndarray:
    """Upper bound on the attention mass of keys left out of a top-k softmax, per query.

    ``top_scores`` (m, k) are each query's best scores, best first, padded with -inf. Every
    omitted key scores at most s_k (the k-th best), so with s_1 the best score the omitted mass is
    at most  (n − k)·e^((s_k − s_1)/T) / (Σ_top e^((s_i − s_1)/T) + (n − k)·e^((s_k − s_1)/T)).
    """
    scores = np.asarray(top_scores, dtype=np.float64)
    found = np.isfinite(scores).sum(axis=1)
    omitted = np.maximum(n_total - found, 0)
    best = scores[:, :1]
    kth = np.take_along_axis(scores, np.maximum(found - 1, 0)[:, None], axis=1)
    top_sum = np.exp((scores - best) / temperature).sum(axis=1)
    omitted_each = np.exp((kth[:, 0] - best[:, 0]) / temperature)
    bound = omitted * omitted_each / (top_sum + omitted * omitted_each)
    return np.where(omitted > 0, bound, 0.0)
