"""index="projected" (softdict.index.projected): exact until it holds ``proxy_from`` keys, then
searches by proxy scores rescored exactly, and a sampled tail drawn by them whose reported
probabilities are the ones draws happen with; the estimate stays unbiased and errs less than a
uniform sample; masks, deletes, compaction, growth and a save keep the proxy in step."""

from __future__ import annotations

import numpy as np
import pytest
from _support import (
    FakeEncoder,
    assert_close,
    assert_frequencies_match,
    close,
    drawn_per_key,
    reloaded_answers_alike,
    tail_mass_estimates,
)

from softdict import SoftDict, StoreFormatError
from softdict._files import FileReader
from softdict._similarity import Metric
from softdict.index import Allow, register_backend
from softdict.index._projection import BlockProposal
from softdict.index.projected import MIX, ProjectedBackend

DIM = 16
DIMS = 8
T = 0.05
N = 6_000
PROXY_FROM = 2_000
register_backend(
    "test-projected",
    lambda dim, metric: ProjectedBackend(dim, metric, dims=DIMS, proxy_from=PROXY_FROM),
)


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors around 60 random directions: near keys gather in a few places, and most of
    the spread lies along a few directions (component j's scale 0.8^j), as in text embeddings.
    (With the same spread along all 16, 8 directions found 68% of the true 32 best keys.)"""
    rng = np.random.default_rng(seed)
    spread = 0.8 ** np.arange(DIM)
    centres = rng.standard_normal((60, DIM)) * spread
    X = centres[rng.integers(0, 60, n)] + 0.6 * spread * rng.standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def projected(X: np.ndarray, metric: Metric = Metric.INNER_PRODUCT) -> ProjectedBackend:
    backend = ProjectedBackend(DIM, metric, dims=DIMS, proxy_from=PROXY_FROM)
    backend.add(np.arange(len(X), dtype=np.int64), X)
    return backend


@pytest.fixture(scope="module")
def backend() -> ProjectedBackend:
    return projected(clustered(N))


def reader(files: dict[str, object]) -> FileReader:
    from pathlib import Path

    return FileReader(Path("store"), files)  # type: ignore[arg-type]


def test_it_is_exact_until_the_proxy_is_due_and_then_reads_it() -> None:
    X = clustered(PROXY_FROM)
    small = projected(X[:-1])
    assert small.capabilities.exact and not small._projection.trained
    _, probability = small.sample_near(X[0], 50, np.random.default_rng(0), None, T)
    assert_close(probability, 1 / (PROXY_FROM - 1))  # uniform, as any exact backend
    small.add(np.array([PROXY_FROM - 1]), X[-1:])
    capabilities = small.capabilities
    assert not capabilities.exact and capabilities.scan_max_keys == PROXY_FROM
    assert small._projection.trained_for == PROXY_FROM
    assert "8-dim 4-bit proxy" in small.describe()


@pytest.mark.parametrize("metric", [Metric.INNER_PRODUCT, Metric.L2])
def test_a_search_finds_the_true_best_keys_and_scores_them_exactly(metric: Metric) -> None:
    """The proxy only chooses the candidates: the scores returned are the exact ones, best
    first, and on clustered keys the true 32 best are (almost all) among them."""
    X = clustered(N)
    backend = projected(X, metric)
    flat = ProjectedBackend(DIM, metric, proxy_from=10**9)
    flat.add(np.arange(N, dtype=np.int64), X)
    queries = clustered(20, seed=3)
    scores, ids = backend.search(queries, 32)
    _, true_ids = flat.search(queries, 32)
    recall = np.mean([len(np.intersect1d(a, b)) / 32 for a, b in zip(ids, true_ids)])
    assert recall >= 0.95
    for i in range(len(queries)):
        assert_close(scores[i], flat.score_ids(queries[i : i + 1], ids[i])[0])
        assert np.all(np.diff(scores[i]) <= 0)


def test_a_small_mask_is_searched_exactly_without_the_proxy() -> None:
    """Where the candidates would be every allowed key, they are scored from their vectors:
    the answer is the exact one, and no pass over the proxy scores is made."""
    X = clustered(N)
    backend = projected(X)
    backend._projection.scores = None  # type: ignore[assignment,method-assign]  # unread
    allow = Allow.of(np.arange(0, N, 40))  # 150 keys, fewer than candidates_for(16)
    queries = clustered(3, seed=17)
    scores, ids = backend.search(queries, 16, allow)
    exact = X[allow.ids] @ queries.T
    for i in range(3):
        order = np.argsort(-exact[:, i], kind="stable")[:16]
        np.testing.assert_array_equal(ids[i], allow.ids[order])
        assert_close(scores[i], exact[order, i])


def test_a_batch_searches_as_its_queries_do_alone(backend: ProjectedBackend) -> None:
    queries = clustered(5, seed=9)
    scores, ids = backend.search(queries, 40)
    for i in range(5):
        alone_scores, alone_ids = backend.search(queries[i : i + 1], 40)
        np.testing.assert_array_equal(alone_ids[0], ids[i])
        assert_close(alone_scores[0], scores[i])


def test_a_batch_search_and_its_draws_read_the_proxy_scores_once() -> None:
    """A batch's search keeps each query's proxy scores for its draws, which then draw as a
    fresh backend (no scores kept) would, to float32's rounding (the kernel scores a batch and
    one query with different SIMD paths on some CPUs); a change to the rows forgets them."""
    X = clustered(N)
    backend, fresh = projected(X), projected(X)
    passes = []
    scores = backend._projection.scores
    backend._projection.scores = lambda q: passes.append(len(q)) or scores(q)  # type: ignore[method-assign]
    queries = clustered(4, seed=15)
    _, head = backend.search(queries, 32)
    for i, query in enumerate(queries):
        drawn = backend.sample_near(query, 100, np.random.default_rng(i), None, T, head[i])
        again = fresh.sample_near(query, 100, np.random.default_rng(i), None, T, head[i])
        np.testing.assert_array_equal(drawn[0], again[0])
        assert_close(drawn[1], again[1])
    assert passes == [4]
    backend.add(np.array([N]), clustered(1, seed=16))
    backend.sample_near(queries[0], 100, np.random.default_rng(0), None, T)
    assert passes == [4, 1]


def test_the_reported_probabilities_are_the_ones_draws_happen_with(
    backend: ProjectedBackend,
) -> None:
    """Over 10^6 draws: each key always reports the same probability, the probabilities of all
    keys sum to 1 (every key got drawn), the head's keys have only the uniform share, and each
    key's frequency matches its probability (a chi-square test)."""
    query = clustered(1, seed=7)[0]
    _, head = backend.search(query[None, :], 64)
    ids, probability = backend.sample_near(
        query, 1_000_000, np.random.default_rng(1), None, T, head[0]
    )
    keys, per_key, counts = drawn_per_key(ids, probability)
    assert len(keys) == N
    assert per_key.sum() == close(1.0)
    assert_close(per_key[np.isin(keys, head[0])], MIX / N)
    assert per_key.max() > 20 * per_key.min()  # near keys are drawn more often than far ones
    assert_frequencies_match(counts, per_key, 1_000_000)


