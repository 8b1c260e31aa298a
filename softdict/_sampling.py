"""Full attention over a large store, estimated: the exact head plus a sample of the rest.

For one query, let H be the keys the index found (scored exactly), R the other allowed keys and
S the keys of M draws with replacement from all allowed keys, each draw j with probability p_j
(uniform, p = 1/N, or drawn near the query: ``softdict.index._cells``); draws that land in H are
dropped, as H is counted exactly. With each key's w = e^(s/T) and f_j = 1/(M·p_j):

    Ẑ = Σ_H w + Σ_S f·w                   unbiased for Z = Σ_all w
    ŷ = (Σ_H w·v + Σ_S f·w·v) / Ẑ          a ratio estimator: consistent, bias O(1/M)

A sampled key gets the weight ω = f·w/Ẑ (the share of the attention it stands for), a head key
w/Ẑ (its estimated share), so the weights still sum to 1 and every value kind blends them as it
blends any weights. The estimated tail mass is t̂ = Σ_S ω. By the delta method (Mussmann & Ermon
2016 use the same head-plus-sampled-tail form), over the M draws (a dropped draw counting 0),

    se(t̂) = (1 − t̂)·√M·sd(ω)        se(ŷ) = √M·sd(ω·(v − ŷ))

and the interval is estimate ± z·se for the normal quantile z of the confidence. The sample
starts at ``FIRST_SAMPLE`` draws and, where the tail interval is wider than the tolerance, grows
once to the size the central limit theorem asks for, at most ``max_sample``.

Sampling with replacement keeps the estimator and its error formula simple at any size and lets
a second draw extend the first; the finite-population gain it gives up is small where sampling is
used at all (N above 10⁴, M at most a few thousand). Where ``max_sample`` would reach the number
of keys outside the head, they are scored whole instead, exactly.

The formulas come first; ``with_sampled_tail`` then applies them to a retrieval's head
(``softdict._retrieval``): it draws each query's sample from the index, scores it in both
channels, and widens the head's ``Selection`` by the sampled keys.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from softdict._selection import RetrievalPolicy, Route, Selection
from softdict.index.base import Allow, IndexBackend, is_in
from softdict.spelling.fusion import SpellingRequest

__all__ = [
    "FIRST_SAMPLE",
    "TailEstimate",
    "estimate_tail",
    "query_rng",
    "sample_size_for",
    "value_stderr",
    "with_sampled_tail",
    "z_of",
]

# The first draw: enough for a stable standard error, cheap beside the head's search.
FIRST_SAMPLE = 512


def z_of(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence`` (1.96 for 0.95)."""
    return NormalDist().inv_cdf((1 + confidence) / 2)


def query_rng(seed: int, query: np.ndarray) -> np.random.Generator:
    """A generator seeded by ``seed`` and the query's bytes: a query draws the same sample alone
    or in a batch, in any order, so a lookup is reproducible."""
    return np.random.default_rng([seed, zlib.crc32(np.ascontiguousarray(query).tobytes())])


@dataclass(frozen=True)
class TailEstimate:
    """One query's estimate: weights of its head and sampled keys (summing to 1), the estimated
    tail mass and its standard error."""

    head_weights: np.ndarray
    sample_weights: np.ndarray
    tail_mass: float
    tail_stderr: float


def estimate_tail(
    head_scores: np.ndarray,
    sample_scores: np.ndarray,
    factors: np.ndarray | None,
    n_draws: int,
    temperature: float,
) -> TailEstimate:
    """The weights of the module docstring for one query: ``head_scores`` (k,) scored exactly,
    ``sample_scores`` (m,) the kept draws of ``n_draws`` with their ``factors`` f = 1/(M·p).
    ``factors`` None: the sampled keys are every key outside the head, so nothing is estimated
    and the error is 0."""
    scores = np.concatenate([head_scores, sample_scores]).astype(np.float64)
    top = scores.max() if len(scores) else 0.0
    with np.errstate(under="ignore", over="ignore"):  # a tiny T: a gap divides to -inf
        w = np.exp((scores - top) / temperature)
    head_w, sample_w = w[: len(head_scores)], w[len(head_scores) :]
    if factors is not None:
        sample_w = sample_w * factors
    total = head_w.sum() + sample_w.sum()
    head_weights = head_w / total
    sample_weights = sample_w / total
    tail = float(sample_weights.sum())
    stderr = 0.0
    if factors is not None and n_draws > 1:
        stderr = (1 - tail) * math.sqrt(n_draws) * float(_draws_sd(sample_weights, n_draws))
    return TailEstimate(head_weights, sample_weights, tail, stderr)


