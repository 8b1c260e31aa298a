"""Attention over every key with the spelling channel, spelling scored only where it can matter.

A key's score is its meaning part plus what its spelling and marks add (``combination``), and
scoring every key's spelling with rapidfuzz cost more than the rest of a lookup (1.8 ms at 10^4
keys). Instead, per query:

1. Every key has its meaning part and a ceiling on its spelling similarity from character
   counts (``bounds``), and whether it could bear a mark at all (it holds every character of
   the query), so its score lies in [meaning part, upper], upper the score at the ceiling with
   the most its marks could add (``QueryTerms.most_gain``: the spelling part grows with the
   similarity, marks only add). A key
   whose ceiling is at most the first knot and that can bear no mark scores exactly its meaning
   part.
2. The other keys are scored exactly (rapidfuzz, and the marks), highest upper first, in rounds
   that double in size (or, once the best keys are settled, take as many keys as the gains
   below say are needed, if that is more), until both hold:

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

A batch of queries goes through the rounds together (``bounded_batch``): each round's checks are
a few array operations over the batch's rows and its spelling one rapidfuzz call per measure for
every query's picks. Against one query at a time (interleaved runs here, bundled-static) that
made a lookup of 1,000 queries 1.8-2.6x as fast over 10^3 keys, and 0.9-1.3x over 10^4 (the
machine's noise); for a single query its bookkeeping cost more than it saved (1.13x the lookup
time). So one query, and a batch over more than 4,096 keys (``held_keys``), take
``bounded_scores`` query by query. Both make the same picks and the same scores (the batch
form's rows are each what the one-query form gives; tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict._attention import exponentials
from softdict.spelling.terms import QueryTerms

__all__ = [
    "FIRST_ROUND",
    "SPELLING_TOLERANCE",
    "BoundedBatch",
    "BoundedScores",
    "bounded_batch",
    "bounded_scores",
]

# The first round scores the 32 keys of highest upper score; each round doubles it.
FIRST_ROUND = 32
# The total variation between the weights returned and exact ones: at most this.
SPELLING_TOLERANCE = 1e-4

# ``exact(queries, positions)``: the spelling of the pairs (query row, key position), (p,) each:
# their similarities (p,) and marks (p, E), or None where the combination weighs none.
PairedExact = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray | None]]


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
    open_ = np.flatnonzero(terms.could_gain(ceiling, marked))
    upper = terms.upper(
        meaning[None, open_], ceiling[None, open_], None if marked is None else marked[None, open_]
    )[0]
    keep = max(1, min(keep, n))
    size, error, weights = FIRST_ROUND, 0.0, None
    while len(open_):
        kth = np.partition(combined, n - keep)[n - keep] if keep > 1 else combined.max()
        if upper.max() < kth:  # the best keys are settled; is the rest's weight?
            error, weights, needed = _error(
                combined, open_, upper, temperature, weights_out, tolerance
            )
            if error <= tolerance:
                break
            size = max(size, needed)
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
    tolerance: float,
) -> tuple[float, np.ndarray, int]:
    """δ of the module docstring: what the ``open_`` keys (scored ``combined``, at most
    ``upper``) could gain, over the normaliser of ``combined``; the weights of ``combined``,
    which the normaliser's exponentials give (written into ``out``); and how many open keys
    the next round should score (``_needed``)."""
    numerators = exponentials(combined, temperature)
    normaliser = numerators.sum()
    with np.errstate(over="ignore"):
        gain = np.exp((upper - combined.max()) / temperature) - numerators[open_]
    np.multiply(numerators, 1.0 / normaliser, out=out)  # as softmax makes them, bit for bit
    error = float(gain.sum() / normaliser)
    needed = _needed(gain, tolerance * normaliser) if error > tolerance else 0
    return error, out, needed


def _needed(gain: np.ndarray, allowance: float) -> int:
    """How many open keys, largest ``gain`` first, must be scored before the others could gain
    at most ``allowance`` together: the next round's size, where it is more than doubling gives.
    A combination whose scores lie close together (``learned-1``: thousands of keys within
    reach of the best) needed six doubling rounds at 10^4 keys, each a pass over every key's
    weights; sized by the gains it needs two or three. It is an estimate (scoring a key moves
    its gain, and the best score), so the rounds go on until δ holds, as before."""
    cumulative = np.cumsum(np.sort(gain)[::-1])
    reached = np.searchsorted(cumulative, cumulative[-1] - allowance, side="left")
    return min(int(reached) + 1, len(gain))


@dataclass(frozen=True)
class BoundedBatch:
    """A batch's scores over every key (module docstring), a row per query.

    Attributes:
        combined: (b, n) the combined score, the meaning part alone where unscored.
        similarity: (b, n) spelling similarity, NaN where not scored.
        error: (b,) the bound δ on the total variation between the weights of ``combined`` and
            those of every key's exact score.
        weights: (b, n) ``softmax(combined, temperature)`` in the rows of ``weighed``, which
            computing δ made on the way (bit for bit what softmax gives); the other rows are
            not set (δ was not needed: every key that could gain was scored).
        weighed: (b,) bool.
    """

    combined: np.ndarray
    similarity: np.ndarray
    error: np.ndarray
    weights: np.ndarray
    weighed: np.ndarray


def bounded_batch(
    meaning: np.ndarray,
    ceiling: np.ndarray,
    marked: np.ndarray | None,
    terms: QueryTerms,
    temperature: float,
    exact: PairedExact,
    *,
    keep: int = 1,
    tolerance: float = SPELLING_TOLERANCE,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> BoundedBatch:
    """b queries' combined scores over n keys from their ``meaning`` (b, n), spelling
    ``ceiling`` (b, n), which keys could bear a mark (``marked`` (b, n) bool; None: none) and
    their ``terms``; ``exact`` scores the spelling of the pairs a round picks. ``out``: (b, n)
    arrays to write combined, similarity and the weights into (rows of a larger batch, which
    are then not copied), else new ones."""
    b, n = meaning.shape
    combined, similarity, weights = out if out is not None else np.empty((3, b, n))
    combined[:] = terms.meaning_part(meaning)
    # A ceiling of 0 (no character in common, or an empty form) is the similarity itself.
    similarity.fill(np.nan)
    similarity[ceiling == 0.0] = 0.0
    # Spelling adds nothing at or below the first knot: those keys' scores are exact already,
    # unless a mark could add to them. The others are open: (query, key, upper score) triples,
    # grouped by query, until they are scored.
    rows, positions = np.nonzero(terms.could_gain(ceiling, marked))
    upper = terms.upper(
        meaning[rows, positions],
        ceiling[rows, positions],
        None if marked is None else marked[rows, positions],
        rows,
    )
    open_ = _OpenKeys(rows, positions, upper)
    keep = max(1, min(keep, n))
    error, weighed = np.zeros(b), np.zeros(b, dtype=bool)
    active, best_open = open_.best()
    sizes = np.full(b, FIRST_ROUND)  # each query's next round (as ``bounded_scores``'s size)
    while len(active):
        every = len(active) == b  # then no copy of the batch's rows is needed
        scores = combined if every else combined[active]
        kth = (
            scores.max(axis=1) if keep == 1 else np.partition(scores, n - keep, axis=1)[:, n - keep]
        )
        settled = np.flatnonzero(best_open < kth)
        if len(settled):  # the best keys are settled; is the rest's weight?
            queries = active[settled]
            all_settled = every and len(settled) == b
            found_error, found_weights, needed = _batch_error(
                scores if all_settled else combined[queries], open_, queries, temperature,
                tolerance, weights if all_settled else None,
            )  # fmt: skip
            error[queries] = found_error
            done = found_error <= tolerance
            sizes[queries] = np.maximum(sizes[queries], needed)
            if not (all_settled and done.all()):  # else the weights are in place already
                weights[queries[done]] = found_weights[done]
            weighed[queries[done]] = True
            active = np.delete(active, settled[done])
            if not len(active):
                break
        picked = open_.highest(active, sizes[active])
        rows, positions = open_.rows[picked], open_.positions[picked]
        found, marks = exact(rows, positions)
        similarity[rows, positions] = found
        combined[rows, positions] = terms.score(meaning[rows, positions], found, marks, rows)
        open_ = open_.without(picked)
        # A query with no open key left has every score exact: no bound, no weights made.
        still, best = open_.best()
        best_of = np.full(b, -np.inf)
        best_of[still] = best
        left = best_of[active] > -np.inf
        error[active[~left]] = 0.0
        active = active[left]  # the queries done before stay done
        best_open = best_of[active]
        sizes *= 2
    return BoundedBatch(combined, similarity, error, weights, weighed)


@dataclass(frozen=True)
class _OpenKeys:
    """The keys not yet scored that could gain: (query row, key position, upper score), (p,)
    each, grouped by query in increasing order."""

    rows: np.ndarray
    positions: np.ndarray
    upper: np.ndarray

    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """The queries with an open key (increasing), and the best upper score of each."""
        if not len(self.rows):
            return self.rows, np.zeros(0)
        starts = np.flatnonzero(np.concatenate([[True], self.rows[1:] != self.rows[:-1]]))
        return self.rows[starts], np.maximum.reduceat(self.upper, starts)

    def spans(self, queries: np.ndarray) -> list[tuple[int, int]]:
        """Where the open keys of each of ``queries`` (increasing) begin and end."""
        starts = np.searchsorted(self.rows, queries)
        ends = np.searchsorted(self.rows, queries, side="right")
        return list(zip(starts.tolist(), ends.tolist()))

    def highest(self, queries: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Where the ``sizes`` highest open keys of each of ``queries`` lie (as many as its
        size), grouped by query."""
        picked = []
        for (start, end), size in zip(self.spans(queries), sizes.tolist()):
            if end - start <= size:
                picked.append(np.arange(start, end))
            else:
                part = np.argpartition(self.upper[start:end], end - start - size)[-size:]
                picked.append(start + part)
        return np.concatenate(picked)

    def without(self, picked: np.ndarray) -> _OpenKeys:
        left = np.ones(len(self.rows), dtype=bool)
        left[picked] = False
        return _OpenKeys(self.rows[left], self.positions[left], self.upper[left])


