"""Retrieval policy: which keys each query's softmax runs over. Pure functions of a backend,
prepared queries, the policy and the allowed ids; nothing here holds state.

Three cases, decided per call:

* every key: without a fixed ``top_k``, while at most ``EXACT_MAX_KEYS`` keys are allowed and
  the backend can score them all. Exact; ``tail_mass`` is 0.
* a fixed k: ``top_k=k``, the softmax over the k best keys.
* adaptive k: otherwise, k starts at 64 and grows 4x until the bound on the left-out mass is
  under ``tail_tolerance`` or k reaches ``max_k``.

The tail bound (``_attention.tail_mass_bound``) assumes the keys found are the true best k; it
holds for exact backends, not always for approximate ones, which can miss a near key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from softdict._attention import softmax, tail_mass_bound
from softdict._config import EXACT_MAX_KEYS, SoftDictConfig
from softdict.index.base import Allow, Capabilities, IndexBackend

__all__ = ["RetrievalPolicy", "Selection", "scores_every_key", "select"]

# Adaptive top-k starts here and grows 4x per round until the tail bound is met or max_k reached.
_INITIAL_K = 64
_GROWTH = 4


@dataclass(frozen=True)
class RetrievalPolicy:
    """The options that decide a selection (from the store's config)."""

    temperature: float
    top_k: int | None = None
    max_k: int = 1024
    tail_tolerance: float = 0.01

    @classmethod
    def from_config(cls, config: SoftDictConfig, dim: int) -> RetrievalPolicy:
        return cls(config.temperature_for(dim), config.top_k, config.max_k, config.tail_tolerance)


@dataclass(frozen=True)
class Selection:
    """The keys each of m queries attends to, with their scores and weights.

    Attributes:
        scores: (m, c) float64 similarity scores; -inf marks padding.
        ids: the keys' ids: (c,) shared by every query (attention over every allowed key, in
            increasing id order), or (m, c), one row per query, best first, -1 marking padding.
        weights: (m, c) softmax weights; 0 on padding; each row sums to 1.
        k: (m,) how many keys each softmax ran over.
        tail_mass: (m,) bound on the attention mass of allowed keys left out (0 when exact).
    """

    scores: np.ndarray
    ids: np.ndarray
    weights: np.ndarray
    k: np.ndarray
    tail_mass: np.ndarray


def scores_every_key(capabilities: Capabilities, n_allowed: int) -> bool:
    """Whether attention over all allowed keys is computed over every one of them (else over
    the top candidates, with a bound on the rest)."""
    return n_allowed <= EXACT_MAX_KEYS and capabilities.exact


def select(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
) -> Selection:
    """Score prepared ``queries`` (m, d) and choose, per query, the keys its softmax runs over.

    ``allow`` limits the keys (None: every key); ``n_allowed`` is how many keys it allows.
    """
    m = len(queries)
    temperature = policy.temperature
    if m == 0:
        empty = np.zeros((0, 0))
        return Selection(empty, np.zeros((0, 0), np.int64), empty, np.zeros(0, int), np.zeros(0))
    if policy.top_k is None and scores_every_key(backend.capabilities, n_allowed):
        scores, ids = backend.score_all(queries, allow)
        return Selection(
            scores, ids, softmax(scores, temperature), np.full(m, len(ids)), np.zeros(m)
        )
    if policy.top_k is not None:
        scores, ids = backend.search(queries, min(policy.top_k, n_allowed), allow)
    else:
        scores, ids = adaptive_top_k(backend, queries, policy, allow, n_allowed)
    return Selection(
        scores,
        ids,
        softmax(scores, temperature),
        (ids >= 0).sum(axis=1),
        tail_mass_bound(scores, n_allowed, temperature),
    )


def _growing_k(cap: int) -> Iterator[int]:
    k = min(_INITIAL_K, cap)
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
    n_allowed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per query, with k growing 4x per round (64, 256, 1024, ...) until the tail bound is
    under ``tail_tolerance``, the index has no more candidates, or k reaches ``max_k``.

    Where a larger k makes a search much slower (HNSW), each round searches again, for the
    queries still pending. Elsewhere (exact scoring computes every score anyway; IVF scans about
    the same lists for any k up to max_k) one search at the largest k serves every round: each
    query is cut where the rounds would stop. Both give the same keys for an exact backend.
    """
    cap = min(policy.max_k, n_allowed)
    in_rounds = backend.capabilities.cost_grows_with_k
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
        bound = tail_mass_bound(head_scores, n_allowed, policy.temperature)
        # A padded result means the index has no more candidates to give.
        done = (bound <= policy.tail_tolerance) | (head_ids[:, -1] < 0) | (k >= cap)
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
