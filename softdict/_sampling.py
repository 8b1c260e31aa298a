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
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "FIRST_SAMPLE",
    "TailEstimate",
    "estimate_tail",
    "query_rng",
    "sample_size_for",
    "value_stderr",
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
    with np.errstate(under="ignore"):
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


def sample_size_for(stderr: float, m: int, tolerance: float, z: float, cap: int) -> int:
    """The sample size that brings the interval's half-width z·se (se measured at ``m``) under
    ``tolerance``: se falls as 1/√m. ``m`` where it already is; at most ``cap``."""
    if z * stderr <= tolerance:
        return m
    # 10% more than the CLT's size: se measured on a small sample is itself uncertain.
    return min(cap, math.ceil(1.1 * m * (z * stderr / tolerance) ** 2))


def value_stderr(
    sample_weights: np.ndarray, sample_values: np.ndarray, value: np.ndarray, n_draws: int
) -> np.ndarray:
    """Standard error of a blended value (module docstring) from one query's sampled keys'
    weights (m,) and values (m,) or (m, d), kept of ``n_draws`` draws, around the blended
    ``value``: 0 without a sample."""
    m = len(sample_weights)
    if n_draws < 2 or not m:
        return np.zeros(np.shape(value))
    spread = sample_weights.reshape((m,) + (1,) * (sample_values.ndim - 1)) * (
        sample_values - value
    )
    return math.sqrt(n_draws) * _draws_sd(spread, n_draws)
