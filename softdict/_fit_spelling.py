"""The spelling channel as ``fit`` sees it: each query's combination of meaning and spelling
against every key, as fixed matrices in the two options fit learns (``SpellingInputs``), and that
form of the combination on torch tensors (``combined_in_torch``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from softdict._arguments import projected_queries
from softdict._lookup import spelling_queries, terms_of
from softdict._similarity import metric_scores
from softdict.spelling.terms import QueryTerms
from softdict.store.base import Store

__all__ = ["SpellingInputs", "best_meaning_of", "combined_in_torch", "spelling_inputs"]


@dataclass(frozen=True)
class SpellingInputs:
    """The spelling channel as fit sees it, for each query against every key, in the form

        score = meaning · max(0, 1 + lexical · (factor − 1)) + lexical · (gain + known · known_gain)

    which is the store's combination (``spelling.combination``) as a function of the two options
    fit learns: ``lexical`` and, for the hand-set rule's curve, ``lexical_known`` (the learned
    combination's ``known_gain`` is None). ``factor`` (q,) is meaning's factor at lexical 1;
    ``gain`` (q, n) what spelling, marks and the offset add at lexical 1 (and known 0), and
    ``known_gain`` what known adds per unit. The similarities do not depend on what is learned,
    so they are computed once (rapidfuzz) and the optimiser sees fixed matrices."""

    lexical: float
    known: float
    factor: np.ndarray
    gain: np.ndarray
    known_gain: np.ndarray | None


def best_meaning_of(
    store: Store, raw: np.ndarray, keys: np.ndarray, projection: np.ndarray | None
) -> np.ndarray:
    """Each raw query's best meaning score over the prepared ``keys`` under ``projection``,
    which ``rule-8``'s terms read; +inf (nothing to read) under the other combinations."""
    config = store.config
    if not config.combination.reads_meaning or not len(raw):
        return np.full(len(raw), np.inf)
    prepared = config.similarity.prepare_queries(projected_queries(raw, projection))
    scores = metric_scores(prepared, keys, config.similarity.metric)
    return scores.max(axis=1, initial=-np.inf)


def spelling_inputs(
    store: Store, texts: list[str], best_meaning: np.ndarray
) -> SpellingInputs | None:
    """The spelling rows of ``texts``, whose best meaning scores over the store's keys are
    ``best_meaning`` (what ``rule-8``'s terms read: ``fit`` learns with them as the store answers
    before the fit, and judges the held-out queries again with those of the learned projection)."""
    config = store.config
    if not config.lexical:
        return None
    queries = spelling_queries(store, texts)
    ids = store.ids()
    similarity = store.spelling.similarity(queries, ids)
    terms = terms_of(store, texts, lexical=1.0, known=0.0).given_meaning(best_meaning)
    marks = store.spelling.marks(queries, ids) if terms.weighs_marks else None

    def gain_at(terms: QueryTerms) -> np.ndarray:
        return terms.offset[:, None] + terms.gain(similarity, marks)

    factor, gain = terms.scale, gain_at(terms)
    known_gain = None
    if config.combination.weighs_known:
        known = terms_of(store, texts, lexical=1.0, known=1.0).given_meaning(best_meaning)
        known_gain = gain_at(known) - gain
    return SpellingInputs(
        config.lexical,
        config.lexical_known,
        factor.astype(np.float32),
        gain.astype(np.float32),
        None if known_gain is None else known_gain.astype(np.float32),
    )


def combined_in_torch(
    meaning: Any, factor: Any, gain: Any, known_gain: Any, lexical: Any, known: Any
) -> Any:
    """``SpellingInputs``' form of the store's combination, on torch tensors (meaning (q, n),
    factor (q,), gain and known_gain (q, n)), differentiable in ``lexical`` and ``known``."""
    scale = (1 + lexical * (factor - 1)).clamp_min(0)
    return meaning * scale[:, None] + lexical * (gain + known * known_gain)
