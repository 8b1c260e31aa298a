"""What a FAISS backend does itself where FAISS will not: search an index that takes no
selector, and score a search's keys from their stored vectors.

A flat or fast-scan PQ refuses an ``IDSelector`` (FAISS checks it only when it searches): a mask
or the live rows after a delete raised its raw RuntimeError. ``search_by_hand`` limits such a
search itself. And where an index's search does not score each key against its decoded vector
(``softdict.index._code_error.scores_decoded_vectors``), ``rescored`` gives its keys the scores
every other path gives them.
"""

from __future__ import annotations

from collections.abc import Callable

import faiss
import numpy as np

from softdict._attention import top_of_scores
from softdict._rows import ROWS_AT_A_TIME
from softdict._similarity import Metric, metric_scores
from softdict.index._ids import IdRows
from softdict.index.base import Allow

__all__ = ["rescored", "search_by_hand"]

# The vectors of FAISS rows (a backend's ``_stored_rows``).
StoredRows = Callable[[np.ndarray], np.ndarray]


def search_by_hand(
    index: faiss.Index,
    rows: IdRows,
    stored: StoredRows,
    metric: Metric,
    queries: np.ndarray,
    k: int,
    allow: Allow | None,
) -> tuple[np.ndarray, np.ndarray]:
    """A search of ``index`` limited to the allowed (or live) ``rows``, for an index that takes
    no selector: scores and FAISS rows (m, k), best first, padded with -inf and -1. A mask's rows
    are scored from their stored vectors; without one, the search asks for as many more keys as
    there are deleted rows and drops those (at most as many as live ones: the backend compacts
    past that)."""
    m = len(queries)
    if allow is not None:
        return _allowed_rows(rows.rows_of(allow.ids), stored, metric, queries, k)
    wanted = min(k + rows.size - rows.n_live, rows.size)
    distances, found = index.search(queries, wanted)
    scores = -distances if metric is Metric.L2 else distances
    best, kept_rows = np.full((m, k), -np.inf), np.full((m, k), -1, dtype=np.int64)
    for i in range(m):
        kept = found[i] >= 0
        kept[kept] = rows.live[found[i, kept]]
        taken = np.flatnonzero(kept)[:k]
        best[i, : len(taken)], kept_rows[i, : len(taken)] = scores[i, taken], found[i, taken]
    return best, kept_rows


def _allowed_rows(
    allowed: np.ndarray, stored: StoredRows, metric: Metric, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of the ``allowed`` rows by their stored vectors, chunk by chunk."""
    m = len(queries)
    if not len(allowed):
        return np.full((m, k), -np.inf), np.full((m, k), -1, dtype=np.int64)
    chunk_scores, chunk_rows = [], []
    for start in range(0, len(allowed), ROWS_AT_A_TIME):
        part = allowed[start : start + ROWS_AT_A_TIME]
        best, columns = top_of_scores(metric_scores(queries, stored(part), metric), k)
        chunk_scores.append(best)
        chunk_rows.append(np.where(columns >= 0, part[np.maximum(columns, 0)], -1))
    best, columns = top_of_scores(np.concatenate(chunk_scores, axis=1), k)
    picked = np.take_along_axis(np.concatenate(chunk_rows, axis=1), np.maximum(columns, 0), 1)
    return best, np.where(columns >= 0, picked, -1)


def rescored(
    stored: StoredRows, metric: Metric, queries: np.ndarray, scores: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A search's results (m, k) scored again from their stored (decoded) vectors, best first:
    the score every other path gives those keys. FAISS's own can differ: a fast-scan PQ rounds
    its distance tables (0.05-0.3 off), a PCA scores in its own space."""
    scores, rows = scores.copy(), rows.copy()
    for i in range(len(queries)):
        found = np.flatnonzero(rows[i] >= 0)
        if not len(found):
            continue
        fresh = metric_scores(queries[i : i + 1], stored(rows[i, found]), metric)[0]
        order = np.argsort(-fresh, kind="stable")
        scores[i, : len(found)] = fresh[order]
        rows[i, : len(found)] = rows[i, found[order]]
        scores[i, len(found) :], rows[i, len(found) :] = -np.inf, -1
    return scores, rows
