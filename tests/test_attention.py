"""The attention math against the seed formula softmax(QKᵀ/√d)V, computed naively."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _support import assert_close, close

from softdict._attention import (
    attention,
    best_unordered,
    mass_interval,
    softmax,
    tail_mass_bound,
    top_of_scores,
    weight_error_bound,
)


def naive_softmax(row: list[float]) -> list[float]:
    exps = [math.exp(x) for x in row]
    return [e / sum(exps) for e in exps]


def naive_seed_attention(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """softmax(QKᵀ/√d)V, written out with Python loops and no numerical tricks."""
    d = Q.shape[1]
    out = []
    for q in Q:
        scores = [sum(q[j] * k[j] for j in range(d)) / math.sqrt(d) for k in K]
        weights = naive_softmax(scores)
        out.append(sum(w * v for w, v in zip(weights, V)))
    return np.array(out)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("value_dims", [(), (3,)])
def test_attention_matches_seed_formula(seed: int, value_dims: tuple[int, ...]) -> None:
    rng = np.random.default_rng(seed)
    m, n, d = 4, 7, 8
    Q = rng.standard_normal((m, d)).astype(np.float32)
    K = rng.standard_normal((n, d)).astype(np.float32)
    V = rng.standard_normal((n, *value_dims))
    expected = naive_seed_attention(Q.astype(float), K.astype(float), V)
    out, weights = attention(Q, K, V, similarity="scaled_dot", temperature=1.0)
    assert_close(out, expected, atol=1e-6)
    assert_close(weights.sum(axis=1), 1.0)


def test_seed_softmax_figures() -> None:
    np.testing.assert_allclose(
        softmax(np.array([4.0, -1.0, 2.1]), 1.0), [0.8648, 0.0058, 0.1294], atol=1e-4
    )
    np.testing.assert_allclose(
        softmax(np.array([3.0, 2.0, 1.0]), 1.0), [0.665, 0.245, 0.090], atol=1e-3
    )


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e30, 1e300])
@pytest.mark.parametrize("temperature", [1e-300, 1e-3, 1.0, 1e6])
def test_softmax_finite_and_normalised_for_any_scale(scale: float, temperature: float) -> None:
    scores = np.array([[1.0, -2.0, 0.5, 1.0]]) * scale
    weights = softmax(scores, temperature)
    assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert weights.sum() == close(1.0)
    # The two tied maxima always share the largest weight equally.
    assert weights[0, 0] == close(weights[0, 3])
    assert weights[0, 0] == weights.max()


def test_softmax_gives_masked_scores_zero_weight() -> None:
    weights = softmax(np.array([[0.3, -np.inf, 0.1]]), 0.1)
    assert weights[0, 1] == 0.0
    assert weights.sum() == close(1.0)


def test_softmax_of_equal_scores_is_uniform() -> None:
    assert_close(softmax(np.full((2, 5), 7.0), 0.01), 0.2)


@pytest.mark.parametrize("seed", range(20))
def test_tail_mass_bound_holds_and_is_the_design_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k, temperature = 50, 6, float(rng.uniform(0.05, 2.0))
    scores = rng.standard_normal(n)
    weights = softmax(scores[None, :], temperature)[0]
    order = np.argsort(-scores)
    true_tail = weights[order[k:]].sum()
    top = scores[order[:k]]
    bound = tail_mass_bound(top[None, :], n, temperature)[0]
    s1, sk = top[0], top[-1]
    formula = (
        (n - k)
        * math.exp((sk - s1) / temperature)
        / (
            sum(math.exp((s - s1) / temperature) for s in top)
            + (n - k) * math.exp((sk - s1) / temperature)
        )
    )
    assert bound == close(formula)
    assert true_tail <= bound + 1e-12


def test_tail_mass_bound_ignores_padding_and_is_zero_when_nothing_is_left_out() -> None:
    padded = np.array([[0.9, 0.5, -np.inf, -np.inf]])
    assert tail_mass_bound(padded, 2, 0.1)[0] == 0.0
    # Three keys in the store, two found: one omitted key scoring at most 0.5.
    expected = math.exp(-4) / (1 + math.exp(-4) + math.exp(-4))
    assert tail_mass_bound(padded, 3, 0.1)[0] == close(expected)


def test_top_of_scores_sorts_pads_and_skips_minus_infinity() -> None:
    scores = np.array([[0.1, 0.9, -np.inf, 0.5], [0.3, 0.2, 0.1, 0.0]])
    best, columns = top_of_scores(scores, 5)
    assert columns.tolist() == [[1, 3, 0, -1, -1], [0, 1, 2, 3, -1]]
    np.testing.assert_array_equal(best[0, :3], [0.9, 0.5, 0.1])
    assert np.all(np.isneginf(best[0, 3:])) and np.isneginf(best[1, 4])
    best, columns = top_of_scores(scores, 2)
    assert columns.tolist() == [[1, 3], [0, 1]]


@pytest.mark.parametrize(
    "kind", ["normal", "ties", "ascending", "descending", "-inf", "nan", "between"]
)
def test_the_best_of_a_long_row_are_those_argpartition_finds(kind: str) -> None:
    """``best_unordered`` cuts a long row at a threshold from a sample of it before it
    partitions: whatever the row (many ties, sorted either way, mostly -inf, NaN among it, its
    best entries between those the sample reads) it
    takes as many entries as asked, once each, of the same values as a partition of the whole
    row, and ``top_of_scores`` over such rows orders them as a stable sort does."""
    rng = np.random.default_rng(len(kind))
    for n in (5_000, 20_000, 100_000):
        row = rng.standard_normal(n)
        if kind == "ties":
            row = rng.integers(0, 5, n).astype(np.float64)
        elif kind in ("ascending", "descending"):
            row = np.sort(row) if kind == "ascending" else -np.sort(row)
        elif kind == "-inf":
            row[rng.random(n) < 0.7] = -np.inf
        elif kind == "nan":
            row[rng.random(n) < 0.01] = np.nan
        elif kind == "between":  # the sample reads every (n // 2048)-th entry from the first
            row[1 :: n // 2048] += 10.0
        for take in (1, 7, 64, 224, 1_664, n // 16, n // 15):
            found = best_unordered(row, take)
            expected = np.argpartition(-row, take - 1)[:take]
            assert len(found) == take and len(np.unique(found)) == take
            assert np.array_equal(np.sort(row[found]), np.sort(row[expected]), equal_nan=True)
        if kind != "nan":
            _, columns = top_of_scores(row[None], 300)
            finite = np.isfinite(row[columns[0][columns[0] >= 0]])
            stable = np.argsort(-row, kind="stable")[:300]
            assert columns[0][: finite.sum()].tolist() == stable[: finite.sum()].tolist()


@pytest.mark.parametrize("seed", range(5))
def test_top_of_scores_orders_ties_by_column_whatever_k(seed: int) -> None:
    """Scores with many ties (few distinct values), -inf among them: for every k the columns
    are the first k of a stable sort of every column by score, so ties go in column order (the
    keys' order) and the best k are the first k of the best k + 1. argpartition took any of the
    entries tied at the cut: ``nearest(q, 1)`` named one accent twin, ``nearest(q, 5)`` the
    other first."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=(6, 50)).astype(np.float64)
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    full = np.argsort(-scores, axis=1, kind="stable")
    for k in range(1, 55):
        best, columns = top_of_scores(scores, k)
        expected = full[:, :k]
        found = np.take_along_axis(scores, expected, axis=1)
        expected = np.where(np.isfinite(found), expected, -1)
        if k > 50:
            expected = np.pad(expected, ((0, 0), (0, k - 50)), constant_values=-1)
        assert columns.tolist() == expected.tolist(), k
        assert np.array_equal(
            best[columns >= 0], scores[np.nonzero(columns >= 0)[0], columns[columns >= 0]]
        )


def test_softmax_is_the_naive_softmax_to_float32_precision() -> None:
    """The exponentials run in float32 (``exponentials``): the naive float64 softmax within
    float32's rounding at a small temperature too, every weight finite and the rows summing
    to 1. At T = 0.01 most gaps pass float32's normal range (87·T): those weights are 0, and
    no weight is negative."""
    rng = np.random.default_rng(3)
    scores = rng.uniform(-1, 1, size=(5, 40))
    scores[0, :3] = -np.inf
    for temperature in (1.0, 0.05, 0.01):
        weights = softmax(scores, temperature)
        for row, got in zip(scores, weights):
            finite = np.isfinite(row)
            want = naive_softmax(list(row[finite] / temperature))
            assert_close(got[finite], want, rtol=1e-6, atol=1e-12)
            assert np.all(got[~finite] == 0)
        assert np.all(weights >= 0)
        assert_close(weights.sum(axis=1), 1.0)
    # Past the floor: exactly 0; within it, the naive weight to float32's rounding of the
    # exponent (80 · 6e-8 of it, relative).
    weights = softmax(np.array([[0.0, -0.8, -0.9, -2.0]]), 0.01)[0]
    assert weights[2:].tolist() == [0.0, 0.0]
    assert_close(weights[:2], naive_softmax([0.0, -80.0]), rtol=1e-5, atol=0)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("width", [0.5, 10.0])
def test_score_error_bounds_hold_for_any_errors_within_them(seed: int, width: float) -> None:
    """Weights of scores each known within ± spread·T: for true scores anywhere in those
    ranges (the extremes included), the total variation to the true softmax is within
    ``weight_error_bound`` and the true mass of any set of keys within ``mass_interval``.
    With scores 10 apart at T = 0.05 most weights are below e^-87, and so 0, while spreads past
    87 could make any of them the best: bounded from the weights, such a key counted as surely
    weightless (a probe's dot store: a bound of 0 on an answer that was wrong)."""
    rng = np.random.default_rng(seed)
    n, temperature = 30, 0.05
    approximate = rng.uniform(-width, width, size=(1, n))
    most = 0.6 if width < 1 else 1.2 * width / temperature  # log-weights: up to 240 wide
    spread = rng.uniform(0, most, size=(1, n)) * (rng.random((1, n)) < 0.7)  # some exact
    inside = rng.random((1, n)) < 0.3
    weights = softmax(approximate, temperature)
    bound = weight_error_bound(approximate, temperature, spread)[0]
    low, high = mass_interval(approximate, temperature, spread, inside)[0]
    for trial in range(50):
        # Random errors, and the two extremes of the interval.
        if trial == 0:
            signs = np.where(inside, -1.0, 1.0)
        elif trial == 1:
            signs = np.where(inside, 1.0, -1.0)
        else:
            signs = rng.uniform(-1, 1, size=(1, n))
        true = softmax(approximate + signs * spread * temperature, temperature)
        # Slack for the weights' own rounding: float32 exponentials, ~1e-7 of each weight.
        assert 0.5 * np.abs(true - weights).sum() <= bound + 1e-6
        mass = float(true[inside].sum())
        assert low - 1e-6 <= mass <= high + 1e-6
        if trial < 2:  # the extremes reach the interval's ends
            assert mass == close(low if trial == 0 else high)
    # Nothing unknown, nothing to bound.
    assert weight_error_bound(approximate, temperature, np.zeros_like(spread))[0] == 0.0


def test_a_weight_below_the_floor_can_still_be_the_best_within_its_spread() -> None:
    """The best key scored exactly, the others 5 and 6 below (100 and 120 log-weights at
    T = 0.05: weights of 0) but each known only within 150: either could be the best. Bounded
    from the weights, both were surely 0, the bound 0 and the head's mass surely 1."""
    scores, spread = np.array([[0.0, -5.0, -6.0]]), np.array([[0.0, 150.0, 150.0]])
    assert softmax(scores, 0.05)[0].tolist() == [1.0, 0.0, 0.0]
    assert weight_error_bound(scores, 0.05, spread)[0] == close(1.0)
    low, high = mass_interval(scores, 0.05, spread, np.array([[True, False, False]]))[0]
    assert low == close(0.0, abs=1e-20) and high == 1.0
    padded = np.array([[0.0, -np.inf, -5.0]])  # padding weighs nothing, whatever its spread
    assert weight_error_bound(padded, 0.05, np.array([[0.0, 1e6, 0.0]]))[0] == 0.0
    # Infinite spreads (a temperature of 5e-324) overflowed the sum of the highest; a NaN one
    # (0 times an infinite bound) counted as known exactly: both are as wide as can be.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unknown = np.array([[0.0, np.inf, np.inf]]), np.array([[0.0, np.nan, 0.0]])
        assert weight_error_bound(scores, 0.05, unknown[0])[0] == close(1.0)
        assert weight_error_bound(scores, 0.05, unknown[1])[0] == close(1.0)
