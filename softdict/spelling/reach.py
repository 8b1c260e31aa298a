"""What spelling could add to a key before it is spelled, so that a large store spells only the
keys where it can matter.

A large store's lookup spells three sets of keys exactly: the pool the 3-gram postings propose
(``SpellingIndex.best_of_pools``: 2,048 rows a query, median, on 10^5 real names), the dense
index's best keys, and a sampled tail (``softdict.spelling.fusion``, ``softdict._sampling``).
Most of them are spelled nothing like the query: of the dense and sampled keys, a median of 55
of 420 a query could gain anything, and ``best_by_gain`` spells a median of 370 of the pool's
rows (one-off counts on those 10^5 names, bundled-static, 200 typo queries). A key's
similarity is at most its character-count ceiling (``bounds``), and it can bear a mark only if
it holds the query's characters (``could_mark``) and begins with its first or has several words
(``evidence.may_bear_marks``), so:

* ``reach``: each key's ceiling and whether it could bear a mark (``Reach.upper``: the most
  spelling and marks could add to its score, ``QueryTerms.most_gain``). A key whose ceiling is
  at most the first knot and that can bear no mark gains exactly nothing: its combined score is
  its meaning part, and it need not be spelled (``Reach.open``).
* ``best_by_gain``: the n keys to which spelling and marks add most, spelling keys in rounds,
  highest ``upper`` first, until no key left could reach the n-th best gain found (and every
  key where fewer than n gain anything, to choose the rest by similarity). The keys chosen are
  those that spelling every key would choose (ties aside), each spelled.

A key not spelled reports NaN as its similarity (0 where its ceiling is 0: no character in
common), as the every-key path does (``bounded``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict.spelling.bounds import ceiling_and_could, several_words
from softdict.spelling.evidence import may_bear_marks
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries

__all__ = ["FIRST_SPELLED", "Reach", "best_by_gain", "reach"]

# ``best_by_gain``'s first round spells this many keys (or n, if more). A first round of 128
# or 512 spelled a median of 686 or 512 pool rows a query, against 370 (the count above).
FIRST_SPELLED = 256

# ``exact(positions)``: the spelling similarity and the gain of the keys at those positions.
ExactGains = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Reach:
    """What spelling could add to each of c keys, for query ``i`` of a batch (module docstring).

    Attributes:
        i: the query's row in its batch (and in its terms).
        ceiling: (c,) float32, at least each key's spelling similarity.
        could: (c,) bool, which keys could bear a mark; None where none can (the terms weigh no
            mark, or the query can bear none).
        open: (c,) bool, the keys spelling could add to: ceiling above the first knot, or a mark.
    """

    i: int
    ceiling: np.ndarray
    could: np.ndarray | None
    open: np.ndarray

    def upper(self, terms: QueryTerms) -> np.ndarray:
        """(c,) the most spelling and marks could add to each key's score under ``terms``
        (``QueryTerms.most_gain``)."""
        return terms.most_gain(self.ceiling, self.could, self.i)


def reach(
    queries: SpellingQueries,
    i: int,
    terms: QueryTerms,
    counts: np.ndarray,
    lengths: np.ndarray,
    first: np.ndarray,
    rows: np.ndarray,
) -> Reach:
    """Query ``i``'s ``Reach`` over the keys at ``rows`` of a spelling index's columns:
    ``counts`` (64, every row), ``lengths`` (every row's form length) and ``first`` (every
    row's form's first character, a code point)."""
    form = queries.forms[i]
    ceiling, could = ceiling_and_could(
        queries.counts[i], len(form), counts, lengths[rows].astype(np.float32), rows,
        terms.marks_count_for(form),
    )  # fmt: skip
    if could is not None:  # a mark needs a key that begins as the query does, or a later word
        could &= may_bear_marks(form, first[rows], several_words(counts, rows))
    return Reach(i, ceiling, could, terms.could_gain(ceiling, could))


def best_by_gain(upper: np.ndarray, n: int, exact: ExactGains) -> tuple[np.ndarray, np.ndarray]:
    """The spelling similarity and gain of c keys whose gain is at most ``upper`` (c,), spelled
    (``exact``) only as far as choosing the n of largest gain, then of largest similarity, needs
    (module docstring): NaN and -inf where not spelled, except that a key whose ``upper`` is 0
    or less gains exactly 0.

    Rounds spell the keys of highest ``upper`` first: ``FIRST_SPELLED`` (or n), then every key
    left whose ``upper`` reaches the n-th best gain spelled so far, until none does. So the n-th
    best gain is that of spelling every key, and every key of larger gain is spelled. Keys whose
    ``upper`` is at most 0 are spelled only where fewer than n keys gain anything: the others
    are then chosen among them by similarity."""
    c = len(upper)
    similarity = np.full(c, np.nan)
    gain = np.full(c, -np.inf)
    order = np.argsort(-upper, kind="stable")
    reachable = int(np.count_nonzero(upper > 0))  # the others gain exactly 0
    done, size = 0, max(FIRST_SPELLED, n)
    while done < reachable and size:
        picked = order[done : min(done + size, reachable)]
        similarity[picked], gain[picked] = exact(picked)
        done += len(picked)
        if done >= n:
            # The n-th best gain only grows as keys are spelled, so a key left below it now
            # never reaches it: the next round is every key left that could.
            kth = np.partition(gain[order[:done]], done - n)[done - n]
            size = int(np.count_nonzero(upper[order[done:reachable]] >= kth))
    left = order[done:]
    if np.count_nonzero(gain > 0) < n and len(left):
        # Fewer than n keys gain anything: the rest are chosen among keys that gain nothing,
        # by similarity, as spelling every key would choose them (every key left gains 0).
        similarity[left], gain[left] = exact(left)
    else:
        gain[left] = np.where(upper[left] <= 0, 0.0, -np.inf)
    return similarity, gain
