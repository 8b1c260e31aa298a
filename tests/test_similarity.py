"""Similarities: each one's scores against its naive definition, preparation of keys and
queries, and the metric scores an index backend computes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _support import assert_close, close

from softdict._similarity import Metric, Similarity, metric_scores


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
    np.testing.assert_allclose(kind.scores(Q, K), expected, rtol=1e-5, atol=1e-5)


def test_cosine_of_a_zero_vector_is_zero_not_nan() -> None:
    scores = Similarity.COSINE.scores(np.zeros((1, 4)), np.eye(4))
    np.testing.assert_array_equal(scores, 0.0)


def test_l2_distance_to_itself_is_zero_up_to_float32_rounding_and_never_positive() -> None:
    K = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32) * 1e3
    scores = Similarity.L2.scores(K, K)
    sq_norms = np.sum(K.astype(float) ** 2, axis=1)
    assert np.all(np.abs(np.diag(scores)) <= 1e-6 * sq_norms)
    assert np.all(scores <= 0.0)
    assert np.all(scores[~np.eye(4, dtype=bool)] < -1.0)


def test_scores_do_not_overflow_on_huge_finite_embeddings() -> None:
    K = np.full((2, 4), 3e20, dtype=np.float32)  # q·k overflows float32, not float64
    scores = metric_scores(K, K, Metric.INNER_PRODUCT)
    assert np.all(np.isfinite(scores))


def test_cosine_normalises_a_row_of_subnormal_numbers_too() -> None:
    """A row whose norm is below float32's smallest normal number (1e-40 times a unit vector)
    was divided by that number, not its norm: a query of it scored every key near 0."""
    row = np.array([[3.0, 4.0, 0.0]], dtype=np.float32)
    for scale in (1.0, 1e-38, 1e-40):
        prepared = Similarity.COSINE.prepare_queries(row * np.float32(scale))
        assert_close(prepared, [[0.6, 0.8, 0.0]], rtol=1e-3)  # subnormals hold fewer bits
    assert np.all(Similarity.COSINE.prepare_queries(np.zeros((1, 3), np.float32)) == 0)


def test_prepare_normalises_for_cosine_and_scales_scaled_dot_queries() -> None:
    X = np.array([[3.0, 4.0]])
    assert_close(Similarity.COSINE.prepare_keys(X), [[0.6, 0.8]])
    assert_close(Similarity.COSINE.prepare_queries(X), [[0.6, 0.8]])
    np.testing.assert_array_equal(Similarity.SCALED_DOT.prepare_keys(X), X)
    assert_close(Similarity.SCALED_DOT.prepare_queries(X), X / np.sqrt(2))
    np.testing.assert_array_equal(Similarity.DOT.prepare_queries(X), X)


def test_a_key_is_prepared_alike_in_any_batch() -> None:
    # Large inserts are normalised in blocks of rows: a key's stored vector must not depend on
    # the batch it came in (a store compares, saves and reloads them bit for bit).
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2500, 7)).astype(np.float32) * 1e3
    X[1024] = 0.0  # a zero row, at a block's start, stays zero
    whole = Similarity.COSINE.prepare_keys(X)
    one_by_one = np.concatenate([Similarity.COSINE.prepare_keys(row[None]) for row in X])
    np.testing.assert_array_equal(whole, one_by_one)
    assert whole.dtype == np.float32 and whole.flags.c_contiguous
    assert not whole[1024].any()
    assert_close(np.linalg.norm(np.delete(whole, 1024, axis=0), axis=1), np.ones(2499))


@pytest.mark.parametrize("kind", list(Similarity))
def test_metric_scores_of_prepared_vectors_are_the_similarity(kind: Similarity) -> None:
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((3, 5)).astype(np.float32)
    K = rng.standard_normal((4, 5)).astype(np.float32)
    prepared = metric_scores(kind.prepare_queries(Q), kind.prepare_keys(K), kind.metric)
    assert_close(prepared, kind.scores(Q, K))
    assert kind.metric is (Metric.L2 if kind is Similarity.L2 else Metric.INNER_PRODUCT)


def test_default_temperatures_give_cosine_weights_on_unit_vectors() -> None:
    assert Similarity.COSINE.default_temperature(384) == 0.05
    assert Similarity.SCALED_DOT.default_temperature(384) == close(0.05 / math.sqrt(384))
    assert Similarity.L2.default_temperature(384) == close(0.1)


@pytest.mark.parametrize("similarity", ["dot", "scaled_dot", "l2", "cosine"])
@pytest.mark.parametrize("index", ["auto", "ivf", "compressed"])
def test_embeddings_whose_scores_would_overflow_float32_are_refused(
    similarity: str, index: str
) -> None:
    """Finite embeddings of norm 4e19 passed every check, and their float32 scores overflowed
    (a probe, 11,000 keys): under "ivf" a raw ValueError from the sampled tail's arithmetic,
    under "compressed" NaN weights, under "l2" every key equally far and uniform attention
    without a word. Under cosine the norm is divided out: they are taken, and answer."""
    from _support import FakeEncoder

    from softdict import InvalidValueError, SoftDict
    from softdict._arguments import MAX_SCORED_NORM

    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 16)).astype(np.float32)
    sd = SoftDict(encoder=FakeEncoder(), similarity=similarity, index=index)
    sd.add_embeddings([f"k{i}" for i in range(64)], X, np.arange(64.0))
    huge = X[:1] * np.float32(4 * MAX_SCORED_NORM / np.linalg.norm(X[0]))  # norm 4e18
    if similarity == "cosine":
        assert sd.attend_embeddings(huge)[0].keys[0] == "k0"
        sd.add_embeddings(["huge"], huge, [0.5])
        return
    with pytest.raises(InvalidValueError, match=r"norm past 1e\+18 \(row 1: 4e\+18\)"):
        sd.add_embeddings(["a", "b"], np.vstack([X[1], huge]), [1.0, 2.0])
    assert len(sd) == 64 and "a" not in sd  # nothing of the batch was kept
    with pytest.raises(InvalidValueError, match="norm past"):
        sd.lookup_embeddings(huge)
    sd.query_projection = np.eye(16) * 1e18  # finite queries, carried past the range
    with pytest.raises(InvalidValueError, match="projected by W_q have a norm past"):
        sd.lookup_embeddings(X[:1])
    sd.query_projection = None
    within = sd.attend_embeddings(X[:1] * np.float32(1e17))[0]  # within the range: answered
    assert np.isfinite(within.value) and within.weights.sum() == close(1.0)