def _draws_sd(kept: np.ndarray, n_draws: int) -> np.ndarray:
    """The sample standard deviation (along axis 0) over ``n_draws`` draws: the rows of ``kept``
    and a zero for each draw that was dropped."""
    mean = kept.sum(axis=0) / n_draws
    variance = ((kept**2).sum(axis=0) - n_draws * mean**2) / (n_draws - 1)
    return np.sqrt(np.maximum(variance, 0.0))


def first_draws(policy: RetrievalPolicy, at_least: int = 0) -> int:
    """How many keys a query draws first: ``FIRST_SAMPLE`` or the backend's ``at_least``
    (``Capabilities.first_sample``), or ``max_sample`` where it is less, but at least 2 (the
    spread of one draw is not defined)."""
    return min(max(FIRST_SAMPLE, at_least), max(policy.max_sample, 2))


def sample_size_for(stderr: float, m: int, tolerance: float, z: float, cap: int) -> int:
    """The sample size that brings the interval's half-width z·se (se measured at ``m``) under
    ``tolerance``: se falls as 1/√m. ``m`` where it already is; at most ``cap``."""
    if z * stderr <= tolerance:
        return m
    # 10% more than the CLT's size: se measured on a small sample is itself uncertain. As a
    # product, not a power: a tolerance of 1e-300 made the square overflow (an OverflowError).
    ratio = z * stderr / tolerance
    wanted = 1.1 * m * ratio * ratio
    return cap if not math.isfinite(wanted) or wanted >= cap else math.ceil(wanted)


def value_stderr(
    sample_weights: np.ndarray, sample_values: np.ndarray, value: np.ndarray, n_draws: int
) -> np.ndarray:
    """Standard error of a blended value (module docstring) from one query's sampled keys'
    weights (m,) and values (m,) or (m, d), kept of ``n_draws`` draws, around the blended
    ``value``: 0 without a sample."""
    m = len(sample_weights)
    if n_draws < 2 or not m:
        return np.zeros(np.shape(value))
    # Over each value dimension's largest magnitude: squared, values past about 1e154 overflowed
    # to NaN (and values near float64's limit already in their difference from the blend).
    scale = np.maximum(np.abs(sample_values).max(axis=0), np.abs(value))
    scale = np.where(scale > 0, scale, 1.0)
    spread = sample_weights.reshape((m,) + (1,) * (sample_values.ndim - 1)) * (
        sample_values / scale - value / scale
    )
    return math.sqrt(n_draws) * _draws_sd(spread, n_draws) * scale


def with_sampled_tail(
    backend: IndexBackend,
    queries: np.ndarray,
    head: Selection,
    policy: RetrievalPolicy,
    allow: Allow | None,
    route: Route,
    spelling: SpellingRequest | None,
) -> Selection:
    """``head`` (each query's keys scored exactly, best first) with a sample of the other
    allowed keys standing for them: full attention, estimated (``softdict._sampling``).

    Each query draws ``first_draws`` keys from its own generator (``IndexBackend.sample_near``),
    and once more up to the size its tail interval asks for. Where ``max_sample`` would reach the
    keys outside the head, they are scored whole instead."""
    z = z_of(policy.confidence)
    first = first_draws(policy, backend.capabilities.first_sample)
    rows = []
    for i in range(len(queries)):
        found = head.ids[i] >= 0
        head_ids = head.ids[i, found]
        if route.n_allowed - len(head_ids) <= policy.max_sample:
            every = allow.ids if allow is not None else backend.ids()
            sample = _Sample(every[~is_in(every, head_ids)], None, 0)
            scored = _score_sample(backend, queries, i, sample, spelling)
            estimate = estimate_tail(head.scores[i, found], scored[0], None, 0, policy.temperature)
            rows.append((found, sample, scored, estimate))
            continue
        rng = query_rng(policy.seed, queries[i])
        sample = _draw(backend, queries[i], rng, first, allow, head_ids, policy)
        scored = _score_sample(backend, queries, i, sample, spelling)
        estimate = estimate_tail(
            head.scores[i, found], scored[0], sample.factors(), sample.draws, policy.temperature
        )
        wanted = sample_size_for(
            estimate.tail_stderr, sample.draws, policy.tolerance, z, policy.max_sample
        )
        if wanted > sample.draws:
            more = _draw(backend, queries[i], rng, wanted - sample.draws, allow, head_ids, policy)
            scored = _concatenated(scored, _score_sample(backend, queries, i, more, spelling))
            sample = sample.extended(more)
            estimate = estimate_tail(
                head.scores[i, found], scored[0], sample.factors(), sample.draws,
                policy.temperature,
            )  # fmt: skip
        rows.append((found, sample, scored, estimate))
    return _assemble(head, rows, z)


