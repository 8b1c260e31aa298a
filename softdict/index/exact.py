"""Exact search in numpy: every key scored by one matrix product (``index="flat"``).

Also the small phase of ``index="auto"`` and of trainable FAISS indexes (see ``growing``): up to
10,000 keys one matrix product costs about what any index costs (benchmarks/scale.py) and the
answer is exact. One matrix product and a partial sort also beat FAISS's single-query flat scan,
whose k-sized heap is slow for the hundreds of keys attention asks for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from softdict._attention import top_of_scores
from softdict._files import FileReader
from softdict._rows import GrowableRows
from softdict._similarity import Metric, metric_scores, squared_norms
from softdict.index._ids import IdRows, increasing_ids
from softdict.index.base import Allow, BackendDump, Capabilities, RowsBackend

__all__ = ["SCAN_ANY_SIZE", "ExactBackend", "score_rows"]

# Scoring a gathered copy of the allowed rows beats scoring every row and selecting columns
# only when the allowed rows are a small share of all of them.
_GATHER_FRACTION = 0.25

# ``Capabilities.scan_max_keys`` of an exact index: its search is a scan of every key, so a
# scan is never dearer than the head search and sample an estimated attention would make.
SCAN_ANY_SIZE = 2**62


def score_rows(
    queries: np.ndarray,
    vectors: np.ndarray,
    rows: IdRows,
    allow: Allow | None,
    metric: Metric,
    sq_norms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``IndexBackend.score_all`` over ``vectors`` (every row, tombstones included) whose ids
    and live rows ``rows`` keeps: the scores of the live (and allowed) rows, and their ids."""
    if allow is None and not rows.has_tombstones:
        return metric_scores(queries, vectors, metric, sq_norms), rows.ids
    # Allowed ids are sorted, and so are the ids by row: these rows come out increasing.
    picked = rows.live_rows() if allow is None else rows.rows_of(allow.ids)
    if len(picked) < _GATHER_FRACTION * len(vectors):
        part_norms = sq_norms[picked] if sq_norms is not None else None
        scores = metric_scores(queries, vectors[picked], metric, part_norms)
    else:
        scores = metric_scores(queries, vectors, metric, sq_norms)[:, picked]
    return scores, rows.ids[picked]


class ExactBackend(RowsBackend):
    """Prepared vectors in a numpy array by row; exact scores and exact top-k."""

    def __init__(self, dim: int, metric: Metric, *, name: str = "flat") -> None:
        super().__init__(dim, metric)
        self.name = name
        self._vectors = GrowableRows((dim,), np.float32)
        self._sq_norms = GrowableRows((), np.float64)  # kept for L2

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=True, scan_max_keys=SCAN_ANY_SIZE)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._append(ids, vectors)

    def _append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Store ``vectors`` under ``ids`` in new rows (what ``add`` and ``restore`` share)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._rows.append(ids)
        self._vectors.append(vectors)
        if self.metric is Metric.L2:
            self._sq_norms.append(squared_norms(vectors))

    def remove(self, ids: np.ndarray) -> None:
        self._rows.remove(ids)
        if self._rows.needs_compaction:
            self._keep(self._rows.live_rows())

    def _keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (increasing), renumbered from 0: compaction."""
        self._rows.keep(rows)
        self._vectors.keep(rows)
        if self.metric is Metric.L2:
            self._sq_norms.keep(rows)

    def score_all(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        sq_norms = self._sq_norms.view if self.metric is Metric.L2 else None
        return score_rows(queries, self._vectors.view, self._rows, allow, self.metric, sq_norms)

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = self.score_all(queries, allow)
        best, columns = top_of_scores(scores, k)
        if not len(ids):
            return best, columns  # nothing held: all padding
        return best, np.where(columns >= 0, ids[np.maximum(columns, 0)], -1)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        rows = self._rows.rows_of(np.asarray(ids, dtype=np.int64))
        if len(rows) != len(ids):
            raise KeyError("vectors() asked for ids this backend does not hold")
        return self._vectors.view[rows]

    def describe(self) -> str:
        return self.name

    def memory_bytes(self) -> int:
        return int(self._vectors.view.nbytes + self._sq_norms.view.nbytes + self._rows.nbytes())

    def dump(self) -> BackendDump:
        live = self._rows.live_rows()
        return BackendDump(
            {},
            {"embeddings.npy": self._vectors.view[live], "embedding_ids.npy": self._rows.ids[live]},
        )

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        ids = files.npy("embedding_ids.npy", np.int64, (None,))
        if not increasing_ids(ids):
            raise files.error("embedding_ids.npy", "holds ids that are negative or not increasing")
        vectors = files.finite_npy("embeddings.npy", np.float32, (len(ids), self.dim))
        self._append(ids, vectors)
