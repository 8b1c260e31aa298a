"""A soft lookup after encoding: from raw query embeddings to values, ``Attention`` or nearest
keys. Functions of a store (the façade holds its lock around them)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from softdict._errors import NoMatchError
from softdict._results import Attention
from softdict._retrieval import RetrievalPolicy, Selection, SpellingRequest, select
from softdict._sampling import value_stderr
from softdict._types import BatchValue, Mask, NoDefault, Value
from softdict.spelling import SpellingQueries, query_weights
from softdict.store.base import Store
from softdict.values.base import LossKind, ValueColumn

__all__ = ["attentions", "lookup_values", "nearest_keys", "selection", "spelling_queries"]


def selection(
    store: Store,
    embeddings: np.ndarray,
    mask: Mask,
    texts: list[str] | None,
    top_k: int | None = None,
) -> Selection:
    """The keys each raw query embedding attends to, by the store's retrieval policy; with the
    query ``texts`` (None for queries given as embeddings), by spelling too, unless the store's
    ``lexical`` is 0. ``top_k`` overrides the policy's (``nearest``)."""
    prepared = store.prepare_queries(embeddings)
    allow = store.allow(mask)
    assert store.dim is not None  # prepare_queries checked against it
    policy = RetrievalPolicy.from_config(store.config, store.dim)
    if top_k is not None:
        policy = dataclasses.replace(policy, top_k=top_k)
    n_allowed = len(store) if allow is None else len(allow)
    spelling = _spelling_request(store, texts) if texts is not None else None
    return select(store.backend, prepared, policy, allow, n_allowed, spelling)


def spelling_queries(store: Store, texts: list[str]) -> tuple[SpellingQueries, float] | None:
    """``texts`` as the spelling channel takes them, and one cosine in the store's similarity
    (the unit of the spelling weights); None where the store's ``lexical`` is 0. Lookups, fit
    and calibrate all start the channel here."""
    if not store.config.lexical:
        return None
    assert store.dim is not None
    return SpellingQueries.of(texts), store.config.similarity.cosine_unit(store.dim)


def _spelling_request(store: Store, texts: list[str]) -> SpellingRequest | None:
    found = spelling_queries(store, texts)
    if found is None:
        return None
    queries, unit = found
    config = store.config
    weights = query_weights(queries.unknown, config.lexical, config.lexical_known, unit)
    return SpellingRequest(store.spelling, queries, weights)


def lookup_values(
    store: Store,
    chosen: Selection,
    texts: list[str] | None,
    single: bool,
    min_score: float | None,
    default: object,
) -> Value | BatchValue:
    """The blended values; below ``min_score``, ``default`` or NoMatchError (no default)."""
    column, slots = store.values_of(chosen.ids)
    blended = column.blend(chosen.weights, slots)
    misses = np.zeros(len(chosen.scores), dtype=bool)
    if min_score is not None and len(misses):
        misses = chosen.scores.max(axis=1) < min_score
        if misses.any() and isinstance(default, NoDefault):
            raise _no_match(store, chosen, texts, min_score, misses)
    if single:
        return default if misses[0] else column.result(blended, 0)  # type: ignore[return-value]
    return column.fill(blended, misses, default) if misses.any() else blended


def _no_match(
    store: Store, chosen: Selection, texts: list[str] | None, min_score: float, misses: np.ndarray
) -> NoMatchError:
    i = int(np.argmax(misses))
    best = int(np.argmax(chosen.scores[i]))
    best_id = chosen.ids[best] if chosen.ids.ndim == 1 else chosen.ids[i, best]
    what = f"query {texts[i]!r}" if texts is not None else f"query embedding #{i}"
    n = int(misses.sum())
    others = f" ({n - 1} other queries in the batch missed too)" if n > 1 else ""
    return NoMatchError(
        f"no key scored at least min_score={min_score} for {what}; the best was "
        f"{store.keys_of(np.array([best_id]))[0]!r} at {chosen.scores[i, best]:.4f}{others}. "
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
            codes = np.asarray(column.calibration_values(slots[i, found]))
            mass = np.bincount(codes, chosen.weights[i, found])
            winner = int(mass.argmax())
            is_winner = (column.calibration_values(slots[i, sampled]) == winner).astype(float)
            results.append(float(value_stderr(weights, is_winner, np.float64(mass[winner]), draws)))
    return results


def attentions(store: Store, chosen: Selection, texts: list[str] | None) -> list[Attention]:
    """One ``Attention`` per query: keys by weight, weights, scores, value, distribution, and
    for an estimated attention the tail's estimate and the value's standard error."""
    column, slots = store.values_of(chosen.ids)
    blended = column.blend(chosen.weights, slots)
    explained = column.explain(chosen.weights, slots, lambda: store.present_slots(column))
    stderrs = value_stderrs(column, chosen, slots, blended)
    intervals = chosen.tail_interval()
    results = []
    for i in range(len(chosen.weights)):
        ids = chosen.ids if chosen.ids.ndim == 1 else chosen.ids[i]
        found = np.isfinite(chosen.scores[i])  # padding scores -inf
        if chosen.sampled is not None:
            found &= ~chosen.sampled[i]  # the sample stands for the tail; keys are the head
        weights, scores = chosen.weights[i, found], chosen.scores[i, found]
        order = np.argsort(-scores, kind="stable")
        # Keys in the selection's own order (for every key, id order, which the store maps
        # without a search), then by weight.
        keys = store.keys_of(ids[found])
        spelling = None if chosen.spelling is None else chosen.spelling[i, found][order]
        results.append(
            Attention(
                query=texts[i] if texts is not None else None,
                value=column.result(blended, i),
                keys=tuple(keys[j] for j in order.tolist()),
                weights=weights[order],
                scores=scores[order],
                k=int(chosen.k[i]),
                tail_mass=_optional(chosen.tail_mass[i]),
                distribution=explained[i],
                meaning_scores=chosen.meaning[i, found][order],
                spelling_scores=spelling,
                spelling_weight=(
                    0.0 if chosen.spelling_weight is None else float(chosen.spelling_weight[i])
                ),
                tail_interval=(
                    None
                    if np.isnan(chosen.tail_mass[i])
                    else (float(intervals[i, 0]), float(intervals[i, 1]))
                ),
                tail_bound=_optional(chosen.tail_bound[i]),
                sampled=0 if chosen.n_sampled is None else int(chosen.n_sampled[i]),
                value_stderr=stderrs[i],
            )
        )
    return results


def nearest_keys(
    store: Store, embeddings: np.ndarray, k: int, mask: Mask, texts: list[str] | None
) -> list[list[tuple[str, float]]]:
    """The ``k`` keys most similar to each raw query embedding, with their scores, best first:
    by the combined score when the spelling channel is on for ``texts``, else by meaning."""
    if texts is not None and store.config.lexical:
        chosen = selection(store, embeddings, mask, texts, top_k=k)
        scores, ids = chosen.scores, chosen.ids
    else:
        scores, ids = store.backend.search(store.prepare_queries(embeddings), k, store.allow(mask))
    found = ids >= 0
    return [
        list(zip(store.keys_of(row_ids[row_found]), row_scores[row_found].tolist()))
        for row_ids, row_scores, row_found in zip(ids, scores, found)
    ]
