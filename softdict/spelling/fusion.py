"""Spelling fused with meaning in a lookup: a key's score is the store's combination of meaning,
spelling and marks (``spelling.combination``), and retrieval (``softdict._retrieval``) runs its
cases on that combined score:

* every key: both channels over every allowed key (``every_key_with_spelling``); a fixed k is
  then the k best combined scores, and its tail bound holds exactly.
* otherwise, a union of candidates (``union_with_spelling``): the dense index's best keys by
  meaning (the adaptive rounds, each judged by a bound on the combined score; for a fixed k at
  least k of them) and
  the spelling index's ``SPELLING_CANDIDATES`` keys to which spelling and marks add most, each
  scored in the other channel (meaning through ``IndexBackend.score_ids``), then ranked by the
  combined score. A key in neither list scores at most (the last dense key's meaning part) +
  (what spelling and marks add to the last spelling candidate), the ceiling the tail bound
  uses. That holds if both lists are the true best of their channel: as exact as the dense
  index, and for spelling as long as no key sharing no 3-gram with the query, or outside the
  3-gram pool, gains more than the candidates. A mark needs no shared 3-gram ("uk" for "united
  kingdom"), nor does a short query's spelling ("abc" for "acbac"): a store proposes the keys
  of the query's first character that a mark, or a short query's spelling, could lift
  (``spelling.marked``; a Milvus store through its pair features, from format 4 on, up to its
  pool's size of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from softdict._attention import softmax, tail_mass_bound, top_of_scores
from softdict._head import INITIAL_K, adaptive_top_k, valid_bound
from softdict._selection import RetrievalPolicy, Route, Selection
from softdict.index.base import Allow, IndexBackend, is_in
from softdict.spelling.evidence import EVIDENCE
from softdict.spelling.source import SpellingSource
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries

__all__ = [
    "SPELLING_CANDIDATES",
    "SpellingRequest",
    "every_key_with_spelling",
    "union_with_spelling",
    "with_best_meaning",
]

# Keys the spelling index proposes per query in a large store (or top_k, if larger); a fixed
# top_k also searches the dense index for at least this many, so the k best combined scores are
# chosen from more than k keys of each channel.
SPELLING_CANDIDATES = 64


@dataclass(frozen=True)
class SpellingRequest:
    """The spelling channel's part of a lookup.

    Attributes:
        index: the store's spelling channel (``SpellingIndex`` or a Milvus store's).
        queries: the query texts' spelling forms.
        terms: the queries' combination of meaning and spelling (``spelling.combination``).
    """

    index: SpellingSource
    queries: SpellingQueries
    terms: QueryTerms

    @property
    def marking(self) -> bool:
        """Whether the combination weighs marks (``spelling.evidence``): else none is made."""
        return self.terms.weighs_marks

    def subset(self, rows: np.ndarray) -> SpellingRequest:
        """The request of the queries ``rows`` alone."""
        return SpellingRequest(self.index, self.queries.subset(rows), self.terms.subset(rows))

    def given_meaning(self, best: np.ndarray) -> SpellingRequest:
        """The request once each query's best meaning score over the keys it may attend to is
        known (``QueryTerms.given_meaning``: ``rule-8`` reads it; the others do not)."""
        terms = self.terms.given_meaning(best)
        return self if terms is self.terms else SpellingRequest(self.index, self.queries, terms)

    def marks(self, ids: np.ndarray) -> np.ndarray | None:
        """The marks of the queries with the keys of ``ids`` (``SpellingIndex.marks``); None
        where the combination weighs none."""
        return self.index.marks(self.queries, ids) if self.marking else None

    def spelled(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The similarity and marks (None where the combination weighs none) of each query with
        the keys of ``ids`` (m, c), spelled only where spelling could add to their scores
        (``SpellingIndex.spelling_of``: NaN and no mark elsewhere)."""
        return self.index.spelling_of(self.queries, ids, self.terms)

    def score(
        self, meaning: np.ndarray, similarity: np.ndarray, marks: np.ndarray | None
    ) -> np.ndarray:
        """The combined score (``QueryTerms.score``); padding (meaning -inf) stays -inf."""
        return self.terms.score(meaning, similarity, marks)


