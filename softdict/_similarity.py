"""How a query is scored against a key: everything that depends on the similarity lives here.

Keys are "prepared" once when they are inserted (unit-normalised for cosine), and queries so that
the score is a plain inner product with them (or, for "l2", a negative squared distance). An index
backend then needs to know only its ``Metric``, never the similarity: a lookup is one matrix
product, and a FAISS index with an inner-product or L2 metric computes the same scores.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np

__all__ = ["DEFAULT_COSINE_TEMPERATURE", "Metric", "Similarity", "metric_scores"]

# Measured by benchmarks/choose_temperature.py: the temperature that maximises held-out
# log-likelihood of the right category on real words and phrases with all-MiniLM-L6-v2.
DEFAULT_COSINE_TEMPERATURE = 0.05


class Metric(str, Enum):
    """What an index backend computes between prepared vectors; higher scores are better."""

    INNER_PRODUCT = "inner_product"
    L2 = "l2"  # the score is the negative squared Euclidean distance


def metric_scores(
    queries: np.ndarray, keys: np.ndarray, metric: Metric, key_sq_norms: np.ndarray | None = None
) -> np.ndarray:
    """Score prepared queries (m, d) against prepared keys (n, d); returns float64 (m, n).

    ``key_sq_norms`` (the keys' squared norms) is only used by L2; it is computed when not given.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        # One query: a matrix-vector product. ``queries @ keys.T`` runs as a matrix product on
        # a transposed operand, measured 10-30x slower for a few thousand keys here.
        dots = (keys @ queries[0])[None, :] if len(queries) == 1 else queries @ keys.T
    if not np.all(np.isfinite(dots)):
        # Finite float32 inputs can overflow float32 in the product; float64 cannot overflow here.
        dots = queries.astype(np.float64) @ keys.astype(np.float64).T
    dots = dots.astype(np.float64, copy=False)
    if metric is Metric.INNER_PRODUCT:
        return dots
    if key_sq_norms is None:
        key_sq_norms = squared_norms(keys)
    squared_distance = squared_norms(queries)[:, None] - 2.0 * dots + key_sq_norms[None, :]
    # The expansion can round to a tiny negative distance; a distance is never negative.
    return -np.maximum(squared_distance, 0.0)


# Rows normalised at a time by ``Similarity.prepare_keys``: 2 MB float64 blocks at 256 dims.
_NORMALISE_ROWS = 1024


def _unit_rows(rows: np.ndarray) -> np.ndarray:
    """float32 ``rows`` divided by their norms in float64, rounded to float32; a zero row stays
    zero. (A row of subnormal float32 entries, of a norm below float32's smallest normal number,
    is a direction too: it was divided by that number instead, and came out nearly zero.)"""
    norms = np.linalg.norm(rows.astype(np.float64), axis=-1, keepdims=True)
    return (rows / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Each row's squared Euclidean norm, float64."""
    return np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)


class Similarity(str, Enum):
    """How a query is scored against a key."""

    COSINE = "cosine"
    DOT = "dot"
    SCALED_DOT = "scaled_dot"  # q·k / sqrt(d), the form of "Attention Is All You Need"
    L2 = "l2"  # negative squared Euclidean distance

    @property
    def metric(self) -> Metric:
        """The metric an index computes on vectors prepared for this similarity."""
        return Metric.L2 if self is Similarity.L2 else Metric.INNER_PRODUCT

    def default_temperature(self, dim: int) -> float:
        """The temperature that gives, on unit-norm embeddings of ``dim`` dims, the weights of
        the measured cosine default (so every similarity behaves alike by default)."""
        if self is Similarity.SCALED_DOT:
            return DEFAULT_COSINE_TEMPERATURE / math.sqrt(dim)
        if self is Similarity.L2:
            # For unit vectors -|q-k|^2 = 2·cos(q, k) - 2: twice the spread of cosine scores.
            return 2.0 * DEFAULT_COSINE_TEMPERATURE
        return DEFAULT_COSINE_TEMPERATURE

    def cosine_unit(self, dim: int) -> float:
        """What one unit of cosine similarity is in this similarity's scores, on unit-norm
        embeddings of ``dim`` dims (1 for cosine and dot, 1/√d for scaled_dot, 2 for l2): the
        spelling channel's weights are given in cosine units and scaled by it."""
        return self.default_temperature(dim) / DEFAULT_COSINE_TEMPERATURE

    def as_cosine(self, scores: np.ndarray, dim: int) -> np.ndarray:
        """Scores in this similarity as the cosines they are on unit-norm embeddings of ``dim``
        dims (``cosine_unit``'s inverse; for l2, -|q-k|^2 = 2·cos(q, k) - 2): what ``rule-8``
        compares with its cosines of meaning no key has."""
        cosines = np.asarray(scores, dtype=np.float64) / self.cosine_unit(dim)
        return cosines + 1.0 if self is Similarity.L2 else cosines

    def prepare_keys(self, vectors: np.ndarray) -> np.ndarray:
        """Key rows as float32 in the form an index stores: unit-normalised for cosine.

        A zero vector stays zero rather than becoming NaN, so it scores 0 against everything.
        """
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        if self is not Similarity.COSINE:
            return rows
        if rows.ndim < 2:
            return _unit_rows(rows)
        # In blocks of rows, each normalised as a whole batch would be (the same float64
        # arithmetic row by row, so the same bits): 10^5 keys of 256 dims at once made two
        # 200 MB float64 temporaries, about 1 s of a 19 s insert (a profile here).
        out = np.empty(rows.shape, dtype=np.float32)
        for start in range(0, len(rows), _NORMALISE_ROWS):
            block = slice(start, start + _NORMALISE_ROWS)
            out[block] = _unit_rows(rows[block])
        return out

    def prepare_queries(self, vectors: np.ndarray) -> np.ndarray:
        """Query rows as float32, prepared so that the metric against prepared keys is the
        similarity: normalised for cosine, scaled by 1/√d for scaled_dot."""
        if self is Similarity.SCALED_DOT:
            rows = np.asarray(vectors, dtype=np.float64)
            return np.ascontiguousarray(rows / np.sqrt(rows.shape[-1]), dtype=np.float32)
        return self.prepare_keys(vectors)

    def scores(self, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Score raw query embeddings (m, d) against raw key embeddings (n, d); float64 (m, n)."""
        return metric_scores(self.prepare_queries(queries), self.prepare_keys(keys), self.metric)
