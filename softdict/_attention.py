"""Attention math as pure numpy functions: a stable softmax, the blend, the tail bound, top-k.

    attention(Q, K, V) = softmax(sim(Q, K) / T) · V

With ``similarity="scaled_dot"`` and ``temperature=1`` this is exactly the seed formula
softmax(QKᵀ/√d)V, which the tests check against a naive implementation. Nothing here knows about
keys, encoders, stores or indexes; they call these functions on the scores they have selected.
"""

from __future__ import annotations

import math

import numpy as np

from softdict._similarity import Similarity

__all__ = [
    "attention",
    "best_unordered",
    "blend",
    "exponentials",
    "mass_interval",
    "softmax",
    "tail_mass_bound",
    "top_columns",
    "top_of_scores",
    "weight_error_bound",
]


def softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    """Softmax of ``scores / temperature`` along the last axis, finite for any finite scores.

    The row maximum is subtracted before dividing by the temperature, so the largest term is
    exp(0) = 1 and nothing overflows, however large the scores or small the temperature. Scores of
    -inf (masked keys, padding) get weight exactly 0; every row needs at least one finite score.
    Float64 weights from float32 exponentials (``exponentials``).
    """
    weights = exponentials(scores, temperature)
    # Times the reciprocal of the sum: half the cost of a division, the same to float64's last
    # bit or so (far below the float32 exponentials' rounding).
    weights *= 1.0 / weights.sum(axis=-1, keepdims=True)
    return weights


# float32's exp leaves its normal range below e^-87.3, where numpy's vectorised exp falls back to
# a scalar loop: an exponent below this floor made it about 10x slower (0.4 ms for 10^5 scores
# here, against 0.04), which a gap of 87·T reaches (4.35 at T = 0.05: a spelling match over
# meaning alone). Exponents at or below it are set to it, and their weights to 0 after the exp.
_LOWEST_EXPONENT = np.float32(-87.0)


