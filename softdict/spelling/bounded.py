"""Attention over every key with the spelling channel, spelling scored only where it can matter.

A key's score is its meaning part plus what its spelling and marks add (``combination``), and
scoring every key's spelling with rapidfuzz cost more than the rest of a lookup (1.8 ms at 10^4
keys). Instead, per query:

1. Every key has its meaning part and a ceiling on its spelling similarity from character
   counts (``bounds``), and whether it could bear a mark at all (it holds every character of
   the query), so its score lies in [meaning part, upper], upper the score at the ceiling with
   every mark it could bear (the spelling part grows with the similarity, marks only add). A key
   whose ceiling is at most the first knot and that can bear no mark scores exactly its meaning
   part.
2. The other keys are scored exactly (rapidfuzz, and the marks), highest upper first, in rounds
   that double in size, until both hold:

   * no key left unscored can reach the ``keep``-th best score found: the best key (so the
     first key, its score and ``min_score``'s decision) is exact, and so is the choice of the
     k best under top-k attention;
   * the weight the unscored keys could still gain is at most ``tolerance``: with ŝ the scores
     used (the meaning part for an unscored key), M their maximum and Ẑ = Σ e^((ŝ − M)/T),
     δ = Σ_unscored (e^((upper − M)/T) − e^((ŝ − M)/T)) / Ẑ. The true normaliser Z lies in
     [Ẑ, Ẑ(1 + δ)], so Σ|w − ŵ| ≤ 2(Z − Ẑ)/Z ≤ 2δ: δ bounds the total variation between the
     weights returned and those of every key's exact score. It is reported with them.

An unscored key keeps its meaning part as its score and NaN as its spelling similarity (0 where
its ceiling is 0: no character in common).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict._attention import exponentials
from softdict.spelling.combination import QueryTerms

__all__ = ["FIRST_ROUND", "SPELLING_TOLERANCE", "BoundedScores", "bounded_scores"]

# The first round scores the 32 keys of highest upper score; each round doubles it.
FIRST_ROUND = 32
# The total variation between the weights returned and exact ones: at most this.
SPELLING_TOLERANCE = 1e-4


@dataclass(frozen=True)
class BoundedScores:
    """One query's scores over every key (module docstring).

    Attributes:
        combined: (n,) the combined score, the meaning part alone where unscored.
        similarity: (n,) spelling similarity, NaN where not scored.
        error: the bound δ on the total variation between the weights of ``combined`` and those
            of every key's exact score.
        weights: (n,) ``softmax(combined, temperature)``, where computing δ made them on the
            way (bit for bit what softmax gives); None where δ was not needed (every key that
            could gain was scored).
    """

    combined: np.ndarray
    similarity: np.ndarray
    error: float
    weights: np.ndarray | None = None


def bounded_scores(
    meaning: np.ndarray,
    ceiling: np.ndarray,
    marked: np.ndarray | None,
    terms: QueryTerms,
    temperature: float,
    exact: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]],
    *,
    keep: int = 1,
    tolerance: float = SPELLING_TOLERANCE,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> BoundedScores:
    """One query's combined scores over n keys from its ``meaning`` (n,), spelling ``ceiling``
    (n,), which keys could bear a mark (``marked`` (n,) bool; None: none) and its ``terms`` (one
    query's); ``exact(positions)`` scores the spelling of those keys: (similarities, marks).
    ``out``: (n,) rows to write combined, similarity and the weights into (a batch's rows,
    which are then not copied), else new ones."""
    n = len(meaning)
    combined, similarity, weights_out = out if out is not None else (np.empty((3, n)))
    # The terms' batch form (one row, this query's), which needs no per-key index into them.
    combined[:] = terms.meaning_part(meaning[None])[0]
    # A ceiling of 0 (no character in common, or an empty form) is the similarity itself.
    similarity.fill(np.nan)
    similarity[ceiling == 0.0] = 0.0
    # Spelling adds nothing at or below the first knot: those keys' scores are exact already,
    # unless a mark could add to them.
    can_gain = ceiling > terms.floor
    if marked is not None:
        can_gain |= marked
    open_ = np.flatnonzero(can_gain)
    upper = terms.upper(
        meaning[None, open_], ceiling[None, open_], None if marked is None else marked[None, open_]
    )[0]
    keep = max(1, min(keep, n))
    size, error, weights = FIRST_ROUND, 0.0, None
    while len(open_):
        kth = np.partition(combined, n - keep)[n - keep] if keep > 1 else combined.max()
        if upper.max() < kth:  # the best keys are settled; is the rest's weight?
            error, weights = _error(combined, open_, upper, temperature, weights_out)
            if error <= tolerance:
                break
        pick = np.arange(len(open_))
        if len(open_) > size:
            pick = np.argpartition(-upper, size - 1)[:size]
        positions = open_[pick]
        found, marks = exact(positions)
        similarity[positions] = found
        combined[positions] = terms.score(
            meaning[None, positions], found[None], None if marks is None else marks[None]
        )[0]
        left = np.ones(len(open_), dtype=bool)
        left[pick] = False
        open_, upper = open_[left], upper[left]
        size *= 2
    else:
        error, weights = 0.0, None
    return BoundedScores(combined, similarity, float(error), weights)


def _error(
    combined: np.ndarray,
    open_: np.ndarray,
    upper: np.ndarray,
    temperature: float,
    out: np.ndarray,
) -> tuple[float, np.ndarray]:
    """δ of the module docstring: what the ``open_`` keys (scored ``combined``, at most
    ``upper``) could gain, over the normaliser of ``combined``; and the weights of
    ``combined``, which the normaliser's exponentials give (written into ``out``)."""
    numerators = exponentials(combined, temperature)
    normaliser = numerators.sum()
    with np.errstate(over="ignore"):
        gain = np.exp((upper - combined.max()) / temperature) - numerators[open_]
    np.divide(numerators, normaliser, out=out)
    return float(gain.sum() / normaliser), out
