"""Typed results of a soft lookup."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from softdict._types import Value
from softdict.values.distribution import Distribution

__all__ = ["Attention"]


@dataclass(frozen=True, repr=False)
class Attention:
    """How one query attended over the store, and the value that came out.

    Attributes:
        query: the query text, or None for a query given as an embedding.
        value: the blended value (float, float64 array, or label).
        keys: the keys attended to, highest weight first.
        weights: their attention weights (non-negative, summing to 1 over ``keys``).
        scores: the scores the softmax ran on, before the temperature: each key's
            ``meaning_scores`` plus ``spelling_weight`` times the spelling term of its
            ``spelling_scores`` (see ``softdict.spelling``); the meaning scores alone when the
            spelling channel was off.
        k: how many keys the softmax ran over (all allowed keys when exact).
        tail_mass: an upper bound on the attention mass of keys left out of ``keys``; 0 if exact.
            With the spelling channel in a large store it assumes the dense and spelling
            candidates are the best of their channel (see the README).
        distribution: for a categorical store, each label's probability; otherwise None.
        meaning_scores: the keys' similarity by embedding (cosine by default).
        spelling_scores: the keys' spelling similarity in [0, 1] (1: spelled the same, ignoring
            case, accents and punctuation), or None when the spelling channel was off (a query
            given as an embedding, or ``lexical=0``).
        spelling_weight: what a spelling term of 1 adds to this query's score (0 when off).
    """

    query: str | None
    value: Value
    keys: tuple[str, ...]
    weights: np.ndarray
    scores: np.ndarray
    k: int
    tail_mass: float
    distribution: Distribution | None = None
    meaning_scores: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    spelling_scores: np.ndarray | None = None
    spelling_weight: float = 0.0

    def top(self, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` keys with the largest weights, as (key, weight) pairs."""
        return [(key, float(w)) for key, w in zip(self.keys[:n], self.weights[:n])]

    def __repr__(self) -> str:
        shown = ", ".join(f"({key!r}, {w:.3f})" for key, w in self.top(3))
        more = ", ..." if len(self.keys) > 3 else ""
        value = (
            np.array2string(self.value, precision=4, threshold=6)
            if isinstance(self.value, np.ndarray)
            else repr(self.value)
        )
        return (
            f"Attention(query={self.query!r}, value={value}, k={self.k}, "
            f"tail_mass={self.tail_mass:.3g}, top=[{shown}{more}])"
        )