@dataclass(frozen=True)
class _Sample:
    """One query's sampled keys: the ``ids`` kept of ``draws`` draws (those in the head are
    dropped) and each kept draw's ``probability``; None: every key outside the head, scored.
    ``meaning``: their scores where the draw brought them (``IndexBackend.sample_scored``)."""

    ids: np.ndarray
    probability: np.ndarray | None
    draws: int
    meaning: np.ndarray | None = None

    def factors(self) -> np.ndarray | None:
        """Each kept draw's f = 1/(M·p) (``softdict._sampling``); None when nothing is estimated."""
        return None if self.probability is None else 1.0 / (self.draws * self.probability)

    def extended(self, more: _Sample) -> _Sample:
        assert self.probability is not None and more.probability is not None
        return _Sample(
            np.concatenate([self.ids, more.ids]),
            np.concatenate([self.probability, more.probability]),
            self.draws + more.draws,
        )


def _draw(
    backend: IndexBackend,
    query: np.ndarray,
    rng: np.random.Generator,
    count: int,
    allow: Allow | None,
    head_ids: np.ndarray,
    policy: RetrievalPolicy,
) -> _Sample:
    """``count`` draws from the allowed keys (``IndexBackend.sample_scored``), those in the head
    dropped: they are counted exactly, and a dropped draw adds 0 to the estimate."""
    if backend.capabilities.draws_outside_head:
        drawn = backend.sample_scored(query, count, rng, allow, policy.temperature, head_ids)
    else:  # as a plug-in written before ``head`` was added takes it
        drawn = backend.sample_scored(query, count, rng, allow, policy.temperature)
    ids, probability, meaning = drawn
    kept = ~is_in(ids, head_ids)
    return _Sample(
        ids[kept], probability[kept], len(ids), None if meaning is None else meaning[kept]
    )


# A sample's (combined score, meaning, spelling similarity or None) per key.
_Scored = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def _score_sample(
    backend: IndexBackend,
    queries: np.ndarray,
    i: int,
    sample: _Sample,
    spelling: SpellingRequest | None,
) -> _Scored:
    """Query ``i``'s (combined score, meaning, spelling similarity) on the ``sample``'s keys."""
    ids = sample.ids
    meaning = sample.meaning
    if meaning is None:
        meaning = backend.score_ids(queries[i : i + 1], ids)[0] if len(ids) else np.zeros(0)
    if spelling is None:
        return meaning, meaning, None
    request = spelling.subset(np.array([i]))
    similarity, marks = request.spelled(ids[None, :])
    combined = request.score(meaning[None, :], similarity, marks)[0]
    return combined, meaning, similarity[0]


def _concatenated(first: _Scored, second: _Scored) -> _Scored:
    spelled = None
    if first[2] is not None and second[2] is not None:
        spelled = np.concatenate([first[2], second[2]])
    return np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]]), spelled


def _assemble(
    head: Selection,
    rows: list[tuple[np.ndarray, _Sample, _Scored, TailEstimate]],
    z: float,
) -> Selection:
    """One Selection from the head and each query's sample: the head's columns as they were
    (weights re-estimated), then the sampled keys, padded to one width."""
    m, width = head.ids.shape
    extra = max((len(sample.ids) for _, sample, _, _ in rows), default=0)
    shape = (m, width + extra)

    def widen(matrix: np.ndarray | None, padding: float) -> np.ndarray | None:
        if matrix is None:
            return None
        out = np.full(shape, padding, dtype=matrix.dtype)
        out[:, :width] = matrix
        return out

    ids = widen(head.ids, -1)
    scores = widen(head.scores, -np.inf)
    meaning = widen(head.meaning, -np.inf)
    similarity = widen(head.spelling, np.nan)
    assert ids is not None and scores is not None and meaning is not None
    weights = np.zeros(shape)
    sampled = np.zeros(shape, dtype=bool)
    n_sampled = np.zeros(m, dtype=np.int64)
    n_draws = np.zeros(m, dtype=np.int64)
    tail = np.zeros(m)
    stderr = np.zeros(m)
    for i, (found, sample, scored, estimate) in enumerate(rows):
        sample_ids = sample.ids
        columns = slice(width, width + len(sample_ids))
        weights[i, :width][found] = estimate.head_weights
        weights[i, columns] = estimate.sample_weights
        ids[i, columns] = sample_ids
        scores[i, columns] = scored[0]
        meaning[i, columns] = scored[1]
        if similarity is not None and scored[2] is not None:
            similarity[i, columns] = scored[2]
        sampled[i, columns] = True
        n_sampled[i] = len(sample_ids)
        n_draws[i] = sample.draws
        tail[i], stderr[i] = estimate.tail_mass, estimate.tail_stderr
    return Selection(
        scores,
        ids,
        weights,
        head.k,
        tail,
        head.tail_bound,
        meaning,
        similarity,
        head.terms,
        sampled,
        n_sampled,
        stderr,
        z,
        n_draws,
    )
