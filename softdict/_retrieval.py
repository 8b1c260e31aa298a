"""Retrieval policy: which keys each query's softmax runs over. Pure functions of a backend,
prepared queries, the policy and the allowed ids; nothing here holds state.

Three cases, decided per call:

* every key: without a fixed ``top_k``, while at most ``EXACT_MAX_KEYS`` keys are allowed and
  the backend is exact, or, for an estimated attention (``max_sample`` > 0) without the
  spelling channel, while a scan of every allowed key is cheaper than the estimate
  (``Capabilities.scan_max_keys``: any size on an exact index, 150,000 keys on HNSW). Exact;
  ``tail_mass`` is 0.
* top-k attention: ``top_k=k``, the softmax over the k best keys and nothing else.
* estimated full attention: otherwise. The head is the ``max_k`` best keys, found by one search,
  and a sample of the other allowed keys stands for the rest (``with_sampled_tail``,
  ``softdict._sampling``), drawn near the query where the backend can (``sample_near``).
  With ``max_sample=0`` nothing is sampled: the head's k starts at 64 and grows 4x until the
  bound on the mass outside it is under ``tail_tolerance`` or k reaches ``max_k``.

The tail bound (``_attention.tail_mass_bound``) assumes the keys found are the true best k; it
holds for exact backends, not always for approximate ones, which can miss a near key, so it is
reported (``Selection.tail_bound``) only for exact ones.

With the spelling channel (``SpellingRequest``; ``softdict.spelling``) a key's score is the
store's combination of meaning, spelling and marks (``spelling.combination``), and the same
three cases run on that combined score:

* every key: both channels over every allowed key; a fixed k is then the k best combined scores,
  and its tail bound holds exactly.
* otherwise, a union of candidates: the dense index's best keys by meaning (a fixed k, or the
  adaptive rounds, each judged by a bound on the combined score) and the spelling index's
  ``SPELLING_CANDIDATES`` keys to which spelling and marks add most, each scored in the other
  channel (meaning through ``IndexBackend.score_ids``), then ranked by the combined score. A
  key in neither list scores at most (the last dense key's meaning part) + (what spelling and
  marks add to the last spelling candidate), the ceiling the tail bound uses. That holds if both
  lists are the true best of their channel: as exact as the dense index, and for spelling as
  long as no key sharing no 3-gram with the query, or outside the 3-gram pool, gains more than
  the candidates (a mark by initials or by abbreviation needs no shared 3-gram: "uk" for
  "united kingdom").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from softdict._attention import softmax, tail_mass_bound, top_of_scores
from softdict._config import EXACT_MAX_KEYS, SoftDictConfig
from softdict._sampling import (
    FIRST_SAMPLE,
    TailEstimate,
    estimate_tail,
    query_rng,
    sample_size_for,
    z_of,
)
from softdict.index.base import Allow, Capabilities, IndexBackend
from softdict.spelling import SpellingIndex, SpellingQueries
from softdict.spelling.combination import QueryTerms
from softdict.spelling.evidence import EVIDENCE

__all__ = [
    "SPELLING_CANDIDATES",
    "RetrievalPolicy",
    "Selection",
    "SpellingRequest",
    "columns_per_query",
    "scans_every_key",
    "scores_every_key",
    "select",
    "with_sampled_tail",
]

# Adaptive top-k starts here and grows 4x per round until the tail bound is met or max_k reached.
_INITIAL_K = 64
_GROWTH = 4
# Keys the spelling index proposes per query in a large store (or top_k, if larger); a fixed
# top_k also searches the dense index for at least this many, so the k best combined scores are
# chosen from more than k keys of each channel.
SPELLING_CANDIDATES = 64


@dataclass(frozen=True)
class RetrievalPolicy:
    """The options that decide a selection (from the store's config)."""

    temperature: float
    top_k: int | None = None
    max_k: int = 1024
    tail_tolerance: float = 0.01
    # The sampled tail (softdict._sampling): the interval half-width wanted on the tail mass,
    # at this confidence, with at most max_sample keys drawn per query (0: no sample).
    tolerance: float = 0.01
    confidence: float = 0.95
    max_sample: int = 4096
    seed: int = 0

    @classmethod
    def from_config(cls, config: SoftDictConfig, dim: int) -> RetrievalPolicy:
        return cls(
            config.temperature_for(dim),
            config.top_k,
            config.max_k,
            config.tail_tolerance,
            config.tolerance,
            config.confidence,
            config.max_sample,
            config.seed,
        )


@dataclass(frozen=True)
class SpellingRequest:
    """The spelling channel's part of a lookup.

    Attributes:
        index: the store's spelling index.
        queries: the query texts' spelling forms.
        terms: the queries' combination of meaning and spelling (``spelling.combination``).
    """

    index: SpellingIndex
    queries: SpellingQueries
    terms: QueryTerms

    @property
    def marking(self) -> bool:
        """Whether the combination weighs marks (``spelling.evidence``): else none is made."""
        return self.terms.marks.shape[1] > 0

    def subset(self, rows: np.ndarray) -> SpellingRequest:
        """The request of the queries ``rows`` alone."""
        return SpellingRequest(self.index, self.queries.subset(rows), self.terms.subset(rows))

    def marks(self, ids: np.ndarray) -> np.ndarray | None:
        """The marks of the queries with the keys of ``ids`` (``SpellingIndex.marks``); None
        where the combination weighs none."""
        return self.index.marks(self.queries, ids) if self.marking else None

    def score(
        self, meaning: np.ndarray, similarity: np.ndarray, marks: np.ndarray | None
    ) -> np.ndarray:
        """The combined score (``QueryTerms.score``); padding (meaning -inf) stays -inf."""
        return self.terms.score(meaning, similarity, marks)


@dataclass(frozen=True)
class Selection:
    """The keys each of m queries attends to, with their scores and weights.

    Attributes:
        scores: (m, c) float64 scores the softmax ran on (meaning + spelling, or meaning alone);
            -inf marks padding.
        ids: the keys' ids: (c,) shared by every query (attention over every allowed key, in
            increasing id order), or (m, c), one row per query, best first, -1 marking padding.
        weights: (m, c) softmax weights; 0 on padding; each row sums to 1.
        k: (m,) how many keys each query scored exactly (its head; every allowed key when exact).
        tail_mass: (m,) the attention mass of the allowed keys outside the head: 0 when every
            key was scored, the sample's estimate when the tail was sampled, NaN for top-k
            attention (which gives them nothing by its own formula).
        tail_bound: (m,) the deterministic bound on that mass from the head's scores
            (``tail_mass_bound``), NaN where it does not hold: an approximate index can miss
            near keys.
        meaning: (m, c) the similarity of the embeddings alone; -inf marks padding.
        spelling: (m, c) spelling similarities in [0, 1] (NaN on padding), or None when the
            spelling channel was off.
        terms: the queries' combination of meaning and spelling (``spelling.combination``), or
            None when the spelling channel was off.
        sampled: (m, c) which columns are sampled keys, standing for the tail (None: none are).
        n_sampled: (m,) how many keys each query sampled (0 when none).
        tail_stderr: (m,) the standard error of ``tail_mass`` (0 when not sampled).
        z: the normal quantile of the interval's confidence.
        n_draws: (m,) how many draws each query's sample was kept from (those that fell in the
            head were dropped; ``softdict._sampling``); 0 where the rest was scored whole.
        weight_error: (m,) a bound on the total variation between ``weights`` and those of
            every key's exact combined score, from spelling left unscored
            (``spelling.bounded``); None where every score is exact.
    """

    scores: np.ndarray
    ids: np.ndarray
    weights: np.ndarray
    k: np.ndarray
    tail_mass: np.ndarray
    tail_bound: np.ndarray
    meaning: np.ndarray
    spelling: np.ndarray | None = None
    terms: QueryTerms | None = None
    sampled: np.ndarray | None = None
    n_sampled: np.ndarray | None = None
    tail_stderr: np.ndarray | None = None
    z: float = 1.96
    n_draws: np.ndarray | None = None
    weight_error: np.ndarray | None = None

    def tail_interval(self) -> np.ndarray:
        """(m, 2) the interval on ``tail_mass`` at the selection's confidence, within [0, 1]."""
        stderr = self.tail_stderr if self.tail_stderr is not None else np.zeros(len(self.k))
        low = np.clip(self.tail_mass - self.z * stderr, 0.0, 1.0)
        high = np.clip(self.tail_mass + self.z * stderr, 0.0, 1.0)
        return np.stack([low, high], axis=1)


def scores_every_key(capabilities: Capabilities, n_allowed: int) -> bool:
    """Whether attention over all allowed keys is computed over every one of them (else over
    the top candidates, with a bound on the rest), whatever the lookup: calibration and the
    spelling channel, whose cost grows with the keys scored, keep to this."""
    return n_allowed <= EXACT_MAX_KEYS and capabilities.exact


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


def columns_per_query(
    capabilities: Capabilities, policy: RetrievalPolicy, n_allowed: int, spelled: bool
) -> int:
    """About how many keys a query's selection holds (what a batch's memory grows with): a
    lookup is run in chunks of queries by it (``softdict._lookup``)."""
    if scans_every_key(capabilities, policy, n_allowed, spelled):
        return n_allowed
    wanted = policy.top_k if policy.top_k is not None else policy.max_k + policy.max_sample
    if spelled:
        wanted += SPELLING_CANDIDATES  # the spelling candidates join the dense ones
    return max(1, min(wanted, n_allowed))


def select(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest | None = None,
) -> Selection:
    """Score prepared ``queries`` (m, d) and choose, per query, the keys its softmax runs over.

    ``allow`` limits the keys (None: every key); ``n_allowed`` is how many keys it allows.
    ``spelling`` adds the spelling channel (None: meaning alone, as before it existed).
    """
    m = len(queries)
    temperature = policy.temperature
    if m == 0:
        empty = np.zeros((0, 0))
        none = np.zeros(0)
        return Selection(
            empty, np.zeros((0, 0), np.int64), empty, np.zeros(0, int), none, none, empty
        )
    every_key = scans_every_key(backend.capabilities, policy, n_allowed, spelling is not None)
    if spelling is not None:
        if scores_every_key(backend.capabilities, n_allowed):
            return _every_key_with_spelling(backend, queries, policy, allow, n_allowed, spelling)
        head = _union_with_spelling(backend, queries, policy, allow, n_allowed, spelling)
    elif every_key:
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
            scores, ids = backend.search(queries, min(policy.max_k, n_allowed), allow)
        else:
            scores, ids = adaptive_top_k(backend, queries, policy, allow, n_allowed)
        head = Selection(
            scores,
            ids,
            softmax(scores, temperature),
            (ids >= 0).sum(axis=1),
            np.full(m, np.nan),
            _valid_bound(backend, tail_mass_bound(scores, n_allowed, temperature)),
            scores,
        )
    if policy.top_k is not None or policy.max_sample == 0:
        return head
    return with_sampled_tail(backend, queries, head, policy, allow, n_allowed, spelling)


def _valid_bound(backend: IndexBackend, bound: np.ndarray) -> np.ndarray:
    """The tail bound where it holds (exact neighbours), NaN elsewhere."""
    return bound if backend.capabilities.exact else np.full(len(bound), np.nan)


def _every_key_with_spelling(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest,
) -> Selection:
    """Both channels over every allowed key, spelling scored where it can matter
    (``spelling.bounded``); a fixed k keeps the k best combined scores."""
    meaning, ids = backend.score_all(queries, allow)
    m, temperature = len(queries), policy.temperature
    keep = 1 if policy.top_k is None else policy.top_k
    combined, similarity, error = spelling.index.bounded_scores(
        spelling.queries, ids, meaning, spelling.terms, temperature, keep
    )
    if policy.top_k is None:
        weights = softmax(combined, temperature)
        zeros = np.zeros(m)
        return Selection(
            combined, ids, weights, np.full(m, len(ids)), zeros, zeros, meaning, similarity,
            spelling.terms, weight_error=error,
        )  # fmt: skip
    best, columns = top_of_scores(combined, min(policy.top_k, n_allowed))
    found = columns >= 0
    safe = np.where(found, columns, 0)

    def gather(matrix: np.ndarray, padding: float) -> np.ndarray:
        return np.where(found, np.take_along_axis(matrix, safe, axis=1), padding)

    return Selection(
        best,
        np.where(found, ids[safe], -1),
        softmax(best, temperature),
        found.sum(axis=1),
        np.full(m, np.nan),
        tail_mass_bound(best, n_allowed, temperature),
        gather(meaning, -np.inf),
        gather(similarity, np.nan),
        spelling.terms,
        weight_error=error,
    )


@dataclass(frozen=True)
class _SpellingCandidates:
    """Each query's keys spelled most alike (by what spelling and marks add to its scores), with
    both channels' scores and their marks (padded -1 / -inf / NaN / 0; marks None where the
    combination weighs none), and the most that spelling and marks are taken to add to a key
    outside them: what they add to the last candidate."""

    ids: np.ndarray
    meaning: np.ndarray
    similarity: np.ndarray
    marks: np.ndarray | None
    ceiling: np.ndarray


def _spelling_candidates(
    backend: IndexBackend,
    queries: np.ndarray,
    allow: Allow | None,
    n: int,
    spelling: SpellingRequest,
) -> _SpellingCandidates:
    ids, similarity = spelling.index.candidates(spelling.queries, n, allow, spelling.terms)
    meaning = np.full(ids.shape, -np.inf)
    for i, row in enumerate(ids):
        found = row >= 0
        if found.any():
            meaning[i, found] = backend.score_ids(queries[i : i + 1], row[found])[0]
    marks = spelling.marks(ids)
    gain = spelling.terms.gain(similarity, marks)
    # The last candidate's gain; with none, no key shares a 3-gram with the query, and such
    # keys are taken to gain nothing.
    last = np.where(ids >= 0, gain, np.inf).min(axis=1)
    ceiling = np.where(np.isfinite(last), last, 0.0)
    return _SpellingCandidates(ids, meaning, similarity, marks, ceiling)


def _merge(
    dense_scores: np.ndarray,
    dense_ids: np.ndarray,
    lexical: _SpellingCandidates,
    spelling: SpellingRequest,
    rows: np.ndarray,
    *,
    exact: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The union of the dense and spelling candidates of the queries ``rows``, by combined score,
    best first: (combined, ids, meaning, similarity, ceiling), padded -inf / -1 / -inf / NaN.
    ``ceiling`` (per query) is the most a key in neither list can score.

    Without ``exact``, the dense keys that are not spelling candidates are not spelled (their
    spelling and marks count 0, so their combined score is at most what it is): cheap, and a
    tail bound on these scores is at least the bound on the exact ones."""
    request = spelling.subset(rows)
    marking = request.marking
    width = len(EVIDENCE) if marking else 0
    if exact:
        dense_similarity = request.index.similarity(request.queries, dense_ids)
        dense_marks = request.marks(dense_ids)
    else:
        dense_similarity = np.full(dense_ids.shape, np.nan)
        dense_marks = np.zeros((*dense_ids.shape, width)) if marking else None
    parts = []
    for j, i in enumerate(rows.tolist()):
        dense = dense_ids[j] >= 0
        spelled = lexical.ids[i] >= 0
        spelled &= ~np.isin(lexical.ids[i], dense_ids[j, dense])
        dense_spelling = dense_similarity[j, dense]
        row_marks = None if dense_marks is None else dense_marks[j, dense]
        if not exact:
            # Dense keys that are spelling candidates too: their spelling is known.
            order = np.argsort(lexical.ids[i])
            known_ids = lexical.ids[i, order]
            at = np.clip(np.searchsorted(known_ids, dense_ids[j, dense]), 0, len(known_ids) - 1)
            hit = known_ids[at] == dense_ids[j, dense]
            dense_spelling = np.where(hit, lexical.similarity[i, order][at], dense_spelling)
            if row_marks is not None and lexical.marks is not None:
                row_marks = np.where(hit[:, None], lexical.marks[i, order][at], row_marks)
        ids = np.concatenate([dense_ids[j, dense], lexical.ids[i, spelled]])
        meaning = np.concatenate([dense_scores[j, dense], lexical.meaning[i, spelled]])
        similarity = np.concatenate([dense_spelling, lexical.similarity[i, spelled]])
        if row_marks is not None and lexical.marks is not None:
            row_marks = np.concatenate([row_marks, lexical.marks[i, spelled]])
        parts.append((ids, meaning, similarity, row_marks))
    columns = max(len(ids) for ids, _, _, _ in parts)
    ids = np.full((len(rows), columns), -1, dtype=np.int64)
    meaning = np.full((len(rows), columns), -np.inf)
    similarity = np.full((len(rows), columns), np.nan)
    marks = np.zeros((len(rows), columns, width)) if marking else None
    for j, (row_ids, row_meaning, row_similarity, row_marks) in enumerate(parts):
        ids[j, : len(row_ids)] = row_ids
        meaning[j, : len(row_ids)] = row_meaning
        similarity[j, : len(row_ids)] = row_similarity
        if marks is not None and row_marks is not None:
            marks[j, : len(row_ids)] = row_marks
    combined = request.score(meaning, similarity, marks)
    order = np.argsort(-combined, axis=1, kind="stable")

    def by_order(matrix: np.ndarray) -> np.ndarray:
        return np.take_along_axis(matrix, order, axis=1)

    # Dense padding means the index has no more keys to give: then only spelling bounds the rest.
    # A key in neither list scores at most the last dense key's meaning part plus what spelling
    # and marks add to the last spelling candidate (module docstring).
    found = (dense_ids >= 0).sum(axis=1)
    last_dense = np.take_along_axis(dense_scores, np.maximum(found - 1, 0)[:, None], axis=1)[:, 0]
    every = np.arange(len(rows))
    ceiling = (
        request.terms.meaning_part(np.where(found > 0, last_dense, -np.inf), every)
        + lexical.ceiling[rows]
    )
    return by_order(combined), by_order(ids), by_order(meaning), by_order(similarity), ceiling


def _union_with_spelling(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest,
) -> Selection:
    """The union of dense and spelling candidates, ranked by the combined score (module
    docstring): a fixed k keeps the k best; otherwise the dense rounds grow until a bound on
    the combined tail is met, and the union is attended to whole."""
    m, temperature = len(queries), policy.temperature
    lexical = _spelling_candidates(
        backend,
        queries,
        allow,
        min(n_allowed, max(policy.top_k or 0, SPELLING_CANDIDATES)),
        spelling,
    )
    every = np.arange(m)

    def round_bound(rows: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
        # Judged without spelling each round's dense keys (a third of a lookup's time at 10^6
        # keys if it did): a bound at least as large as the exact one, so rounds stop no sooner.
        combined, _, _, _, ceiling = _merge(scores, ids, lexical, spelling, rows, exact=False)
        return tail_mass_bound(combined, n_allowed, temperature, ceiling)

    if policy.top_k is not None:
        dense_k = min(max(policy.top_k, _INITIAL_K), n_allowed)
        dense_scores, dense_ids = backend.search(queries, dense_k, allow)
    else:
        dense_scores, dense_ids = adaptive_top_k(
            backend, queries, policy, allow, n_allowed, round_bound
        )
    combined, ids, meaning, similarity, ceiling = _merge(
        dense_scores, dense_ids, lexical, spelling, every
    )
    if policy.top_k is not None and combined.shape[1] > policy.top_k:
        # Keys cut from the union score at most the best one cut.
        ceiling = np.maximum(ceiling, combined[:, policy.top_k])
        combined, ids = combined[:, : policy.top_k], ids[:, : policy.top_k]
        meaning, similarity = meaning[:, : policy.top_k], similarity[:, : policy.top_k]
    return Selection(
        combined,
        ids,
        softmax(combined, temperature),
        (ids >= 0).sum(axis=1),
        np.full(m, np.nan),
        _valid_bound(backend, tail_mass_bound(combined, n_allowed, temperature, ceiling)),
        meaning,
        similarity,
        spelling.terms,
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
    bound: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per query, with k growing 4x per round (64, 256, 1024, ...) until the tail bound is
    under ``tail_tolerance``, the index has no more candidates, or k reaches ``max_k``.

    ``bound(rows, scores, ids)`` gives the tail bound of the queries ``rows`` from their top
    keys so far (default: the bound on these scores; the spelling channel's union passes one
    on its combined score).

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
        if bound is None:
            tail = tail_mass_bound(head_scores, n_allowed, policy.temperature)
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


def with_sampled_tail(
    backend: IndexBackend,
    queries: np.ndarray,
    head: Selection,
    policy: RetrievalPolicy,
    allow: Allow | None,
    n_allowed: int,
    spelling: SpellingRequest | None,
) -> Selection:
    """``head`` (each query's keys scored exactly, best first) with a sample of the other
    allowed keys standing for them: full attention, estimated (``softdict._sampling``).

    Each query draws ``FIRST_SAMPLE`` keys from its own generator (``IndexBackend.sample_near``),
    and once more up to the size its tail interval asks for. Where ``max_sample`` would reach the
    keys outside the head, they are scored whole instead."""
    z = z_of(policy.confidence)
    rows = []
    for i in range(len(queries)):
        found = head.ids[i] >= 0
        head_ids = head.ids[i, found]
        if n_allowed - len(head_ids) <= policy.max_sample:
            every = allow.ids if allow is not None else backend.ids()
            sample = _Sample(every[~np.isin(every, head_ids)], None, 0)
            scored = _score_sample(backend, queries, i, sample.ids, spelling)
            estimate = estimate_tail(head.scores[i, found], scored[0], None, 0, policy.temperature)
            rows.append((found, sample, scored, estimate))
            continue
        rng = query_rng(policy.seed, queries[i])
        sample = _draw(backend, queries[i], rng, FIRST_SAMPLE, allow, head_ids, policy)
        scored = _score_sample(backend, queries, i, sample.ids, spelling)
        estimate = estimate_tail(
            head.scores[i, found], scored[0], sample.factors(), sample.draws, policy.temperature
        )
        wanted = sample_size_for(
            estimate.tail_stderr, sample.draws, policy.tolerance, z, policy.max_sample
        )
        if wanted > sample.draws:
            more = _draw(backend, queries[i], rng, wanted - sample.draws, allow, head_ids, policy)
            scored = _concatenated(scored, _score_sample(backend, queries, i, more.ids, spelling))
            sample = sample.extended(more)
            estimate = estimate_tail(
                head.scores[i, found], scored[0], sample.factors(), sample.draws,
                policy.temperature,
            )  # fmt: skip
        rows.append((found, sample, scored, estimate))
    return _assemble(head, rows, z)


@dataclass(frozen=True)
class _Sample:
    """One query's sampled keys: the ``ids`` kept of ``draws`` draws (those in the head are
    dropped) and each kept draw's ``probability``; None: every key outside the head, scored."""

    ids: np.ndarray
    probability: np.ndarray | None
    draws: int

    def factors(self) -> np.ndarray | None:
        """Each kept draw's f = 1/(M·p) (``softdict._sampling``); None when nothing is estimated."""
        return None if self.probability is None else 1.0 / (self.draws * self.probability)

    def extended(self, more: _Sample) -> _Sample:
        assert self.probability is not None and more.probability is not None
        return _Sample(
            np.concatenate([self.ids, more.ids]),
            np.concatenate([self.probability, more.probability]),
            self.draws + more.draws,
        )


def _draw(
    backend: IndexBackend,
    query: np.ndarray,
    rng: np.random.Generator,
    count: int,
    allow: Allow | None,
    head_ids: np.ndarray,
    policy: RetrievalPolicy,
) -> _Sample:
    """``count`` draws from the allowed keys (``IndexBackend.sample_near``), those in the head
    dropped: they are counted exactly, and a dropped draw adds 0 to the estimate."""
    ids, probability = backend.sample_near(query, count, rng, allow, policy.temperature)
    kept = ~np.isin(ids, head_ids)
    return _Sample(ids[kept], probability[kept], len(ids))


# A sample's (combined score, meaning, spelling similarity or None) per key.
_Scored = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def _score_sample(
    backend: IndexBackend,
    queries: np.ndarray,
    i: int,
    ids: np.ndarray,
    spelling: SpellingRequest | None,
) -> _Scored:
    """Query ``i``'s (combined score, meaning, spelling similarity) on the sampled ``ids``."""
    meaning = backend.score_ids(queries[i : i + 1], ids)[0] if len(ids) else np.zeros(0)
    if spelling is None:
        return meaning, meaning, None
    request = spelling.subset(np.array([i]))
    similarity = request.index.similarity(request.queries, ids[None, :])[0]
    marks = request.marks(ids[None, :])
    combined = request.score(meaning[None, :], similarity[None, :], marks)[0]
    return combined, meaning, similarity


def _concatenated(first: _Scored, second: _Scored) -> _Scored:
    spelled = None
    if first[2] is not None and second[2] is not None:
        spelled = np.concatenate([first[2], second[2]])
    return np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]]), spelled