def test_the_estimate_is_unbiased_and_errs_less_than_a_uniform_sample(
    backend: ProjectedBackend,
) -> None:
    """Over 200 seeds the mean estimated tail mass is within 3 standard errors of the exact one,
    and its spread is a fraction of the spread with the same number of keys drawn uniformly."""
    X = clustered(N)
    uniform = projected(X)

    def drawn_uniformly(query, count, rng, allow, temperature, head=None):  # type: ignore[no-untyped-def]
        return uniform.sample(count, rng, allow), np.full(count, 1 / N), None

    uniform.sample_scored = drawn_uniformly  # type: ignore[method-assign]
    query = clustered(1, seed=11)
    estimates, truth = tail_mass_estimates({"near": backend, "uniform": uniform}, X, query, T)
    near = estimates["near"]
    assert abs(near.mean() - truth) < 3 * near.std(ddof=1) / np.sqrt(200)
    assert near.std() < 0.5 * estimates["uniform"].std()


def test_scored_draws_are_sample_near_draws_with_their_exact_scores(
    backend: ProjectedBackend,
) -> None:
    query = clustered(1, seed=13)[0]
    _, head = backend.search(query[None, :], 32)
    drawn, probability = backend.sample_near(query, 300, np.random.default_rng(6), None, T, head[0])
    ids, scored_probability, scores = backend.sample_scored(
        query, 300, np.random.default_rng(6), None, T, head[0]
    )
    np.testing.assert_array_equal(ids, drawn)
    np.testing.assert_array_equal(scored_probability, probability)
    assert scores is not None
    assert_close(scores, backend.score_ids(query[None, :], ids)[0])


