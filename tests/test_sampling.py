"""Full attention estimated in a large store: the exact head plus a uniform sample of the rest
(softdict._sampling), checked against attention computed naively over every key."""

from __future__ import annotations

import numpy as np
import pytest
from _support import FakeEncoder, assert_close, close

from softdict import ConfigError, SoftDict
from softdict._attention import softmax
from softdict._config import EXACT_MAX_KEYS
from softdict._retrieval import RetrievalPolicy, select
from softdict._sampling import estimate_tail, value_stderr, z_of
from softdict._similarity import Metric
from softdict.index import Allow
from softdict.index.exact import ExactBackend

DIM = 16
N = EXACT_MAX_KEYS + 10_000  # above the exact path: the tail is sampled
T = 0.05


@pytest.fixture(autouse=True)
def _estimated(without_scan: None) -> None:
    """Every test here is of the estimate, on stores small enough to scan whole."""


def diffuse(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors with no cluster structure: attention at T = 0.05 spreads over thousands of
    keys, like real text at 10^5 keys (the README's benchmark)."""
    X = np.random.default_rng(seed).standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def store() -> tuple[ExactBackend, np.ndarray, np.ndarray]:
    X = diffuse(N)
    backend = ExactBackend(DIM, Metric.INNER_PRODUCT)
    backend.add(np.arange(N, dtype=np.int64), X)
    values = np.random.default_rng(1).standard_normal(N)
    return backend, X, values


def exact(X: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, float]:
    """The seed formula, naively: every key's weight, and the blended value."""
    weights = softmax((X @ query)[None, :], T)[0]
    return weights, float(weights @ values)


def policy(**options: object) -> RetrievalPolicy:
    return RetrievalPolicy(T, max_k=64, **options)  # type: ignore[arg-type]


def test_the_estimate_is_the_design_formula() -> None:
    rng = np.random.default_rng(0)
    head, sample = rng.normal(0.5, 0.1, 8), rng.normal(0.2, 0.1, 50)
    # 60 draws, 10 of them dropped (they fell in the head), each kept one with its probability.
    draws, probability = 60, rng.uniform(1e-4, 2e-3, 50)
    factors = 1 / (draws * probability)
    got = estimate_tail(head, sample, factors, draws, T)
    w_head, w_sample = np.exp(head / T), factors * np.exp(sample / T)
    total = w_head.sum() + w_sample.sum()
    assert_close(got.head_weights, w_head / total)
    assert_close(got.sample_weights, w_sample / total)
    assert got.tail_mass == close(w_sample.sum() / total)
    omega = np.concatenate([w_sample / total, np.zeros(draws - 50)])  # a dropped draw counts 0
    assert got.tail_stderr == close((1 - got.tail_mass) * np.sqrt(draws) * omega.std(ddof=1))
    whole = estimate_tail(head, sample, None, 0, T)
    assert whole.tail_stderr == 0.0
    assert_close(
        np.concatenate([whole.head_weights, whole.sample_weights]),
        softmax(np.concatenate([head, sample])[None, :], T)[0],
    )


def test_the_value_stderr_counts_dropped_draws_as_zero() -> None:
    rng = np.random.default_rng(1)
    weights, values, value = rng.uniform(0, 0.01, 40), rng.normal(size=(40, 3)), np.ones(3)
    spread = np.concatenate([weights[:, None] * (values - value), np.zeros((25, 3))])
    assert_close(value_stderr(weights, values, value, 65), np.sqrt(65) * spread.std(axis=0, ddof=1))
    assert np.all(value_stderr(weights[:1], values[:1], value, 1) == 0)


@pytest.mark.parametrize("scale", [1e160, 1e300, -1e307, 1e-300])
def test_the_value_stderr_of_huge_or_tiny_values_scales_with_them(scale: float) -> None:
    """Squared, values past about 1e154 overflowed: the error came out NaN (a probe: a store of
    values 1e200, whose CLI --json then printed NaN), with numpy's warnings."""
    rng = np.random.default_rng(2)
    weights, values, value = rng.uniform(0, 0.01, 40), rng.normal(size=(40, 3)), rng.normal(size=3)
    unscaled = value_stderr(weights, values, value, 65)
    with np.errstate(all="raise"):
        scaled = value_stderr(weights, values * scale, value * scale, 65)
    assert_close(scaled, unscaled * abs(scale))


def test_weights_are_finite_and_sum_to_one_and_the_sample_is_drawn(store) -> None:  # type: ignore[no-untyped-def]
    backend, _X, _ = store
    queries = diffuse(20, seed=7)
    chosen = select(backend, queries, policy(), None, N)
    assert chosen.sampled is not None and chosen.n_sampled is not None
    assert np.all(np.isfinite(chosen.weights)) and np.all(chosen.weights >= 0)
    assert_close(chosen.weights.sum(axis=1), 1.0)
    assert np.all(chosen.n_sampled >= 400) and np.all(chosen.n_sampled <= 4096)
    for i in range(20):
        sampled_ids = chosen.ids[i, chosen.sampled[i]]
        head_ids = chosen.ids[i, : chosen.k[i]]
        assert not np.isin(sampled_ids, head_ids).any()  # the sample is of the rest only
        # The head's weights and the estimated tail split the whole mass.
        assert chosen.weights[i, chosen.sampled[i]].sum() == close(chosen.tail_mass[i])


def test_the_estimate_is_unbiased_over_seeds(store) -> None:  # type: ignore[no-untyped-def]
    """The mean of the estimates over 200 seeds is within 3 of its standard errors of the
    exact tail mass and value (the ratio estimator's O(1/m) bias is far below that)."""
    backend, X, values = store
    query = diffuse(1, seed=11)
    weights, value = exact(X, values, query[0])
    tails, blended = [], []
    for seed in range(200):
        chosen = select(backend, query, policy(seed=seed, max_sample=512), None, N)
        head = chosen.ids[0, : chosen.k[0]]
        tails.append((chosen.tail_mass[0], 1 - weights[head].sum()))
        found = chosen.ids[0] >= 0
        blended.append(chosen.weights[0, found] @ values[chosen.ids[0, found]])
    estimates, truths = np.array(tails).T
    assert np.ptp(truths) < 1e-9  # the head is the same exact top keys for every seed
    error = estimates.mean() - truths[0]
    assert abs(error) < 3 * estimates.std(ddof=1) / np.sqrt(200)
    assert abs(np.mean(blended) - value) < 3 * np.std(blended, ddof=1) / np.sqrt(200)
    assert np.std(blended) > 0  # the seeds did draw different samples


def test_intervals_cover_at_the_nominal_rate(store) -> None:  # type: ignore[no-untyped-def]
    """On 300 queries of a seeded diffuse store the 95% intervals of the tail mass and of the
    value cover the exact ones for 90-99% of queries (300 draws of a 95% event: 0.925-0.975
    about 95% of the time)."""
    _backend, X, values = store
    sd = SoftDict(encoder=FakeEncoder(), index="flat", temperature=T, max_k=64)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, values)
    queries = diffuse(300, seed=3)
    tail_hits, value_hits = [], []
    for attention, query in zip(sd.attend_embeddings(queries), queries):
        weights, value = exact(X, values, query)
        head = [int(key[1:]) for key in attention.keys]
        true_tail = 1 - weights[head].sum()
        assert attention.tail_interval is not None and attention.value_stderr is not None
        low, high = attention.tail_interval
        tail_hits.append(low <= true_tail <= high)
        value_hits.append(abs(attention.value - value) <= z_of(0.95) * attention.value_stderr)
        assert attention.tail_bound is not None  # flat: exact neighbours, the bound holds
        assert true_tail <= attention.tail_bound + 1e-9
    assert 0.90 <= np.mean(tail_hits) <= 0.99
    assert 0.90 <= np.mean(value_hits) <= 0.99


def test_a_smaller_tolerance_draws_more_keys_and_errs_less(store) -> None:  # type: ignore[no-untyped-def]
    backend, X, values = store
    queries = diffuse(40, seed=5)
    errors = {}
    for tolerance in (0.05, 0.002):
        chosen = select(backend, queries, policy(tolerance=tolerance, max_sample=16384), None, N)
        assert chosen.n_sampled is not None
        errors[tolerance] = (chosen.n_sampled.mean(), [])
        for i, query in enumerate(queries):
            weights, _ = exact(X, values, query)
            head = chosen.ids[i, : chosen.k[i]]
            errors[tolerance][1].append(abs(chosen.tail_mass[i] - (1 - weights[head].sum())))
    assert errors[0.002][0] > 2 * errors[0.05][0]  # more keys sampled for a tighter interval
    assert np.mean(errors[0.002][1]) < np.mean(errors[0.05][1])


def test_masks_and_deletes_apply_to_the_sample(store) -> None:  # type: ignore[no-untyped-def]
    backend, X, _ = store
    queries = diffuse(5, seed=9)
    allowed = np.arange(N)[np.arange(N) % 3 > 0]  # 13,334 keys: the tail is sampled
    allow = Allow.of(allowed)
    chosen = select(backend, queries, policy(max_sample=1000), allow, len(allow))
    found = chosen.ids[chosen.ids >= 0]
    assert np.isin(found, allow.ids).all()
    assert chosen.n_sampled is not None and np.all(chosen.n_sampled <= 1000)
    smaller = ExactBackend(DIM, Metric.INNER_PRODUCT)
    smaller.add(np.arange(N, dtype=np.int64), X)
    deleted = np.arange(1, N, 2)
    smaller.remove(deleted)
    chosen = select(smaller, queries, policy(), None, len(smaller))
    assert not np.isin(chosen.ids, deleted).any()


def test_a_lookup_is_reproducible_alone_or_in_a_batch(store) -> None:  # type: ignore[no-untyped-def]
    backend, _, _ = store
    queries = diffuse(6, seed=13)
    batch = select(backend, queries, policy(), None, N)
    again = select(backend, queries[::-1], policy(), None, N)
    for i in range(6):
        alone = select(backend, queries[i : i + 1], policy(), None, N)
        for other, row in ((alone, 0), (again, 5 - i)):
            np.testing.assert_array_equal(
                other.ids[row][other.ids[row] >= 0], batch.ids[i][batch.ids[i] >= 0]
            )
            # The same keys; float32 products in batches of other sizes differ in the last bits.
            assert other.tail_mass[row] == close(batch.tail_mass[i])
    reseeded = select(backend, queries, policy(seed=1), None, N)
    assert not np.allclose(reseeded.tail_mass, batch.tail_mass)


def test_an_approximate_index_whose_rest_fits_the_sample_is_exact() -> None:
    """3,000 keys on IVF: the keys outside the head fit in max_sample, so they are scored whole
    and the lookup is exact attention (though the index is approximate)."""
    X = diffuse(3000, seed=2)
    values = np.random.default_rng(4).standard_normal(3000)
    sd = SoftDict(encoder=FakeEncoder(), index="ivf", temperature=T)
    sd.add_embeddings([f"k{i}" for i in range(3000)], X, values)
    queries = diffuse(5, seed=6)
    expected = [exact(X, values, q)[1] for q in queries]
    # float32 scores from two different products: equal to about 1e-7.
    assert_close(sd.lookup_embeddings(queries), expected, atol=1e-6)
    attention = sd.attend_embeddings(queries[0])
    assert attention.tail_bound is None and attention.value_stderr == 0.0
    assert attention.k + attention.sampled == 3000


def test_head_only_and_options_are_validated() -> None:
    X = diffuse(N)
    sd = SoftDict(encoder=FakeEncoder(), index="flat", temperature=T, max_sample=0)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, np.zeros(N))
    attention = sd.attend_embeddings(X[0])
    assert attention.sampled == 0 and attention.tail_mass is None
    assert attention.weights.sum() == close(1.0)
    for bad in ({"tolerance": 0}, {"confidence": 1.0}, {"max_sample": -1}, {"seed": -2}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            SoftDict(encoder=FakeEncoder(), **bad)  # type: ignore[arg-type]


def test_a_tiny_tolerance_draws_the_most_keys_allowed(store) -> None:  # type: ignore[no-untyped-def]
    """tolerance=1e-300 passes validation; the size it asks for overflowed a float in
    ``sample_size_for`` and the lookup raised a raw OverflowError."""
    backend, _X, _ = store
    queries = diffuse(3, seed=11)
    chosen = select(backend, queries, policy(tolerance=1e-300, max_sample=2048), None, N)
    assert chosen.n_draws is not None and np.all(chosen.n_draws == 2048)
    assert np.all(np.isfinite(chosen.weights))


@pytest.mark.parametrize("max_sample", [1, 2, 5, 100])
def test_no_more_keys_are_drawn_than_max_sample_asks_but_two(store, max_sample: int) -> None:  # type: ignore[no-untyped-def]
    """The first draw was 512 keys whatever ``max_sample`` said (the option's comment: at most
    max_sample). One draw has no spread, so a sample is 2 draws at least."""
    backend, _X, _ = store
    chosen = select(backend, diffuse(3, seed=12), policy(max_sample=max_sample), None, N)
    assert chosen.n_draws is not None and np.all(chosen.n_draws == max(max_sample, 2))
    assert np.all(np.isfinite(chosen.weights)) and np.all(np.isfinite(chosen.tail_stderr))


class _PluginOfEarlierVersion(ExactBackend):
    """A plug-in written before ``sample_near`` took the head's ids: its own uniform draws,
    with the signature it had then (``IndexBackend.sample_near``'s first five arguments)."""

    def sample_near(self, query, count, rng, allow, temperature):  # type: ignore[no-untyped-def,override]
        ids = self.sample(count, rng, allow)
        return ids, np.full(len(ids), 1.0 / len(self))


def test_a_plug_in_whose_sample_near_takes_no_head_still_estimates(store) -> None:  # type: ignore[no-untyped-def]
    """The head's ids go only to a backend whose capabilities say it takes them: a plug-in's
    override with the earlier signature raised TypeError on every estimated lookup."""
    backend, X, _ = store
    plug_in = _PluginOfEarlierVersion(DIM, Metric.INNER_PRODUCT)
    plug_in.add(np.arange(N, dtype=np.int64), X)
    query = diffuse(1, seed=41)
    chosen = select(plug_in, query, policy(), None, N)
    assert chosen.n_sampled[0] > 0
    same = select(backend, query, policy(), None, N)
    np.testing.assert_array_equal(chosen.ids, same.ids)  # the same uniform draws