def _assemble(
    head: Selection,
    rows: list[tuple[np.ndarray, _Sample, _Scored, TailEstimate]],
    z: float,
) -> Selection:
    """One Selection from the head and each query's sample: the head's columns as they were
    (weights re-estimated), then the sampled keys, padded to one width."""
    m, width = head.ids.shape
    extra = max((len(sample.ids) for _, sample, _, _ in rows), default=0)
    shape = (m, width + extra)

    def widen(matrix: np.ndarray | None, padding: float) -> np.ndarray | None:
        if matrix is None:
            return None
        out = np.full(shape, padding, dtype=matrix.dtype)
        out[:, :width] = matrix
        return out

    ids = widen(head.ids, -1)
    scores = widen(head.scores, -np.inf)
    meaning = widen(head.meaning, -np.inf)
    similarity = widen(head.spelling, np.nan)
    assert ids is not None and scores is not None and meaning is not None
    weights = np.zeros(shape)
    sampled = np.zeros(shape, dtype=bool)
    n_sampled = np.zeros(m, dtype=np.int64)
    n_draws = np.zeros(m, dtype=np.int64)
    tail = np.zeros(m)
    stderr = np.zeros(m)
    for i, (found, sample, scored, estimate) in enumerate(rows):
        sample_ids = sample.ids
        columns = slice(width, width + len(sample_ids))
        weights[i, :width][found] = estimate.head_weights
        weights[i, columns] = estimate.sample_weights
        ids[i, columns] = sample_ids
        scores[i, columns] = scored[0]
        meaning[i, columns] = scored[1]
        if similarity is not None and scored[2] is not None:
            similarity[i, columns] = scored[2]
        sampled[i, columns] = True
        n_sampled[i] = len(sample_ids)
        n_draws[i] = sample.draws
        tail[i], stderr[i] = estimate.tail_mass, estimate.tail_stderr
    return Selection(
        scores,
        ids,
        weights,
        head.k,
        tail,
        head.tail_bound,
        meaning,
        similarity,
        head.terms,
        sampled,
        n_sampled,
        stderr,
        z,
        n_draws,
    )
