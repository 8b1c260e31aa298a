"""A soft lookup after encoding: from raw query embeddings to values, ``Attention`` or nearest
keys. Functions of a store (the façade holds its lock around them)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from softdict._attention import mass_interval, top_columns
from softdict._config import EXACT_MAX_KEYS
from softdict._errors import NoMatchError
from softdict._results import Attention
from softdict._retrieval import (
    RetrievalPolicy,
    Selection,
    SpellingRequest,
    draws_a_sample,
    route,
    select,
)
from softdict._sampling import value_stderr
from softdict._types import BatchValue, Mask, NoDefault, Value
from softdict.spelling import SpellingQueries
from softdict.spelling.combination import combination_for
from softdict.spelling.evidence import EVIDENCE
from softdict.spelling.terms import QueryTerms, query_terms
from softdict.store.base import Store
from softdict.values.base import LossKind, ValueColumn

__all__ = [
    "attentions",
    "lookup_values",
    "nearest_keys",
    "selections",
    "spelling_terms",
    "terms_of",
]


# Score-matrix entries (queries x keys) of one chunk of a batch: a batch is looked up in
# chunks of queries so that each matrix of a selection stays near 8 MB (float64), however large
# the batch and the store. Chunks of 32 MB made a bulk lookup of 2,000 queries over 10^4 keys
# ~13% slower (interleaved runs here): blocks that large come from mmap as new pages for every
# chunk (glibc's threshold tops out at 32 MB), and leave the caches between passes. Every query
# is selected on its own (its sample seeded by the query), so a query's result does not depend
# on the batch it comes in, but for the last float32 bit of its scores, which BLAS sums in
# another order for a matrix than for one row (docs/guarantees.md). A backend that keeps what a
# search computed for its draws, for a few queries only, caps the chunks of a lookup that draws
# a sample (``Capabilities.batch_queries``).
CHUNK_ENTRIES = 1 << 20


def selections(
    store: Store,
    embeddings: np.ndarray,
    mask: Mask,
    texts: list[str] | None,
    top_k: int | None = None,
) -> Iterator[tuple[slice, Selection]]:
    """The keys each raw query embedding attends to, by the store's retrieval policy, chunk by
    chunk of queries: (the chunk's rows, its Selection). With the query ``texts`` (None for
    queries given as embeddings), by spelling too, unless the store's ``lexical`` is 0.
    ``top_k`` overrides the policy's (``nearest``)."""
    prepared = store.prepare_queries(embeddings)
    allow = store.allow(mask)  # once: a predicate mask calls the predicate on every key
    assert store.dim is not None  # prepare_queries checked against it
    policy = RetrievalPolicy.from_config(store.config, store.dim)
    if top_k is not None:
        policy = dataclasses.replace(policy, top_k=top_k)
    n_allowed = len(store) if allow is None else len(allow)
    spelling = _spelling_request(store, texts) if texts is not None else None
    backend = store.backend
    # Decided once for the whole batch: no step below asks the backend or the policy again.
    decided = route(backend.capabilities, policy, n_allowed, spelling is not None)
    step = max(1, CHUNK_ENTRIES // decided.columns)
    if decided.capabilities.batch_queries and draws_a_sample(decided, policy):
        # A backend that keeps what a search computed for its draws, for so many queries only.
        step = min(step, decided.capabilities.batch_queries)
    if len(prepared) <= step:  # one chunk: the whole batch as it is
        yield (
            slice(0, len(prepared)),
            select(backend, prepared, policy, allow, n_allowed, spelling, decided=decided),
        )
        return
    for start in range(0, len(prepared), step):
        rows = slice(start, start + step)
        part = None if spelling is None else spelling.subset(np.arange(len(prepared))[rows])
        yield rows, select(backend, prepared[rows], policy, allow, n_allowed, part, decided=decided)


def spelling_terms(store: Store, texts: list[str]) -> tuple[SpellingQueries, QueryTerms] | None:
    """``texts`` as the spelling channel takes them, and their terms under the store's
    combination of meaning and spelling (``spelling.combination``); None where the store's
    ``lexical`` is 0. Lookups, fit and calibrate all start the channel here."""
    if not store.config.lexical:
        return None
    return spelling_queries(store, texts), terms_of(store, texts)


def spelling_queries(store: Store, texts: list[str]) -> SpellingQueries:
    """``texts`` as the store's combination spells them (with their accents, where it reads
    them, both ways where it does; compared in any order of words by both measures, where it
    does)."""
    combination = store.config.combination
    return SpellingQueries.of(
        texts,
        accents=combination.reads_accents,
        edits_sorted=combination.edits_sorted,
        as_typed=combination.prefers_as_typed,
    )


def terms_of(
    store: Store, texts: list[str], *, lexical: float | None = None, known: float | None = None
) -> QueryTerms:
    """The terms of ``texts`` under the store's combination, at its ``lexical`` and
    ``lexical_known`` or at those given (what calibrate and fit try)."""
    config = store.config
    assert store.dim is not None
    unit = config.similarity.cosine_unit(store.dim)  # the spelling weights' unit: one cosine
    combination = combination_for(
        config.combination, config.lexical_known if known is None else known
    )
    lexical = config.lexical if lexical is None else lexical
    as_cosine = functools.partial(config.similarity.as_cosine, dim=store.dim)
    return query_terms(combination, texts, lexical, unit, as_cosine)


def _spelling_request(store: Store, texts: list[str]) -> SpellingRequest | None:
    found = spelling_terms(store, texts)
    return None if found is None else SpellingRequest(store.spelling, *found)


def lookup_values(
    store: Store,
    embeddings: np.ndarray,
    mask: Mask,
    texts: list[str] | None,
    single: bool,
    min_score: float | None,
    default: object,
) -> Value | BatchValue:
    """The blended values; below ``min_score``, ``default`` or NoMatchError (no default)."""
    parts: list[BatchValue] = []
    best_scores, best_ids = [], []
    column: ValueColumn[Any] | None = None
    for _, chosen in selections(store, embeddings, mask, texts):
        column, slots = store.values_of(chosen.ids)
        parts.append(column.blend(chosen.weights, slots))
        scores, ids = _best_keys(chosen)
        best_scores.append(scores)
        best_ids.append(ids)
    assert column is not None
    blended = _joined(parts)
    scores, ids = np.concatenate(best_scores), np.concatenate(best_ids)
    misses = np.zeros(len(scores), dtype=bool)
    if min_score is not None and len(misses):
        misses = scores < min_score
        if misses.any() and isinstance(default, NoDefault):
            raise _no_match(store, scores, ids, texts, min_score, misses)
    if single:
        return default if misses[0] else column.result(blended, 0)  # type: ignore[return-value]
    return column.fill(blended, misses, default) if misses.any() else blended


def _best_keys(chosen: Selection) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best score in ``chosen`` and the id of its key."""
    if not chosen.scores.shape[1]:
        return np.full(len(chosen.scores), -np.inf), np.full(len(chosen.scores), -1)
    best = np.argmax(chosen.scores, axis=1)
    scores = chosen.scores[np.arange(len(best)), best]
    ids = chosen.ids[best] if chosen.ids.ndim == 1 else chosen.ids[np.arange(len(best)), best]
    return scores, ids


def _joined(parts: list[BatchValue]) -> BatchValue:
    """The chunks' blended values as one batch: labels in a list, numbers in an array."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], list):
        return [label for part in parts for label in part]
    return np.concatenate(parts)  # type: ignore[arg-type]


def _no_match(
    store: Store,
    scores: np.ndarray,
    ids: np.ndarray,
    texts: list[str] | None,
    min_score: float,
    misses: np.ndarray,
) -> NoMatchError:
    i = int(np.argmax(misses))
    what = f"query {texts[i]!r}" if texts is not None else f"query embedding #{i}"
    n = int(misses.sum())
    # A batch of texts is looked up once per distinct text (softdict._soft_lookup).
    kind = "distinct " if texts is not None else ""
    noun = "query" if n == 2 else "queries"
    others = f" ({n - 1} other {kind}{noun} in the batch missed too)" if n > 1 else ""
    return NoMatchError(
        f"no key scored at least min_score={min_score} for {what}; the best was "
        f"{store.keys_of(np.array([ids[i]]))[0]!r} at {scores[i]:.4f}{others}. "
        f"Lower min_score, or pass default= to get a value back instead of this error"
    )


def _optional(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def value_stderrs(
    column: ValueColumn[Any], chosen: Selection, slots: np.ndarray, blended: BatchValue
) -> list[float | np.ndarray | None]:
    """Per query, the standard error of its blended value due to its sample
    (``_sampling.value_stderr``): for numbers, of the number or each component; for labels, of
    the returned label's probability. None where nothing was sampled."""
    if chosen.sampled is None:
        return [None] * len(chosen.weights)
    results: list[float | np.ndarray | None] = []
    assert chosen.tail_stderr is not None and chosen.n_draws is not None
    for i in range(len(chosen.weights)):
        draws = int(chosen.n_draws[i])
        sampled = chosen.sampled[i]
        if chosen.tail_stderr[i] == 0.0:  # the rest scored whole (or nothing drawn): exact
            sampled = np.zeros_like(sampled)
        weights = chosen.weights[i, sampled]
        if column.loss is LossKind.SQUARED_ERROR:
            value = np.asarray(blended[i], dtype=np.float64)
            values = np.asarray(column.calibration_values(slots[i, sampled]), dtype=np.float64)
            error = value_stderr(weights, values, value, draws)
            results.append(float(error) if error.ndim == 0 else error)
        else:
            found = chosen.ids[i] >= 0
            # Label ids (any int64): numbered here before they are counted.
            labels, codes = np.unique(
                column.calibration_values(slots[i, found]), return_inverse=True
            )
            mass = np.bincount(codes.reshape(-1), chosen.weights[i, found])
            winner = labels[int(mass.argmax())]
            is_winner = (column.calibration_values(slots[i, sampled]) == winner).astype(float)
            winner_mass = np.float64(mass.max())
            results.append(float(value_stderr(weights, is_winner, winner_mass, draws)))
    return results


def attentions(
    store: Store, embeddings: np.ndarray, mask: Mask, texts: list[str] | None
) -> list[Attention]:
    """One ``Attention`` per raw query embedding (``texts``: the query texts, or None)."""
    found: list[Attention] = []
    for rows, chosen in selections(store, embeddings, mask, texts):
        found += _attentions(store, chosen, None if texts is None else texts[rows])
    return found


def _attentions(store: Store, chosen: Selection, texts: list[str] | None) -> list[Attention]:
    """One ``Attention`` per query: keys by weight, weights, scores, value, distribution, and
    for an estimated attention the tail's estimate and the value's standard error."""
    column, slots = store.values_of(chosen.ids)
    blended = column.blend(chosen.weights, slots)
    explained = column.explain(chosen.weights, slots, lambda: store.present_slots(column))
    stderrs = value_stderrs(column, chosen, slots, blended)
    weight_errors = chosen.weight_errors()
    # A scan past EXACT_MAX_KEYS keys lists the max_k best, as an estimate would: listing all of
    # 10^5 keys took about 95 ms a query, against 7 ms for the lookup. The rest's mass is exact
    # (or, read from codes, surely within its interval): the selection's own interval is then
    # not needed.
    listed = (
        store.config.max_k if chosen.ids.ndim == 1 and chosen.ids.size > EXACT_MAX_KEYS else None
    )
    intervals = chosen.tail_interval() if listed is None else None
    terms = chosen.terms
    marking = texts is not None and terms is not None and terms.weighs_marks
    spelled = spelling_queries(store, texts) if texts is not None and marking else None
    results = []
    for i in range(len(chosen.weights)):
        ids = chosen.ids if chosen.ids.ndim == 1 else chosen.ids[i]
        found = np.isfinite(chosen.scores[i])  # padding scores -inf
        if chosen.sampled is not None:
            found &= ~chosen.sampled[i]  # the sample stands for the tail; keys are the head
        weights, scores = chosen.weights[i, found], chosen.scores[i, found]
        order = _best_first(scores, listed)
        # Every key: keys in the selection's own order (id order, which the store maps without
        # a search), then by weight; else only the listed keys.
        keys = store.keys_of(ids[found]) if listed is None else store.keys_of(ids[found][order])
        key_order = order.tolist() if listed is None else range(len(order))
        if intervals is not None:
            tail_mass, interval, bound = chosen.tail_mass[i], intervals[i], chosen.tail_bound[i]
        else:  # the mass of the keys not listed
            tail_mass, interval = _unlisted_mass(chosen, i, found, order)
            bound = interval[1]
        spelling = None if chosen.spelling is None else chosen.spelling[i, found][order]
        results.append(
            Attention(
                query=texts[i] if texts is not None else None,
                value=column.result(blended, i),
                keys=tuple(keys[j] for j in key_order),
                weights=weights[order],
                scores=scores[order],
                k=int(chosen.k[i]) if listed is None else len(order),
                tail_mass=_optional(tail_mass),
                distribution=explained[i],
                meaning_scores=chosen.meaning[i, found][order],
                spelling_scores=spelling,
                spelling_weight=0.0 if terms is None else float(terms.weight[i]),
                meaning_factor=1.0 if terms is None else float(terms.scale[i]),
                score_offset=0.0 if terms is None else float(terms.offset[i]),
                marks=None if spelled is None else _marks(store, spelled.row(i), ids[found][order]),
                tail_interval=(
                    None if np.isnan(tail_mass) else (float(interval[0]), float(interval[1]))
                ),
                tail_bound=_optional(bound),
                sampled=0 if chosen.n_sampled is None else int(chosen.n_sampled[i]),
                value_stderr=stderrs[i],
                weight_error=0.0 if weight_errors is None else float(weight_errors[i]),
            )
        )
    return results


def _unlisted_mass(
    chosen: Selection, i: int, found: np.ndarray, order: np.ndarray
) -> tuple[float, np.ndarray]:
    """Query ``i``'s mass outside the listed columns (``order`` of the ``found`` ones) of a
    selection of every key, and the interval it surely lies in: the mass itself where every
    score is exact, else from the scores' error bounds (``softdict._compressed``)."""
    weights = chosen.weights[i]
    listed = np.zeros(len(weights), dtype=bool)
    listed[np.flatnonzero(found)[order]] = True
    mass = max(0.0, 1.0 - float(weights[listed].sum()))
    if chosen.score_bounds is None:
        return mass, np.array([mass, mass])
    bounds = chosen.score_bounds
    inside = mass_interval(
        chosen.scores[i : i + 1], bounds.temperature, bounds.spread[i : i + 1], listed[None]
    )[0]
    return mass, 1.0 - inside[::-1]


def _marks(store: Store, query: SpellingQueries, ids: np.ndarray) -> tuple[tuple[str, ...], ...]:
    """The names of the marks each key of ``ids`` bears for the one ``query``."""
    found = store.spelling.marks(query, ids)[0] > 0
    return tuple(tuple(name for name, on in zip(EVIDENCE, row) if on) for row in found)


def _best_first(scores: np.ndarray, limit: int | None) -> np.ndarray:
    """Positions in ``scores``, best first (ties in order): every one, or the ``limit`` best."""
    if limit is None or limit >= len(scores):
        return np.argsort(-scores, kind="stable")
    best = top_columns(scores[None], limit)[0]
    return best[np.argsort(-scores[best], kind="stable")]


def nearest_keys(
    store: Store, embeddings: np.ndarray, k: int, mask: Mask, texts: list[str] | None
) -> list[list[tuple[str, float]]]:
    """The ``k`` keys most similar to each raw query embedding, with their scores, best first:
    by the combined score when the spelling channel is on for ``texts``, else by meaning."""
    if texts is not None and store.config.lexical:
        chosen = [part for _, part in selections(store, embeddings, mask, texts, top_k=k)]
        scores = np.concatenate([part.scores for part in chosen])
        ids = np.concatenate([part.ids for part in chosen])
    else:
        allow = store.allow(mask)
        # A backend pads its answer to k columns: k = 2**31 allocated 16 GiB (a probe).
        k = min(k, len(store) if allow is None else len(allow))
        scores, ids = store.backend.search(store.prepare_queries(embeddings), k, allow)
    found = ids >= 0
    return [
        list(zip(store.keys_of(row_ids[row_found]), row_scores[row_found].tolist()))
        for row_ids, row_scores, row_found in zip(ids, scores, found)
    ]
