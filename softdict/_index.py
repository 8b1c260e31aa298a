"""Where key embeddings live and how a query finds the keys it attends to.

Every backend implements ``KeyIndex``, so the mapping never depends on how search is done. Rows are
ids: a key keeps its row from insert until it is deleted, and rows are renumbered only by
``keep`` (compaction, which the mapping calls once deleted rows pile up). Deleted rows stay in
place until then and are never returned or scored above -inf.

This module has the exact backend, a brute-force matrix product over all rows; approximate FAISS
backends for large stores implement the same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from softdict._attention import prepared_scores
from softdict._config import Similarity
from softdict._rows import GrowableRows

__all__ = ["ExactIndex", "KeyIndex", "new_index"]


class KeyIndex(ABC):
    """Prepared key embeddings by row, searchable by prepared query embeddings."""

    def __init__(self, dim: int, similarity: Similarity) -> None:
        self.dim = dim
        self.similarity = similarity
        self._live = GrowableRows((), np.bool_)

    @property
    def size(self) -> int:
        """Number of rows, deleted ones included."""
        return len(self._live)

    @property
    def live(self) -> np.ndarray:
        """Boolean mask of the rows that hold a key."""
        return self._live.view

    def add(self, vectors: np.ndarray) -> None:
        """Append prepared vectors (n, dim) as new live rows."""
        self._add_vectors(vectors)
        self._live.append(np.ones(len(vectors), dtype=np.bool_))

    def remove(self, rows: np.ndarray) -> None:
        """Mark rows deleted; they are never scored or returned again."""
        self._live.view[rows] = False

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows``, renumbered 0..len(rows)-1 in that order."""
        self._keep_vectors(rows)
        self._live.keep(rows)

    @abstractmethod
    def _add_vectors(self, vectors: np.ndarray) -> None: ...

    @abstractmethod
    def _keep_vectors(self, rows: np.ndarray) -> None: ...

    @abstractmethod
    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The prepared vectors stored in ``rows``."""

    @abstractmethod
    def score_all(self, queries: np.ndarray) -> np.ndarray:
        """Scores (m, size) of prepared queries against every row; -inf on deleted rows."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best live rows per query, best first: scores (m, k) and rows (m, k).

        Where fewer than ``k`` rows are live, the tail is padded with row -1 and score -inf, the
        way FAISS pads its results.
        """
        scores = self.score_all(queries)
        m, n = scores.shape
        take = min(k, n)
        if take < n:
            part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        else:
            part = np.broadcast_to(np.arange(n), (m, n))
        part_scores = np.take_along_axis(scores, part, axis=1)
        order = np.argsort(-part_scores, axis=1, kind="stable")
        rows = np.take_along_axis(part, order, axis=1)
        best = np.take_along_axis(part_scores, order, axis=1)
        rows = np.where(np.isfinite(best), rows, -1)
        if take < k:
            rows = np.pad(rows, ((0, 0), (0, k - take)), constant_values=-1)
            best = np.pad(best, ((0, 0), (0, k - take)), constant_values=-np.inf)
        return best, rows


class ExactIndex(KeyIndex):
    """Brute force: one matrix product against all rows. Exact, and fastest for small stores."""

    def __init__(self, dim: int, similarity: Similarity) -> None:
        super().__init__(dim, similarity)
        self._vectors = GrowableRows((dim,), np.float32)
        # Cached for "l2", so a lookup does not recompute every key's norm.
        self._sq_norms = GrowableRows((), np.float64)

    def _add_vectors(self, vectors: np.ndarray) -> None:
        self._vectors.append(vectors)
        self._sq_norms.append(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))

    def _keep_vectors(self, rows: np.ndarray) -> None:
        self._vectors.keep(rows)
        self._sq_norms.keep(rows)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self._vectors.view[rows]

    def score_all(self, queries: np.ndarray) -> np.ndarray:
        scores = prepared_scores(queries, self._vectors.view, self.similarity, self._sq_norms.view)
        scores[:, ~self.live] = -np.inf
        return scores


def new_index(kind: str, dim: int, similarity: Similarity) -> KeyIndex:
    """The backend for the ``index=`` option."""
    # "auto" is exact for now; FAISS backends for large stores plug in here.
    return ExactIndex(dim, similarity)
