"""Typed results of a soft lookup."""

from __future__ import annotations

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
        scores: their raw similarity scores, before the temperature.
        k: how many keys the softmax ran over (all allowed keys when exact).
        tail_mass: an upper bound on the attention mass of keys left out of ``keys``; 0 if exact.
        distribution: for a categorical store, each label's probability; otherwise None.
    """

    query: str | None
    value: Value
    keys: tuple[str, ...]
    weights: np.ndarray
    scores: np.ndarray
    k: int
    tail_mass: float
    distribution: Distribution | None = None

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