def _batch_error(
    combined: np.ndarray,
    open_: _OpenKeys,
    queries: np.ndarray,
    temperature: float,
    tolerance: float,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """δ of the module docstring for each of ``queries`` (their ``combined`` scores (q, n)):
    what their open keys could gain, over the normaliser of ``combined``; the weights of
    ``combined``, which the normaliser's exponentials give (written into ``out`` if given);
    and how many open keys each query's next round should score (``_needed``: 0 where δ
    holds)."""
    numerators = exponentials(combined, temperature)
    normaliser = numerators.sum(axis=1)
    spans = open_.spans(queries)
    at = np.concatenate([np.arange(a, z) for a, z in spans])
    where = np.searchsorted(queries, open_.rows[at])  # each open key's row in ``combined``
    top = combined.max(axis=1)
    with np.errstate(over="ignore"):
        reach = np.exp((open_.upper[at] - top[where]) / temperature)
    gain = reach - numerators[where, open_.positions[at]]
    total = np.bincount(where, weights=gain, minlength=len(queries))
    weights = np.multiply(numerators, 1.0 / normaliser[:, None], out=out)  # as softmax does
    error = total / normaliser
    # Each query's gains as bounded_scores has them (its open keys in the same order), so that
    # both forms size their rounds alike.
    needed = np.zeros(len(queries), dtype=np.int64)
    begin = 0
    for j, (a, z) in enumerate(spans):
        if error[j] > tolerance:
            needed[j] = _needed(gain[begin : begin + z - a], tolerance * normaliser[j])
        begin += z - a
    return error, weights, needed
