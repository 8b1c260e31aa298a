"""Retrieval policy: which keys each query's softmax runs over. Pure functions of a backend,
prepared queries, the policy and the allowed ids; nothing here holds state.

Three cases, decided per call:

* every key: without a fixed ``top_k``, while at most ``EXACT_MAX_KEYS`` keys are allowed and
  the backend is exact, or, for an estimated attention (``max_sample`` > 0) without the
  spelling channel, while a scan of every allowed key is cheaper than the estimate
  (``Capabilities.scan_max_keys``: any size on an exact index, 150,000 keys on HNSW). Exact;
  ``tail_mass`` is 0. Past ``EXACT_MAX_KEYS`` on a backend that keeps compressed scores
  (``Capabilities.approximate_scores``: ``index="compressed"``), that scan reads every key's
  codes instead of its vector, and the keys that weigh most are scored exactly
  (``softdict._compressed``), within a stated bound.
* top-k attention: ``top_k=k``, the softmax over the k best keys and nothing else.
* estimated full attention: otherwise. The head is the ``max_k`` best keys (more on a backend
  that draws its tail uniformly: ``head_size``), found by one search, and a sample of the other
  allowed keys stands for the rest (``with_sampled_tail``, ``softdict._sampling``), drawn near
  the query where the backend can (``sample_near``). With ``max_sample=0`` nothing is sampled:
  the head's k starts at 64 and grows 4x until the bound on the mass outside it is under
  ``tail_tolerance`` or k reaches that head size.

The tail bound (``_attention.tail_mass_bound``) assumes the keys found are the true best k; it
holds for exact backends, not always for approximate ones, which can miss a near key, so it is
reported (``Selection.tail_bound``) only for exact ones.

With the spelling channel (``SpellingRequest``) a key's score is the store's combination of
meaning, spelling and marks, and the same three cases run on that combined score
(``softdict.spelling.fusion``: every key in both channels, or a union of each channel's
candidates with a ceiling on the keys in neither).

The pieces live beside it: the policy and the Selection it returns in ``softdict._selection``,
the adaptive head in ``softdict._head``, the sampled tail in ``softdict._sampling``.
"""

from __future__ import annotations

import numpy as np

from softdict._attention import softmax, tail_mass_bound
from softdict._compressed import from_compressed_scores
from softdict._config import EXACT_MAX_KEYS
from softdict._head import adaptive_top_k, valid_bound
from softdict._sampling import with_sampled_tail
from softdict._selection import RetrievalPolicy, Route, Selection
from softdict.index.base import Allow, Capabilities, IndexBackend
from softdict.spelling.fusion import (
    SPELLING_CANDIDATES,
    SpellingRequest,
    every_key_with_spelling,
    union_with_spelling,
    with_best_meaning,
)

__all__ = [
    "HEAD_GROWTH_MAX",
    "SPELLING_CANDIDATES",
    "RetrievalPolicy",
    "Route",
    "Selection",
    "SpellingRequest",
    "draws_a_sample",
    "head_size",
    "route",
    "scans_every_key",
    "scores_every_key",
    "select",
]


def scores_every_key(capabilities: Capabilities, n_allowed: int) -> bool:
    """Whether attention over all allowed keys is computed over every one of them (else over
    the top candidates, with a bound on the rest), whatever the lookup: calibration and the
    spelling channel, whose cost grows with the keys scored, keep to this. An approximate index
    that scans its keys exactly (``Capabilities.scan_max_keys``: HNSW's flat storage) does so
    too where few keys are allowed: a mask of a few thousand keys in a large store, or a store
    that shrank below the size its graph was built at, is then answered as an exact store of
    those keys would answer it (a graph search and the 3-gram candidates can miss keys)."""
    if n_allowed > EXACT_MAX_KEYS:
        return False
    return capabilities.exact or n_allowed <= capabilities.scan_max_keys


def scans_every_key(
    capabilities: Capabilities, policy: RetrievalPolicy, n_allowed: int, spelled: bool
) -> bool:
    """Whether this lookup's full attention is computed over every allowed key: as
    ``scores_every_key``, and also, for an estimated attention without the spelling channel,
    while one scan of the allowed keys is cheaper than the estimate (exact, and faster)."""
    if policy.top_k is not None:
        return False
    if scores_every_key(capabilities, n_allowed):
        return True
    return not spelled and policy.max_sample > 0 and n_allowed <= capabilities.scan_max_keys


# A head widened by ``Capabilities.head_share`` holds at most this many times ``max_k`` keys.
HEAD_GROWTH_MAX = 4


def head_size(capabilities: Capabilities, policy: RetrievalPolicy, n_allowed: int) -> int:
    """The most keys an estimated attention's head holds: ``max_k``, or on a backend with a
    ``head_share`` that share of the allowed keys where it is more, up to ``HEAD_GROWTH_MAX``
    times ``max_k``; never more than are allowed."""
    widened = min(int(capabilities.head_share * n_allowed), HEAD_GROWTH_MAX * policy.max_k)
    return min(n_allowed, max(policy.max_k, widened))