def every_key_with_spelling(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    route: Route,
    spelling: SpellingRequest,
) -> Selection:
    """Both channels over every allowed key, spelling scored where it can matter
    (``spelling.bounded``); a fixed k keeps the k best combined scores."""
    meaning, ids = backend.score_all(queries, allow)
    if spelling.terms.reads_meaning.any():  # rule-8: each query's best over every allowed key
        spelling = spelling.given_meaning(meaning.max(axis=1, initial=-np.inf))
    m, temperature = len(queries), policy.temperature
    keep = 1 if policy.top_k is None else policy.top_k
    scored = spelling.index.bounded_scores(
        spelling.queries, ids, meaning, spelling.terms, temperature, keep
    )
    combined, similarity, error, weights = (
        scored.combined, scored.similarity, scored.error, scored.weights
    )  # fmt: skip
    if policy.top_k is None:
        if not scored.weighed.all():  # rows whose weights the error bound did not make
            weights[~scored.weighed] = softmax(combined[~scored.weighed], temperature)
        zeros = np.zeros(m)
        return Selection(
            combined, ids, weights, np.full(m, len(ids)), zeros, zeros, meaning, similarity,
            spelling.terms, weight_error=error,
        )  # fmt: skip
    best, columns = top_of_scores(combined, min(policy.top_k, route.n_allowed))
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
        tail_mass_bound(best, route.n_allowed, temperature),
        gather(meaning, -np.inf),
        gather(similarity, np.nan),
        spelling.terms,
        weight_error=error,
    )


def with_best_meaning(
    backend: IndexBackend, queries: np.ndarray, allow: Allow | None, spelling: SpellingRequest
) -> SpellingRequest:
    """The request once the queries whose terms read their best meaning score (``rule-8``'s
    short queries) have it, from a search of the index for their one best allowed key (as exact
    as the index); the request itself where none does. Before their spelling candidates are
    chosen: what spelling adds, which ranks those, depends on it."""
    rows = np.flatnonzero(spelling.terms.reads_meaning)
    if not len(rows):
        return spelling
    best = np.full(len(queries), np.inf)  # +inf: sure of meaning, nothing changes
    found, _ = backend.search(queries[rows], 1, allow)
    best[rows] = found[:, 0] if found.shape[1] else -np.inf
    return spelling.given_meaning(best)


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
        dense_similarity, dense_marks = request.spelled(dense_ids)
    else:
        dense_similarity = np.full(dense_ids.shape, np.nan)
        dense_marks = np.zeros((*dense_ids.shape, width)) if marking else None
    parts = []
    for j, i in enumerate(rows.tolist()):
        dense = dense_ids[j] >= 0
        spelled = lexical.ids[i] >= 0
        spelled &= ~is_in(lexical.ids[i], dense_ids[j, dense])
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


def union_with_spelling(
    backend: IndexBackend,
    queries: np.ndarray,
    policy: RetrievalPolicy,
    allow: Allow | None,
    route: Route,
    spelling: SpellingRequest,
) -> Selection:
    """The union of dense and spelling candidates, ranked by the combined score (module
    docstring): the dense rounds grow until a bound on the combined tail is met, and the union
    is attended to whole, or a fixed k keeps its k best."""
    m, temperature = len(queries), policy.temperature
    lexical = _spelling_candidates(
        backend,
        queries,
        allow,
        min(route.n_allowed, max(policy.top_k or 0, SPELLING_CANDIDATES)),
        spelling,
    )
    every = np.arange(m)

    def round_bound(rows: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
        # Judged without spelling each round's dense keys (a third of a lookup's time at 10^6
        # keys if it did): a bound at least as large as the exact one, so rounds stop no sooner.
        combined, _, _, _, ceiling = _merge(scores, ids, lexical, spelling, rows, exact=False)
        return tail_mass_bound(combined, route.n_allowed, temperature, ceiling)

    # A fixed k takes the dense keys full attention's rounds take, and at least max(k, 64):
    # its k best are then full attention's. A fixed search of max(k, 64) alone missed a key that
    # the rounds found, spelled like the query but sharing no 3-gram with it, so nearest(q, 1)
    # and attend(q) named different best keys (a hostile-input probe, past 10^4 keys).
    dense_k = 0 if policy.top_k is None else min(max(policy.top_k, INITIAL_K), route.n_allowed)
    if dense_k >= route.head_k:  # the fixed search holds whatever the rounds (capped) would take
        dense_scores, dense_ids = backend.search(queries, dense_k, allow)
    else:
        dense_scores, dense_ids = adaptive_top_k(
            backend, queries, policy, allow, route, round_bound
        )
        if dense_scores.shape[1] < dense_k:
            dense_scores, dense_ids = backend.search(queries, dense_k, allow)
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
        valid_bound(route, tail_mass_bound(combined, route.n_allowed, temperature, ceiling)),
        meaning,
        similarity,
        spelling.terms,
    )
