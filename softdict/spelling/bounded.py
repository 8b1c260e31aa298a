"""Attention over every key with the spelling channel, spelling scored only where it can matter.

A key's score is meaning + weight · term(spelling) (``scores``), and scoring every key's
spelling with rapidfuzz cost more than the rest of a lookup (1.8 ms at 10^4 keys). Instead,
per query:

1. Every key has its meaning score and a ceiling on its spelling similarity from character
   counts (``bounds``), so its score lies in [meaning, upper], upper = meaning + weight ·
   term(ceiling). A key whose ceiling is at most the floor scores exactly its meaning.
2. The other keys are scored exactly (rapidfuzz), highest upper first, in rounds that double
   in size, until both hold:

   * no key left unscored can reach the ``keep``-th best score found: the best key (so the
     first key, its score and ``min_score``'s decision) is exact, and so is the choice of the
     k best under top-k attention;
   * the weight the unscored keys could still gain is at most ``tolerance``: with ŝ the scores
     used (meaning for an unscored key), M their maximum and Ẑ = Σ e^((ŝ − M)/T),
     δ = Σ_unscored (e^((upper − M)/T) − e^((ŝ − M)/T)) / Ẑ. The true normaliser Z lies in
     [Ẑ, Ẑ(1 + δ)], so Σ|w − ŵ| ≤ 2(Z − Ẑ)/Z ≤ 2δ: δ bounds the total variation between the
     weights returned and those of every key's exact score. It is reported with them.

An unscored key keeps its meaning as its score and NaN as its spelling similarity (0 where its
ceiling is 0: no character in common).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict.spelling.scores import SIMILARITY_FLOOR, combined_score

__all__ = ["FIRST_ROUND", "SPELLING_TOLERANCE", "BoundedScores", "bounded_scores"]

# The first round scores the 32 keys of highest upper score; each round doubles it.
FIRST_ROUND = 32
# The total variation between the weights returned and exact ones: at most this.
SPELLING_TOLERANCE = 1e-4


@dataclass(frozen=True)
class BoundedScores:
    """One query's scores over every key (module docstring).

    Attributes:
        combined: (n,) meaning + weight · term(spelling), meaning alone where unscored.
        similarity: (n,) spelling similarity, NaN where not scored.
        error: the bound δ on the total variation between the weights of ``combined`` and those
            of every key's exact score.
    """

    combined: np.ndarray
    similarity: np.ndarray
    error: float


def bounded_scores(
    meaning: np.ndarray,
    ceiling: np.ndarray,
    weight: float,
    temperature: float,
    exact_similarity: Callable[[np.ndarray], np.ndarray],
    *,
    keep: int = 1,
    tolerance: float = SPELLING_TOLERANCE,
) -> BoundedScores:
    """One query's combined scores over n keys from its ``meaning`` (n,) and spelling
    ``ceiling`` (n,); ``exact_similarity(positions)`` scores the spelling of those keys."""
    n = len(meaning)
    combined = np.array(meaning, dtype=np.float64)
    # A ceiling of 0 (no character in common, or an empty form) is the similarity itself.
    similarity = np.where(ceiling == 0.0, 0.0, np.nan)
    # Spelling adds nothing at or below the floor: those keys' scores are exact already.
    open_ = np.flatnonzero(ceiling > SIMILARITY_FLOOR)
    upper = combined_score(combined[open_], ceiling[open_], weight)
    keep = max(1, min(keep, n))
    size, error = FIRST_ROUND, 0.0
    while len(open_):
        kth = np.partition(combined, n - keep)[n - keep] if keep > 1 else combined.max()
        if upper.max() < kth:  # the best keys are settled; is the rest's weight?
            error = _error(combined, open_, upper, temperature)
            if error <= tolerance:
                break
        pick = np.arange(len(open_))
        if len(open_) > size:
            pick = np.argpartition(-upper, size - 1)[:size]
        positions = open_[pick]
        found = np.asarray(exact_similarity(positions), dtype=np.float64)
        similarity[positions] = found
        combined[positions] = combined_score(meaning[positions], found, weight)
        left = np.ones(len(open_), dtype=bool)
        left[pick] = False
        open_, upper = open_[left], upper[left]
        size *= 2
    else:
        error = 0.0
    return BoundedScores(combined, similarity, float(error))


def _error(combined: np.ndarray, open_: np.ndarray, upper: np.ndarray, temperature: float) -> float:
    """δ of the module docstring: what the ``open_`` keys (scored ``combined``, at most
    ``upper``) could gain, over the normaliser of ``combined``."""
    best = combined.max()
    shifted = (combined - best) / temperature
    # exp only where it does not underflow: its slow path, when most keys are far below the best
    normaliser = np.exp(shifted, out=np.zeros_like(shifted), where=shifted > -745.2).sum()
    with np.errstate(over="ignore"):
        gain = np.exp((upper - best) / temperature) - np.exp((combined[open_] - best) / temperature)
    return float(gain.sum() / normaliser)