def test_masks_and_deletes_are_never_drawn_and_compaction_recodes() -> None:
    X = clustered(N)
    backend = projected(X)
    query = clustered(1, seed=3)[0]
    allow = Allow.of(np.arange(0, N, 2))
    ids, probability = backend.sample_near(query, 200_000, np.random.default_rng(0), allow, T)
    keys, first = np.unique(ids, return_index=True)
    np.testing.assert_array_equal(keys, allow.ids)
    assert probability[first].sum() == close(1.0)
    _, found = backend.search(query[None, :], 50, allow)
    assert np.isin(found, allow.ids).all()
    backend.remove(np.arange(0, N, 3))
    ids, probability = backend.sample_near(query, 500_000, np.random.default_rng(2), None, T)
    keys, first = np.unique(ids, return_index=True)
    assert len(keys) == len(backend) and not np.isin(keys, np.arange(0, N, 3)).any()
    assert probability[first].sum() == close(1.0)
    backend.remove(np.arange(1, N, 3))  # enough deletes to compact: every row coded again
    assert backend._rows.size == len(backend) == N // 3
    fresh = projected(X)
    fresh.remove(np.concatenate([np.arange(0, N, 3), np.arange(1, N, 3)]))
    _, found = backend.search(query[None, :], 50)
    np.testing.assert_array_equal(found, fresh.search(query[None, :], 50)[1])
    keys = np.unique(backend.sample_near(query, 100_000, np.random.default_rng(4), None, T)[0])
    np.testing.assert_array_equal(keys, np.arange(2, N, 3))


def test_rows_added_after_the_session_are_scored_until_it_is_made_again() -> None:
    """Rows added one by one wait outside the kernel's session, scored from their float32
    projections: a search finds them at once, and the session takes them in later."""
    X = clustered(N + 10)
    backend = projected(X[:N])
    sealed = backend._projection._codes.sealed
    for i in range(N, N + 10):
        backend.add(np.array([i]), X[i : i + 1])
    assert backend._projection._codes.sealed == sealed
    _, found = backend.search(X[N + 5 : N + 6], 1)
    assert found[0, 0] == N + 5
    proxy = backend._projection.scores(X[N + 5 : N + 6])
    assert proxy.shape == (1, N + 10)


