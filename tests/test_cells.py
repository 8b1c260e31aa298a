"""The sampled tail drawn near the query (softdict.index._cells): every live key can be drawn, the
reported probabilities are the ones draws happen with, the estimate stays unbiased and errs less
than a uniform sample, and the cells survive deletes, compaction, growth and a save."""

from __future__ import annotations

import numpy as np
import pytest
from _support import (
    assert_close,
    assert_frequencies_match,
    close,
    drawn_per_key,
    reloaded_answers_alike,
    tail_mass_estimates,
)

from softdict import StoreFormatError
from softdict._files import FileReader
from softdict._similarity import Metric
from softdict.index._cells import MIN_CELL_KEYS, cell_count
from softdict.index.hnsw import HNSWBackend

DIM = 16
T = 0.05
N = 6_000


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors around 60 random directions: near keys gather in a few places, as in text."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((60, DIM))
    X = centres[rng.integers(0, 60, n)] + 0.6 * rng.standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def hnsw(X: np.ndarray, *, by_cell: bool = True) -> HNSWBackend:
    backend = HNSWBackend(DIM, Metric.INNER_PRODUCT)
    if not by_cell:
        backend._cells = None  # draws uniformly, as a backend without cells does
    backend.add(np.arange(len(X), dtype=np.int64), X)
    return backend


@pytest.fixture(scope="module")
def backend() -> HNSWBackend:
    return hnsw(clustered(N))


def test_cells_are_trained_once_there_are_enough_keys() -> None:
    X = clustered(MIN_CELL_KEYS)
    small = hnsw(X[: MIN_CELL_KEYS - 1])
    assert small._cells is not None and not small._cells.trained
    _, probability = small.sample_near(X[0], 50, np.random.default_rng(0), None, T)
    assert_close(probability, 1 / (MIN_CELL_KEYS - 1))  # uniform until then
    small.add(np.array([MIN_CELL_KEYS - 1]), X[-1:])
    assert small._cells.trained and small._cells.trained_for == MIN_CELL_KEYS
    assert small._cells.centroids is not None
    assert len(small._cells.centroids) == cell_count(MIN_CELL_KEYS)
    assert (small._cells.cells >= 0).all()


def test_the_reported_probabilities_are_the_ones_draws_happen_with(backend) -> None:  # type: ignore[no-untyped-def]
    """Over 10^6 draws: each key always reports the same probability, the probabilities of
    all keys sum to 1 (every key got drawn: none has probability 0), and each key's frequency
    matches its probability (a chi-square test)."""
    query = clustered(1, seed=7)[0]
    ids, probability = backend.sample_near(query, 1_000_000, np.random.default_rng(1), None, T)
    keys, per_key, counts = drawn_per_key(ids, probability)
    assert len(keys) == N
    assert per_key.sum() == close(1.0)
    assert per_key.max() > 5 * per_key.min()  # near keys are drawn more often than far ones
    assert_frequencies_match(counts, per_key, 1_000_000)


def test_the_estimate_is_unbiased_and_errs_less_than_a_uniform_sample(
    backend, without_scan
) -> None:  # type: ignore[no-untyped-def]
    """Over 200 seeds the mean estimated tail mass is within 3 standard errors of the exact one,
    and its spread is smaller than with the same number of keys drawn uniformly."""
    X = clustered(N)
    uniform = hnsw(X, by_cell=False)
    query = clustered(1, seed=11)
    estimates, truth = tail_mass_estimates({"near": backend, "uniform": uniform}, X, query, T)
    near = estimates["near"]
    assert abs(near.mean() - truth) < 3 * near.std(ddof=1) / np.sqrt(200)
    assert near.std() < 0.8 * estimates["uniform"].std()


def test_deleted_keys_are_never_drawn_and_the_rest_keep_their_share() -> None:
    X = clustered(N)
    backend = hnsw(X)
    deleted = np.arange(0, N, 3)
    backend.remove(deleted)
    query = clustered(1, seed=3)[0]
    ids, probability = backend.sample_near(query, 500_000, np.random.default_rng(2), None, T)
    assert not np.isin(ids, deleted).any()
    keys, first = np.unique(ids, return_index=True)
    assert len(keys) == len(backend)
    assert probability[first].sum() == close(1.0)
    # Enough deletes to compact: the cells follow the rows' new numbering.
    backend.remove(np.arange(1, N, 3))
    assert backend._rows.size == len(backend)  # compacted
    ids, probability = backend.sample_near(query, 500_000, np.random.default_rng(2), None, T)
    keys, first = np.unique(ids, return_index=True)
    np.testing.assert_array_equal(keys, np.arange(2, N, 3))
    assert probability[first].sum() == close(1.0)


def test_cells_are_retrained_when_the_store_has_grown_fourfold() -> None:
    X = clustered(4 * N, seed=5)
    backend = hnsw(X[:N])
    assert backend._cells is not None and backend._cells.trained_for == N
    backend.add(np.arange(N, 4 * N - 1, dtype=np.int64), X[N:-1])
    assert backend._cells.trained_for == N  # placed in the old cells meanwhile
    assert (backend._cells.cells >= 0).all()
    backend.add(np.array([4 * N - 1]), X[-1:])
    assert backend._cells.trained_for == 4 * N
    assert backend._cells.centroids is not None
    assert len(backend._cells.centroids) == cell_count(4 * N)


def test_a_masked_lookup_draws_uniformly_from_the_allowed_keys(backend) -> None:  # type: ignore[no-untyped-def]
    from softdict.index import Allow

    allow = Allow.of(np.arange(0, N, 2))
    query = clustered(1, seed=4)[0]
    ids, probability = backend.sample_near(query, 5_000, np.random.default_rng(0), allow, T)
    assert np.isin(ids, allow.ids).all()
    assert_close(probability, 1 / len(allow))