def route(
    capabilities: Capabilities, policy: RetrievalPolicy, n_allowed: int, spelled: bool
) -> Route:
    """How a lookup over ``n_allowed`` keys chooses them, decided once (``Route``)."""
    every = scores_every_key(capabilities, n_allowed)
    head_k = head_size(capabilities, policy, n_allowed)
    scans = scans_every_key(capabilities, policy, n_allowed, spelled)
    # Where the scan would go past the exact path on a backend that keeps compressed scores,
    # it reads every key's codes instead of its vector (softdict._compressed).
    compressed = scans and not every and capabilities.approximate_scores
    if scans:
        columns = n_allowed
    else:
        wanted = policy.top_k if policy.top_k is not None else head_k + policy.max_sample
        if spelled:
            wanted += SPELLING_CANDIDATES  # the spelling candidates join the dense ones
        columns = max(1, min(wanted, n_allowed))
    return Route(
        n_allowed, capabilities, every, scans and not compressed, columns, head_k, compressed
    )


def draws_a_sample(way: Route, policy: RetrievalPolicy) -> bool:
    """Whether a lookup on this route ends in a sampled tail (``with_sampled_tail``): an
    estimated full attention, neither every key scored or scanned nor read from codes, nor
    top-k attention, nor the head alone (``max_sample`` 0)."""
    if policy.top_k is not None or policy.max_sample == 0:
        return False
    return not (way.scores_every_key or way.scans_every_key or way.compressed)


def select(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest | None = None,
    *,
    decided: Route | None = None,
) -> Selection:
    """Score prepared ``queries`` (m, d) and choose, per query, the keys its softmax runs over.

    ``allow`` limits the keys (None: every key); ``n_allowed`` is how many keys it allows.
    ``spelling`` adds the spelling channel (None: meaning alone, as before it existed).
    ``decided``: the lookup's route, decided once for all its chunks (None: decided here).
    Where the backend keeps only lossy codes of its vectors, ``weight_error`` also bounds what
    the codes' error can change (``IndexBackend.score_error``).
    """
    chosen = _selected(backend, queries, policy, allow, n_allowed, spelling, decided)
    errors = backend.score_error(queries) if len(queries) else None
    if errors is None:
        return chosen
    if policy.top_k is not None and policy.top_k < n_allowed:
        # The codes' error can also change which keys are the k best, and a key swapped out
        # is a total variation of up to 1 (a review: 0.33 off under a bound of 0.018).
        errors = np.where(_top_k_may_change(backend, queries, policy, allow, spelling, errors),
                          np.inf, errors)  # fmt: skip
    return chosen.with_code_error(errors, policy.temperature)


def _top_k_may_change(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    spelling: SpellingRequest | None,
    errors: np.ndarray,
) -> np.ndarray:
    """(m,) whether scores each within ``errors`` of the true ones could put another key among
    the k best: the k-th best is not ahead of the next by more than twice the error. With the
    spelling channel the next key's combined score is not at hand: assumed so."""
    if spelling is not None:
        return np.ones(len(queries), dtype=bool)
    assert policy.top_k is not None
    k = policy.top_k
    scores, _ = backend.search(queries, k + 1, allow)
    return np.asarray(scores[:, k - 1] - scores[:, k] <= 2 * errors)


def _selected(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest | None,
    decided: Route | None,
) -> Selection:
    """``select`` before the codes' error."""
    m = len(queries)
    temperature = policy.temperature
    if m == 0:
        empty = np.zeros((0, 0))
        none = np.zeros(0)
        return Selection(
            empty, np.zeros((0, 0), np.int64), empty, np.zeros(0, int), none, none, empty
        )
    way = decided or route(backend.capabilities, policy, n_allowed, spelling is not None)
    assert way.n_allowed == n_allowed
    if spelling is not None:
        if way.scores_every_key:
            return every_key_with_spelling(backend, queries, policy, allow, way, spelling)
        # Read before the union and any sampled tail, which both score with these terms.
        spelling = with_best_meaning(backend, queries, allow, spelling)
        head = union_with_spelling(backend, queries, policy, allow, way, spelling)
    elif way.compressed:
        return from_compressed_scores(backend, queries, policy, allow)
    elif way.scans_every_key:
        scores, ids = backend.score_all(queries, allow)
        zeros = np.zeros(m)
        return Selection(
            scores, ids, softmax(scores, temperature), np.full(m, len(ids)), zeros, zeros, scores
        )
    else:
        if policy.top_k is not None:
            scores, ids = backend.search(queries, min(policy.top_k, n_allowed), allow)
        elif policy.max_sample > 0:
            # The tail is sampled whatever the head's bound says: one search, no rounds.
            scores, ids = backend.search(queries, way.head_k, allow)
        else:
            scores, ids = adaptive_top_k(backend, queries, policy, allow, way)
        head = Selection(
            scores,
            ids,
            softmax(scores, temperature),
            (ids >= 0).sum(axis=1),
            np.full(m, np.nan),
            valid_bound(way, tail_mass_bound(scores, n_allowed, temperature)),
            scores,
        )
    if not draws_a_sample(way, policy):
        return head
    return with_sampled_tail(backend, queries, head, policy, allow, way, spelling)