def test_the_proxy_is_retrained_at_fourfold_growth_and_dropped_below_half() -> None:
    X = clustered(4 * PROXY_FROM, seed=5)
    backend = projected(X[:PROXY_FROM])
    backend.add(np.arange(PROXY_FROM, 4 * PROXY_FROM - 1), X[PROXY_FROM:-1])
    assert backend._projection.trained_for == PROXY_FROM
    backend.add(np.array([4 * PROXY_FROM - 1]), X[-1:])
    assert backend._projection.trained_for == 4 * PROXY_FROM
    backend.remove(np.arange(4 * PROXY_FROM - PROXY_FROM // 2))
    assert len(backend) == PROXY_FROM // 2 and not backend.capabilities.exact
    backend.remove(np.array([4 * PROXY_FROM - 1]))
    assert backend.capabilities.exact and not backend._projection.trained


@pytest.mark.parametrize("temperature", [1e-50, 1e-320, 1e6])
@pytest.mark.filterwarnings("error")
def test_any_temperature_gives_a_proposal(backend: ProjectedBackend, temperature: float) -> None:
    query = clustered(1, seed=5)[0]
    _, head = backend.search(query[None, :], 16)
    ids, probability = backend.sample_near(
        query, 500, np.random.default_rng(0), None, temperature, head[0]
    )
    assert np.all(np.isfinite(probability)) and np.all(probability > 0)
    assert len(ids) == 500


def test_a_head_of_every_allowed_key_leaves_uniform_draws(backend: ProjectedBackend) -> None:
    allow = Allow.of(np.arange(10))
    ids, probability = backend.sample_near(
        clustered(1)[0], 100, np.random.default_rng(0), allow, T, allow.ids
    )
    assert np.isin(ids, allow.ids).all()
    assert_close(probability, 0.1)


def test_draws_never_land_on_a_weight_of_zero() -> None:
    """The two-level draw: zeros at blocks' edges, whole zero blocks and a padded last block."""
    rng = np.random.default_rng(0)
    buffer = BlockProposal.padded(1_000)
    weights = buffer[:1_000]
    weights[:] = rng.random(1_000)
    weights[::64] = 0
    weights[63::64] = 0
    weights[128:192] = 0
    weights[-5:] = 0
    weights[500] = 1e-30
    proposal = BlockProposal(buffer)
    total = proposal.total
    assert total == close(float(weights.sum(dtype=np.float64)))
    drawn = proposal.draw(200_000, np.random.default_rng(1))
    assert np.all(weights[drawn] > 0)
    counts = np.bincount(drawn, minlength=1_000)
    positive = weights > 0
    assert_frequencies_match(counts[positive], weights[positive] / total, 200_000)


class _Targets:
    """A generator whose ``random`` gives chosen numbers: where a draw lands is then known."""

    def __init__(self, values: list[float]) -> None:
        self.values = np.array(values)

    def random(self, count: int) -> np.ndarray:
        return self.values[:count]


def test_a_weight_far_below_the_sum_before_it_in_its_block_is_drawn_where_it_lies() -> None:
    """Within a block the running sums are float64: a weight of 1e-8 after a weight of 1 (half
    a float32 step of 1 is 6e-8) was never drawn in float32, though its probability was
    reported, and its share fell to the block's last position."""
    buffer = BlockProposal.padded(64)
    buffer[0], buffer[1:] = 1.0, 1e-8
    proposal = BlockProposal(buffer)
    # Points halfway through positions 0, 1, 2 and 63 of the block's float64 running sum, as
    # shares of it (the draw scales a share of the block's float32 sum to that running sum).
    running = np.cumsum(buffer.astype(np.float64))
    halfway = running - buffer / 2
    shares = halfway[[0, 1, 2, 63]] / running[-1]
    drawn = proposal.draw(4, _Targets(list(shares)))  # type: ignore[arg-type]
    np.testing.assert_array_equal(drawn, [0, 1, 2, 63])


def test_a_tiny_temperature_draws_near_the_best_key_outside_the_head(
    backend: ProjectedBackend,
) -> None:
    """The proposal is shifted by the best key outside the head: shifted by the head's best, at
    T = 1e-6 every other key's weight underflowed and the draws were uniform."""
    query = clustered(1, seed=19)[0]
    _, head = backend.search(query[None, :], 16)
    _, probability = backend.sample_near(query, 200, np.random.default_rng(0), None, 1e-6, head[0])
    assert probability.max() > 0.5  # the best key outside the head takes most of 1 − MIX


def test_keys_tied_in_score_come_back_by_id() -> None:
    X = clustered(N)
    X[1000:1020] = X[7]  # twenty keys with the same vector
    backend = projected(X)
    _, ids = backend.search(X[7:8], 10)
    np.testing.assert_array_equal(ids[0], [7, *range(1000, 1009)])


def test_a_saved_store_answers_the_same_after_loading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through SoftDict.save/load (manifest, checksums): the basis comes back and every row is
    coded again under it, so an estimated lookup draws the same sample; a basis that is not
    orthonormal and a manifest entry of another shape are refused, naming what is wrong."""
    X = clustered(N)
    sd = SoftDict(
        encoder=FakeEncoder(), index="test-projected", temperature=T, max_k=32, max_sample=512
    )
    sd.add_embeddings([f"k{i}" for i in range(N)], X, np.arange(N, dtype=float))
    loaded = reloaded_answers_alike(sd, tmp_path / "store", clustered(4, seed=12))
    backend = loaded._store.backend  # type: ignore[attr-defined]
    dump = backend.dump()
    basis = np.array(dump.files["embedding_basis.npy"])
    kept_one = basis.copy()
    kept_one[:, 1:] = 0
    for bad in (2 * basis, np.zeros_like(basis), kept_one):
        with pytest.raises(StoreFormatError, match=r"embedding_basis\.npy"):
            ProjectedBackend(DIM, Metric.INNER_PRODUCT, dims=DIMS, proxy_from=PROXY_FROM).restore(
                dump.meta, reader({**dump.files, "embedding_basis.npy": bad})
            )
    for entry in (
        {"dims": 3, "trained_for": N},
        {"dims": float(DIMS), "trained_for": N},
        {"dims": DIMS, "trained_for": True},
        "x",
    ):
        with pytest.raises(StoreFormatError, match="projection"):
            ProjectedBackend(DIM, Metric.INNER_PRODUCT, dims=DIMS, proxy_from=PROXY_FROM).restore(
                {**dump.meta, "projection": entry}, reader(dict(dump.files))
            )


def test_an_estimated_lookup_is_close_to_exact_attention() -> None:
    """Through the store: the estimate over the proxy's head and sample is near the naive
    softmax(QKᵀ/T)V over every key, within a few of its own standard errors."""
    X = clustered(N)
    values = np.arange(N, dtype=float) % 7
    sd = SoftDict(encoder=FakeEncoder(), index="test-projected", temperature=T, max_k=64)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, values)
    for query in clustered(5, seed=21):
        attention = sd.attend_embeddings(query)
        logits = X.astype(np.float64) @ query / T
        weights = np.exp(logits - logits.max())
        exact = float(weights @ values / weights.sum())
        assert attention.sampled > 0
        assert abs(attention.value - exact) < max(5 * float(attention.value_stderr), 0.05)


def test_a_lookups_batch_comes_in_chunks_whose_draws_find_their_proxy_scores_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backend keeps a few queries' proxy scores (``_BATCH_SCORE_BYTES``): a lookup of more
    queries than that reaches it in chunks of as many (``Capabilities.batch_queries``), so a
    query's draws read the pass its search made, and each answer is its query's alone. Within a
    tenth of its standard error, not exactly: the kernel scores a batch and one query with
    different SIMD paths on some CPUs, and a proxy score's last bit can move a draw, which moves
    the estimate by about one draw's share of it (1e-4 here under generic kernels; the
    answers of two of these queries differ by 5e-3)."""
    import softdict.index.projected as projected_module

    X = clustered(N)
    values = np.arange(N, dtype=float) % 7
    sd = SoftDict(encoder=FakeEncoder(), index="test-projected", temperature=T, max_k=64)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, values)
    monkeypatch.setattr(projected_module, "_BATCH_SCORE_BYTES", 4 * N * 3)  # 3 queries kept
    backend = sd._store.backend
    assert backend.capabilities.batch_queries == 3
    passes: list[int] = []
    scores = backend._projection.scores
    backend._projection.scores = lambda q: passes.append(len(q)) or scores(q)  # type: ignore[method-assign]
    queries = clustered(10, seed=23)
    together = sd.lookup_embeddings(queries)
    assert passes == [3, 3, 3, 1]  # no query scored again for its draws
    alone = [sd.attend_embeddings(query) for query in queries]  # one query a call
    for value, attention in zip(together, alone):
        assert abs(value - attention.value) <= 0.1 * attention.value_stderr