def _shifted(scores: np.ndarray, temperature: float, dtype: type = np.float64) -> np.ndarray:
    """(scores - their row maximum) / temperature, computed in float64 and rounded to ``dtype``
    as it is written (float32 for the exponentials: no second pass over every score to round)."""
    shifted = np.asarray(scores, dtype=np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    scale = 1.0 / temperature
    # Multiplying by 1/T costs half what dividing does. A temperature whose reciprocal
    # overflows divides instead: a gap then divides to -inf, whose exp is the weight 0 it
    # should be (inf times the best's gap of 0 would be NaN).
    with np.errstate(over="ignore"):
        if not math.isfinite(scale):
            return (shifted / temperature).astype(dtype, copy=False)
        out = shifted if dtype is np.float64 else np.empty(shifted.shape, dtype=dtype)
        return np.multiply(shifted, scale, out=out, casting="same_kind")


def exponentials(scores: np.ndarray, temperature: float) -> np.ndarray:
    """exp((scores - their row maximum) / temperature), float64: softmax's weights before they
    are divided by their sum (the best is 1), for a caller that needs that sum too.

    The exp runs in float32. Every score comes from float32 kernels (a relative 1e-7 of error,
    which the temperature magnifies to ~1e-6 in the exponent at T = 0.05), and float32's exp
    adds less than that (its rounding of the shifted score, 6e-8 of it, and one unit in the
    last place). numpy vectorises float64's exp only on AVX-512: on an AVX2 CPU it took 54-150
    us for 10^4 scores against 14 us for float32's (numpy 2.4, one-off timings here), the
    largest single cost of scoring 10^4 keys. A weight at or below e^-87 (under 1.7e-38 of the
    best's) is 0 (``_LOWEST_EXPONENT``).
    """
    # A gap beyond float32's range rounds to -inf, which the floor then holds.
    exponents = _shifted(scores, temperature, np.float32)
    if not exponents.size or exponents.min() > _LOWEST_EXPONENT:  # none at or below the floor
        return np.exp(exponents, out=exponents).astype(np.float64)
    np.maximum(exponents, _LOWEST_EXPONENT, out=exponents)
    # The weights array first holds which exponents are above the floor (1.0 or 0.0), then
    # their exponentials times that: those at the floor are 0 exactly, the others untouched.
    # (A masked assignment took 8x the exp's time here, with the mask's values mixed.)
    weights = np.greater(exponents, _LOWEST_EXPONENT, out=np.empty(exponents.shape))
    weights *= np.exp(exponents, out=exponents)
    return weights


def blend(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Weighted sum of value rows: (m, n) weights with (n,) or (n, d) values -> (m,) or (m, d)."""
    return np.asarray(weights, dtype=np.float64) @ np.asarray(values, dtype=np.float64)


def attention(
    queries: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    *,
    similarity: Similarity | str = Similarity.SCALED_DOT,
    temperature: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(softmax(sim(Q, K) / T) · V, weights)`` for raw embeddings.

    >>> import numpy as np
    >>> out, w = attention(np.eye(2), np.eye(2), np.array([1.0, 3.0]), temperature=1.0)
    >>> np.round(w, 3).tolist()
    [[0.67, 0.33], [0.33, 0.67]]
    """
    weights = softmax(Similarity(similarity).scores(queries, keys), temperature)
    return blend(weights, values), weights


def tail_mass_bound(
    top_scores: np.ndarray,
    n_total: int,
    temperature: float,
    ceiling: np.ndarray | None = None,
) -> np.ndarray:
    """Upper bound on the attention mass of keys left out of a top-k softmax, per query.

    ``top_scores`` (m, k) are each query's best scores, best first, padded with -inf. Every
    omitted key scores at most s_k (the k-th best), so with s_1 the best score the omitted mass is
    at most  (n − k)·e^((s_k − s_1)/T) / (Σ_top e^((s_i − s_1)/T) + (n − k)·e^((s_k − s_1)/T)).
    ``ceiling`` (m,) replaces s_k where omitted keys are known to score at most something else
    (a spelling channel's candidates bound the spelling part of the score separately).
    """
    scores = np.asarray(top_scores, dtype=np.float64)
    found = np.isfinite(scores).sum(axis=1)
    omitted = np.maximum(n_total - found, 0)
    best = scores[:, :1]
    if ceiling is None:
        kth = np.take_along_axis(scores, np.maximum(found - 1, 0)[:, None], axis=1)[:, 0]
    else:
        kth = np.asarray(ceiling, dtype=np.float64)
    # A tiny temperature divides a gap to -inf (weight 0), without a word.
    with np.errstate(over="ignore"):
        top_sum = np.exp((scores - best) / temperature).sum(axis=1)
        omitted_each = np.exp((kth - best[:, 0]) / temperature)
    with np.errstate(invalid="ignore"):
        bound = omitted * omitted_each / (top_sum + omitted * omitted_each)
    # A ceiling far above the best score makes both terms infinite: then nothing is bounded.
    return np.where(omitted > 0, np.nan_to_num(bound, nan=1.0), 0.0)


# A row at least this many times longer than the entries taken from it is cut by a threshold
# first (``best_unordered``); shorter ones are partitioned whole.
_CUT_FIRST = 16
# Entries of a long row whose order statistic sets that threshold: about this many, evenly spaced.
_THRESHOLD_SAMPLE = 2048


def best_unordered(row: np.ndarray, take: int) -> np.ndarray:
    """The positions of the ``take`` largest entries of a 1-D ``row`` (0 < ``take`` <= len),
    in no order, any of those tied at the cut: what ``np.argpartition(-row, take - 1)[:take]``
    gives. On a long row that partition cost 1.1-1.2 ms for 10^5 scores here, so only the
    entries at or above a threshold are partitioned: an order statistic of every s-th entry,
    low enough that about twice ``take`` entries pass it (about 0.1 ms for the 224 best of 10^5).
    The whole row is partitioned where the sample misleads: fewer than ``take`` pass (a row
    whose best entries fall between the sampled ones, NaN in the sample), or more than a
    quarter of the row passes (most entries tied at the threshold, or -inf)."""
    n = len(row)
    if take >= n:
        return np.arange(n)
    if _cut_first(n, take):
        step = n // _THRESHOLD_SAMPLE
        sample = row[::step]
        # Sample entries at or above the threshold stand for about ``step`` entries each.
        rank = min(len(sample) - 1, 2 * take // step + 8)
        # Sorted, not partitioned: numpy's partition of a sample of many equal entries (a row
        # of mostly -inf) took 0.4 ms for 4,000 of them, the sort 20 µs (90 for distinct ones).
        threshold = np.sort(sample)[len(sample) - 1 - rank]
        passed = np.flatnonzero(row >= threshold)
        if take <= len(passed) <= n // 4:
            return passed[np.argpartition(-row[passed], take - 1)[:take]]
    return np.argpartition(-row, take - 1)[:take]


def _cut_first(n: int, take: int) -> bool:
    """Whether ``best_unordered`` cuts a row of ``n`` entries by a threshold first."""
    return n >= _CUT_FIRST * take and n > _THRESHOLD_SAMPLE


def top_columns(scores: np.ndarray, take: int) -> np.ndarray:
    """The columns (m, take) of the ``take`` best entries of each row of ``scores`` (m, n),
    ``take`` < n, in column order: of entries tied at the cut, those of the lowest columns.
    ``argpartition`` takes any of them, so ``nearest(q, 1)`` could name one of two keys with the
    same score (accent twins the encoder embeds alike) and ``nearest(q, 5)`` the other first; a
    stable sort of these by score then orders every tie by column (the keys' order)."""
    if len(scores) and _cut_first(scores.shape[1], take):  # long rows: each cut on its own
        part = np.stack([best_unordered(row, take) for row in scores])
    else:
        part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
    for i, (row, taken) in enumerate(zip(scores, part)):  # row by row: 1-D calls are cheaper
        cut = row[taken].min()
        # More entries at or above the cut than taken: some tied at the cut were left out.
        if np.count_nonzero(row >= cut) > take:
            above = np.flatnonzero(row > cut)
            part[i] = np.concatenate([above, np.flatnonzero(row == cut)[: take - len(above)]])
    return np.sort(part, axis=1)


def top_of_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each row of a score matrix (m, n), best first (ties by
    column): scores and columns (m, k). Entries scored -inf, and the tail where n < k, are
    padded with column -1."""
    m, n = scores.shape
    take = min(k, n)
    if take == 0:
        return np.full((m, k), -np.inf), np.full((m, k), -1, dtype=np.int64)
    part = top_columns(scores, take) if take < n else np.broadcast_to(np.arange(n), (m, n))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    columns = np.take_along_axis(part, order, axis=1)
    best = np.take_along_axis(part_scores, order, axis=1)
    columns = np.where(np.isfinite(best), columns, -1).astype(np.int64)
    if take < k:
        columns = np.pad(columns, ((0, 0), (0, k - take)), constant_values=-1)
        best = np.pad(best, ((0, 0), (0, k - take)), constant_values=-np.inf)
    return best, columns


def weight_error_bound(scores: np.ndarray, temperature: float, spread: np.ndarray) -> np.ndarray:
    """Upper bound on the total variation between softmax(``scores`` (m, n) / T), scores each
    known within ± ``spread``·T (m, n; a bound on each log-weight's error), and the softmax of
    the true scores, per query.

    Each true weight is w_i·e^(a_i)/Σ_j w_j·e^(a_j) for some |a_i| <= spread_i, so it is at
    least w_i·e^(-spread_i)/Σ_j w_j·e^(spread_j), and the total variation,
    1 − Σ_i min(w_i, w*_i), is at most 1 − Σ_i w_i·e^(-spread_i) / Σ_j w_j·e^(spread_j).
    (Up to float rounding, far below the bounds of scores read from codes.)"""
    down, up = _perturbed(scores, temperature, spread)
    low, high = down.sum(axis=-1), up.sum(axis=-1)
    with np.errstate(invalid="ignore"):
        return np.clip(np.nan_to_num(1.0 - low / high, nan=1.0), 0.0, 1.0)


def mass_interval(
    scores: np.ndarray, temperature: float, spread: np.ndarray, inside: np.ndarray
) -> np.ndarray:
    """(m, 2): where the true mass of the keys marked ``inside`` (m, n) lies, for softmax
    (``scores`` (m, n) / T) whose log-weights are each known within ± ``spread``
    (``weight_error_bound``).

    The mass M/(M + O) of the inside keys (unnormalised masses M, O) grows with M and falls with
    O, so it is lowest with every inside score at its lowest and every other at its highest."""
    down, up = _perturbed(scores, temperature, spread)
    inner_low = np.where(inside, down, 0.0).sum(axis=-1)
    inner_high = np.where(inside, up, 0.0).sum(axis=-1)
    outer_low = np.where(inside, 0.0, down).sum(axis=-1)
    outer_high = np.where(inside, 0.0, up).sum(axis=-1)
    with np.errstate(invalid="ignore"):
        low = np.nan_to_num(inner_low / (inner_low + outer_high), nan=0.0)
        high = np.nan_to_num(inner_high / (inner_high + outer_low), nan=1.0)
    return np.clip(np.stack([low, high], axis=-1), 0.0, 1.0)


def _perturbed(
    scores: np.ndarray, temperature: float, spread: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each key's unnormalised weight at its true score's lowest and highest, e^(l − spread)
    and e^(l + spread) with l = (score − best)/T, both over one factor (the largest of the
    highest), which the bounds' ratios do not see. From the log-weights, not the weights: a
    weight below e^-87 is 0 (``exponentials``), yet with a spread past 87 it could be the best
    key's (a probe: a dot store whose codes' error was 200·T listed the true best key at weight 0
    and bounded the error by 0). A score of -inf (padding) weighs 0 both ways."""
    e = np.asarray(spread, dtype=np.float64)
    # NaN (0 times an infinite bound) knows nothing: as wide as can be. Capped so that no sum of
    # the highest overflows (an infinite spread, at a temperature of 5e-324).
    e = np.where(np.isnan(e), 1e300, np.minimum(e, 1e300))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        logs = _shifted(scores, temperature)
        high = logs + e
        top = np.max(np.where(np.isfinite(high), high, -np.inf), axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        up = np.exp(high - top)
        down = np.exp(logs - e - top)
    return np.nan_to_num(down, nan=0.0), np.nan_to_num(up, nan=0.0)
