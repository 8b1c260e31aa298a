"""A soft lookup after encoding: from raw query embeddings to values, ``Attention`` or nearest
keys. Functions of a store (the façade holds its lock around them)."""

from __future__ import annotations

import dataclasses

import numpy as np

from softdict._errors import NoMatchError
from softdict._results import Attention
from softdict._retrieval import RetrievalPolicy, Selection, SpellingRequest, select
from softdict._types import BatchValue, Mask, NoDefault, Value
from softdict.spelling import SpellingQueries, query_weights
from softdict.store.base import Store

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


def attentions(store: Store, chosen: Selection, texts: list[str] | None) -> list[Attention]:
    """One ``Attention`` per query: keys by weight, weights, scores, value, distribution."""
    column, slots = store.values_of(chosen.ids)
    blended = column.blend(chosen.weights, slots)
    explained = column.explain(chosen.weights, slots, lambda: store.present_slots(column))
    results = []
    for i in range(len(chosen.weights)):
        ids = chosen.ids if chosen.ids.ndim == 1 else chosen.ids[i]
        found = np.isfinite(chosen.scores[i])  # padding scores -inf
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
                tail_mass=float(chosen.tail_mass[i]),
                distribution=explained[i],
                meaning_scores=chosen.meaning[i, found][order],
                spelling_scores=spelling,
                spelling_weight=(
                    0.0 if chosen.spelling_weight is None else float(chosen.spelling_weight[i])
                ),
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
