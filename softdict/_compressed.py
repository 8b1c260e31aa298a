"""Full attention over a large store from compressed scores: every allowed key's score read
from its codes (``softdict.index.compressed``), the keys that weigh most rescored exactly, and a
bound on what the others' errors can change.

For one query, every allowed key i gets a compressed score s̃_i with |s_i − s̃_i| <= e_i (the
codes' bound). The head, the keys whose s̃ is within ``HEAD_MARGIN`` of the best and those
that could be the best (s̃_i + e_i at least the highest s̃ − e), at most ``max_k`` of them, is
scored exactly; the softmax then runs over exact scores in the head and
compressed ones elsewhere, and every key's value is blended. Each log-weight outside the head is
then known within ± e_i/T, which bounds:

* the total variation between these weights and exact attention's
  (``_attention.weight_error_bound``; ``Attention.weight_error``), and with it the value's error
  (for numbers, at most that times the range of the values);
* the mass of the keys outside any listed set (``_attention.mass_interval``): the
  ``tail_interval`` a lookup reports holds surely, not at a confidence.

The bound is a worst case over the codes' rounding (on real text about 27 times the typical
error), so it is loose beside the error measured (``benchmarks/real_scale.py``), but it always
holds: nothing here is sampled.
"""

from __future__ import annotations

import numpy as np

from softdict._attention import softmax
from softdict._selection import RetrievalPolicy, ScoreBounds, Selection
from softdict.index.base import Allow, IndexBackend

__all__ = ["HEAD_MARGIN", "from_compressed_scores"]

# Keys whose compressed score is within this of the best are scored exactly (at T = 0.05 a key
# this far below the best weighs e^-2 of it). Chosen on benchmarks/real_scale.py.
HEAD_MARGIN = 0.2


def from_compressed_scores(
    backend: IndexBackend, queries: np.ndarray, policy: RetrievalPolicy, allow: Allow | None
) -> Selection:
    """Full attention over every allowed key from compressed scores (module docstring)."""
    scores, ids, errors = backend.score_approximately(queries, allow)
    m = len(queries)
    exactly = errors.exact_columns()  # rows added since the codes were made: scored exactly
    largest = errors.largest()
    heads = []
    for i in range(m):
        head = _head(scores[i], errors.query[i], errors.keys, largest, policy.max_k)
        scores[i, head] = backend.score_ids(queries[i : i + 1], ids[head])[0]
        heads.append(head)
    weights = softmax(scores, policy.temperature)
    exact = tuple(np.concatenate([exactly, head]) for head in heads)
    tails = [_mass_outside(weights[i], columns) for i, columns in enumerate(exact)]
    return Selection(
        scores,
        ids,
        weights,
        np.array([len(head) for head in heads], dtype=np.int64),
        np.array(tails, dtype=np.float64),
        np.full(m, np.nan),  # no bound from the head's scores alone: the head is not certified
        scores,
        score_bounds=ScoreBounds(errors, exact, policy.temperature),
    )


def _mass_outside(weights: np.ndarray, columns: np.ndarray) -> float:
    """The sum of one query's ``weights`` outside ``columns``: the weights there set to 0 for
    the sum, then put back. The same sum as of a copy with those zeroed, without the copy:
    20 µs at 10^5 keys here, where making the copy and summing it took 80."""
    kept = weights[columns]
    weights[columns] = 0.0
    mass = float(weights.sum())
    weights[columns] = kept
    return mass


def _head(
    scores: np.ndarray, query: np.ndarray, keys: np.ndarray, largest: np.ndarray, max_k: int
) -> np.ndarray:
    """The columns of one query's keys within ``HEAD_MARGIN`` of the best or that could be the
    best (s̃ + e at least the highest s̃ − e: codes of long vectors, under "dot", err by far
    more than the margin), at most ``max_k`` of them (the best). The errors' factors: the
    query's (2,), the keys' (2, c) (``ScoreErrors``) and their largest (2,)."""
    best = scores.max()
    # Only keys within twice the largest error of the best could be it: their errors alone.
    widest = 2 * float(query @ largest)
    head = np.flatnonzero(scores >= best - max(HEAD_MARGIN, widest))
    if widest > HEAD_MARGIN:
        error = query @ keys[:, head].astype(np.float64)
        could_be_best = scores[head] + error >= (scores[head] - error).max()
        head = head[(scores[head] >= best - HEAD_MARGIN) | could_be_best]
    if len(head) > max_k:
        head = head[np.argpartition(-scores[head], max_k - 1)[:max_k]]
    return head