def reader(files: dict[str, object]) -> FileReader:
    from pathlib import Path

    return FileReader(Path("store"), files)  # type: ignore[arg-type]


def test_saved_cells_load_back_and_draw_the_same_sample(backend) -> None:  # type: ignore[no-untyped-def]
    dump = backend.dump()
    assert {"index_cells.npy", "index_centroids.npy"} <= set(dump.files)
    restored = HNSWBackend(DIM, Metric.INNER_PRODUCT)
    restored.restore(dump.meta, reader(dict(dump.files)))
    query = clustered(1, seed=8)[0]
    drawn = [
        b.sample_near(query, 300, np.random.default_rng(5), None, T) for b in (backend, restored)
    ]
    np.testing.assert_array_equal(drawn[0][0], drawn[1][0])
    np.testing.assert_array_equal(drawn[0][1], drawn[1][1])


def test_a_store_saved_without_cells_draws_uniformly_and_bad_cells_are_refused(backend) -> None:  # type: ignore[no-untyped-def]
    dump = backend.dump()
    legacy = {k: v for k, v in dump.files.items() if not k.startswith(("index_cells", "index_cen"))}
    restored = HNSWBackend(DIM, Metric.INNER_PRODUCT)
    restored.restore({"built_for": N}, reader(legacy))
    _, probability = restored.sample_near(clustered(1)[0], 20, np.random.default_rng(0), None, T)
    assert_close(probability, 1 / N)
    restored.remove(np.arange(0, N, 3))
    restored.remove(np.arange(1, N, 3))  # compacts: rows without cells are renumbered too
    ids, probability = restored.sample_near(clustered(1)[0], 200, np.random.default_rng(0), None, T)
    assert np.isin(ids, np.arange(2, N, 3)).all()
    assert_close(probability, 1 / len(restored))
    cells = np.array(dump.files["index_cells.npy"])
    cells[3] = 10_000
    with pytest.raises(StoreFormatError, match=r"index_cells\.npy"):
        HNSWBackend(DIM, Metric.INNER_PRODUCT).restore(
            dump.meta, reader({**dump.files, "index_cells.npy": cells})
        )
    with pytest.raises(StoreFormatError, match="cells_trained_for"):
        HNSWBackend(DIM, Metric.INNER_PRODUCT).restore(
            {**dump.meta, "cells_trained_for": "many"}, reader(dict(dump.files))
        )


@pytest.mark.usefixtures("without_scan")
def test_a_saved_store_answers_the_same_after_loading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through SoftDict.save/load (manifest, checksums): the cells come back, so an estimated
    lookup draws the same sample and returns the same value."""
    from _support import FakeEncoder

    from softdict import SoftDict

    X = clustered(N)
    sd = SoftDict(encoder=FakeEncoder(), index="hnsw", temperature=T, max_k=32, max_sample=512)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, np.arange(N, dtype=float))
    loaded = reloaded_answers_alike(sd, tmp_path / "store", clustered(4, seed=12))
    drawn = loaded._store.backend._cells  # type: ignore[attr-defined]
    assert drawn is not None and drawn.trained


@pytest.mark.filterwarnings("error")
@pytest.mark.usefixtures("without_scan")
@pytest.mark.parametrize("temperature", [1e-50, 1e-300, 1e-320])
def test_a_tiny_temperature_draws_by_a_proposal_and_answers_the_best_key(
    backend: HNSWBackend, temperature: float
) -> None:
    """Every temperature the options take (finite, > 0) works: the cells' gaps, divided by a
    tiny temperature in float32, were 0/0 (NaN) and an estimated lookup raised ValueError. The
    proposal stays a probability (the nearest cell takes what is not mixed in uniformly), and
    the lookup is the best key's value, with no warning."""
    from _support import FakeEncoder

    from softdict import SoftDict

    query = clustered(1, seed=5)[0]
    _, probability = backend.sample_near(query, 50, np.random.default_rng(0), None, temperature)
    assert np.all(np.isfinite(probability)) and np.all(probability > 0)
    X = clustered(N)
    sd = SoftDict(encoder=FakeEncoder(), index="hnsw", temperature=temperature, max_k=32)
    sd.add_embeddings([f"k{i}" for i in range(N)], X, np.arange(N, dtype=float))
    attention = sd.attend_embeddings(X[7])
    assert attention.sampled > 0
    assert attention.value == close(float(np.argmax(X @ X[7])))


@pytest.mark.filterwarnings("error")
def test_an_emptied_nearest_cell_leaves_a_proposal_at_any_temperature(
    backend: HNSWBackend,
) -> None:
    """The cells' logits were shifted by the nearest cell's score: with that cell emptied (its
    keys deleted) and a temperature so small that every other gap overflows, no logit was
    finite and the proposal was NaN. Shifted by the best cell holding a key, it is a
    probability that gives the emptied cell nothing."""
    cells = backend._cells
    assert cells is not None and cells.centroids is not None
    query = cells.centroids[0] / np.linalg.norm(cells.centroids[0])
    sizes = np.bincount(cells.cells, minlength=len(cells.centroids))
    sizes[np.argmax(cells.centroids @ query)] = 0  # the nearest cell, emptied
    for temperature in (T, 1e-300, 5e-324):
        cells._last_proposal = None
        probability, running = cells._proposal(query, temperature, sizes)
        assert np.all(np.isfinite(probability)) and probability.sum() == close(1.0)
        assert probability[sizes == 0].max() == 0.0
        assert running[-1] == close(1.0)
