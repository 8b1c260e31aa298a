"""The attention math against the seed formula softmax(QKᵀ/√d)V, computed naively."""

from __future__ import annotations

import math

import numpy as np
import pytest

from softdict._attention import (
    attention,
    prepare_keys,
    prepare_queries,
    prepared_scores,
    similarity_scores,
    softmax,
    tail_mass_bound,
)
from softdict._config import Similarity


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
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)


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
    assert weights.sum() == pytest.approx(1.0)
    # The two tied maxima always share the largest weight equally.
    assert weights[0, 0] == pytest.approx(weights[0, 3])
    assert weights[0, 0] == weights.max()


def test_softmax_gives_masked_scores_zero_weight() -> None:
    weights = softmax(np.array([[0.3, -np.inf, 0.1]]), 0.1)
    assert weights[0, 1] == 0.0
    assert weights.sum() == pytest.approx(1.0)


def test_softmax_of_equal_scores_is_uniform() -> None:
    np.testing.assert_allclose(softmax(np.full((2, 5), 7.0), 0.01), 0.2)


def naive_similarity(q: np.ndarray, k: np.ndarray, kind: Similarity) -> float:
    q, k = q.astype(float), k.astype(float)
    if kind is Similarity.COSINE:
        return float(q @ k / (np.linalg.norm(q) * np.linalg.norm(k)))
    if kind is Similarity.DOT:
        return float(q @ k)
    if kind is Similarity.SCALED_DOT:
        return float(q @ k / math.sqrt(len(q)))
    return -float(np.sum((q - k) ** 2))


@pytest.mark.parametrize("kind", list(Similarity))
def test_similarity_scores_match_naive_definitions(kind: Similarity) -> None:
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((3, 6)).astype(np.float32)
    K = rng.standard_normal((5, 6)).astype(np.float32)
    expected = [[naive_similarity(q, k, kind) for k in K] for q in Q]
    np.testing.assert_allclose(similarity_scores(Q, K, kind), expected, rtol=1e-5, atol=1e-5)


def test_cosine_of_a_zero_vector_is_zero_not_nan() -> None:
    scores = similarity_scores(np.zeros((1, 4)), np.eye(4), Similarity.COSINE)
    np.testing.assert_array_equal(scores, 0.0)


def test_l2_distance_to_itself_is_zero_up_to_float32_rounding_and_never_positive() -> None:
    K = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32) * 1e3
    scores = similarity_scores(K, K, Similarity.L2)
    sq_norms = np.sum(K.astype(float) ** 2, axis=1)
    assert np.all(np.abs(np.diag(scores)) <= 1e-6 * sq_norms)
    assert np.all(scores <= 0.0)
    assert np.all(scores[~np.eye(4, dtype=bool)] < -1.0)


def test_scores_do_not_overflow_on_huge_finite_embeddings() -> None:
    K = np.full((2, 4), 3e20, dtype=np.float32)  # q·k overflows float32, not float64
    scores = prepared_scores(K, K, Similarity.DOT)
    assert np.all(np.isfinite(scores))
    assert np.all(np.isfinite(softmax(scores, 1.0)))


def test_prepare_normalises_for_cosine_and_scales_scaled_dot_queries() -> None:
    X = np.array([[3.0, 4.0]])
    np.testing.assert_allclose(prepare_keys(X, Similarity.COSINE), [[0.6, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(prepare_queries(X, Similarity.COSINE), [[0.6, 0.8]], rtol=1e-6)
    np.testing.assert_array_equal(prepare_keys(X, Similarity.SCALED_DOT), X)
    np.testing.assert_allclose(prepare_queries(X, Similarity.SCALED_DOT), X / np.sqrt(2), rtol=1e-6)
    np.testing.assert_array_equal(prepare_queries(X, Similarity.DOT), X)


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
    assert bound == pytest.approx(formula)
    assert true_tail <= bound + 1e-12


def test_tail_mass_bound_ignores_padding_and_is_zero_when_nothing_is_left_out() -> None:
    padded = np.array([[0.9, 0.5, -np.inf, -np.inf]])
    assert tail_mass_bound(padded, 2, 0.1)[0] == 0.0
    # Three keys in the store, two found: one omitted key scoring at most 0.5.
    expected = math.exp(-4) / (1 + math.exp(-4) + math.exp(-4))
    assert tail_mass_bound(padded, 3, 0.1)[0] == pytest.approx(expected)
