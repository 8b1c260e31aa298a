"""The head of a lookup: each query's best keys by the index, with k growing until a bound on
the attention mass outside them is met (``adaptive_top_k``), and that bound where it holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from softdict._attention import tail_mass_bound
from softdict._selection import RetrievalPolicy, Route
from softdict.index.base import Allow, IndexBackend

__all__ = ["INITIAL_K", "adaptive_top_k", "valid_bound"]

# Adaptive top-k starts here and grows 4x per round until the tail bound is met or the head's
# size (max_k, or more: softdict._retrieval.head_size) is reached.
INITIAL_K = 64
_GROWTH = 4


def valid_bound(route: Route, bound: np.ndarray) -> np.ndarray:
    """The tail bound where it holds (exact neighbours), NaN elsewhere: an approximate index can
    miss a near key, and the bound assumes the keys found are the true best."""
    return bound if route.exact else np.full(len(bound), np.nan)


def _growing_k(cap: int) -> Iterator[int]:
    k = min(INITIAL_K, cap)
    while True:
        yield k
        if k >= cap:
            return
        k = min(_GROWTH * k, cap)


def adaptive_top_k(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    route: Route,
    bound: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per query, with k growing 4x per round (64, 256, 1024, ...) until the tail bound is
    under ``tail_tolerance``, the index has no more candidates, or k reaches the route's head
    size (``max_k``, or more: ``softdict._retrieval.head_size``).

    ``bound(rows, scores, ids)`` gives the tail bound of the queries ``rows`` from their top
    keys so far (default: the bound on these scores; the spelling channel's union passes one
    on its combined score).

    Where a larger k makes a search much slower (HNSW), each round searches again, for the
    queries still pending. Elsewhere (exact scoring computes every score anyway; IVF scans about
    the same lists for any k up to the cap) one search at the largest k serves every round: each
    query is cut where the rounds would stop. Both give the same keys for an exact backend.
    """
    cap = route.head_k
    in_rounds = route.capabilities.cost_grows_with_k
    m = len(queries)
    scores = np.full((m, cap), -np.inf)
    ids = np.full((m, cap), -1, dtype=np.int64)
    pending = np.arange(m)
    found_scores = np.zeros((m, 0))
    found_ids = np.zeros((m, 0), dtype=np.int64)
    width = 0
    for k in _growing_k(cap):
        if found_scores.shape[1] < k:
            found_scores, found_ids = backend.search(
                queries[pending], k if in_rounds else cap, allow
            )
        head_scores, head_ids = found_scores[:, :k], found_ids[:, :k]
        if bound is None:
            tail = tail_mass_bound(head_scores, route.n_allowed, policy.temperature)
        else:
            tail = bound(pending, head_scores, head_ids)
        # A padded result means the index has no more candidates to give.
        done = (tail <= policy.tail_tolerance) | (head_ids[:, -1] < 0) | (k >= cap)
        finished = pending[done]
        scores[finished, :k] = head_scores[done]
        ids[finished, :k] = head_ids[done]
        if len(finished):
            width = max(width, k)
        pending = pending[~done]
        found_scores, found_ids = found_scores[~done], found_ids[~done]
        if not len(pending):
            break
    return scores[:, :width], ids[:, :width]
