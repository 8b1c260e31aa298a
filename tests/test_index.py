"""Index backends: one conformance suite over every backend, built-in, factory string and plug-in.

The suite talks to backends only through the ``IndexBackend`` protocol: add and remove under the
store's ids, search with and without an ``Allow`` filter, -1 padding, k larger than what is held,
ids that survive compaction and retraining, exact scoring where a backend claims it, and a
save/restore round trip through the files a store folder would hold.
"""

from __future__ import annotations

import numpy as np
import pytest
from _milvus import MILVUS_KINDS, milvus_location, register_milvus_backend
from _plugins import DictBackend
from _support import assert_close

from softdict._files import FileReader, encode_file
from softdict._similarity import Metric, metric_scores
from softdict.index import Allow, IndexBackend, backend_spec
from softdict.index.exact import ExactBackend

DIM = 16
N = 3000
BACKENDS = [
    "auto",
    "flat",
    "hnsw",
    "ivf",
    "ivf_sq8",
    "IVF16,Flat",
    "HNSW16",
    "Flat",
    "test-dict",
    "ivf-from-start",
    "ivf_sq8-from-start",
    "compressed",
    "compressed_8bit",
    "compressed-from-start",
]
# Approximate backends must find this share of the true top k (exact ones all of it). These are
# floors that catch a broken search, not tuning targets: a factory string keeps FAISS's own
# nprobe (1 list in 16 here) and efSearch (16), and a graph walk under a filter that lets 10% of
# the keys through misses many (HNSW16 found 0.37 here). A search that ignored nearness under
# that filter would find about 0.07.
MIN_RECALL = 0.8
MIN_RECALL_OF = {"IVF16,Flat": 0.5}
MIN_RECALL_FILTERED = 0.3


def clustered(n: int, seed: int = 0, clusters: int = 40) -> np.ndarray:
    """Unit vectors around ``clusters`` centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    X = centres[rng.integers(0, clusters, n)] + 0.3 * rng.standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def ids_for(n: int, start: int = 3) -> np.ndarray:
    """Ids as a store hands them out: increasing, but not row numbers."""
    return start + 5 * np.arange(n, dtype=np.int64)


@pytest.fixture(params=[*BACKENDS, *MILVUS_KINDS])
def name(request: pytest.FixtureRequest) -> str:
    if request.param.startswith("milvus"):
        register_milvus_backend(request.param, milvus_location(request, request.param))
    return request.param


def filled(name: str, n: int = N, metric: Metric = Metric.INNER_PRODUCT):
    backend = backend_spec(name).create(DIM, metric)
    X, ids = clustered(n), ids_for(n)
    half = n // 2
    backend.add(ids[:half], X[:half])  # two batches, as two inserts would
    backend.add(ids[half:], X[half:])
    return backend, X, ids


def true_top(X: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int, metric: Metric):
    scores = metric_scores(queries, X, metric)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(scores, order, axis=1)


def assert_finds(
    backend: IndexBackend, found: np.ndarray, truth: np.ndarray, *, filtered: bool = False
) -> None:
    """Exact backends return exactly the true top k; approximate ones much of it."""
    if backend.capabilities.exact:
        np.testing.assert_array_equal(found, truth)
        return
    recall = np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)])
    floor = MIN_RECALL_FILTERED if filtered else MIN_RECALL_OF.get(backend.describe(), MIN_RECALL)
    assert recall >= floor, f"{backend.describe()}: recall {recall:.3f}"


@pytest.mark.parametrize("metric", list(Metric))
def test_search_finds_the_nearest_keys_with_their_true_scores(name: str, metric: Metric) -> None:
    backend, X, ids = filled(name, metric=metric)
    assert len(backend) == N
    queries = clustered(40, seed=7)
    scores, found = backend.search(queries, 10)
    assert found.shape == scores.shape == (40, 10) and found.dtype == np.int64
    truth, _ = true_top(X, ids, queries, 10, metric)
    assert_finds(backend, found, truth)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    # Every returned id carries its own score (compressed indexes approximate it).
    all_scores = metric_scores(queries, X, metric)
    own = np.take_along_axis(all_scores, (found - 3) // 5, axis=1)
    tolerance = 1e-5 if backend.capabilities.exact else 0.05
    np.testing.assert_allclose(scores, own, atol=tolerance)


def test_k_beyond_what_is_held_is_padded(name: str) -> None:
    backend = backend_spec(name).create(DIM, Metric.INNER_PRODUCT)
    empty_scores, empty_ids = backend.search(clustered(2), 4)
    assert np.all(empty_ids == -1) and np.all(np.isneginf(empty_scores))
    X, ids = clustered(5), ids_for(5)
    backend.add(ids, X)
    scores, found = backend.search(X[:2], 8)
    assert found.shape == (2, 8)
    assert sorted(found[0, :5].tolist()) == ids.tolist() and found[0, 0] == ids[0]
    assert np.all(found[:, 5:] == -1) and np.all(np.isneginf(scores[:, 5:]))
    assert np.all(np.isfinite(scores[:, :5]))


def test_removed_ids_never_come_back_and_re_added_vectors_are_found(name: str) -> None:
    backend, X, ids = filled(name)
    gone = np.arange(0, 300, 3)
    backend.remove(ids[gone])
    backend.remove(np.array([ids[gone[0]], 10**9]))  # again, and an id never held: ignored
    assert len(backend) == N - len(gone)
    _, found = backend.search(X[gone], 20)
    assert not set(found.ravel().tolist()) & set(ids[gone].tolist())
    # The same vectors under new ids, as a re-inserted key gets.
    new_ids = ids[-1] + 1 + np.arange(len(gone))
    backend.add(new_ids, X[gone])
    _, found = backend.search(X[gone], 1)
    hits = np.mean(found[:, 0] == new_ids)
    assert hits == 1.0 if backend.capabilities.exact else hits >= 0.95
    assert len(backend) == N


def test_ids_survive_compaction(name: str) -> None:
    backend, X, ids = filled(name)
    backend.remove(ids[: 2 * N // 3])  # more removed than kept: backends compact now
    kept = np.arange(2 * N // 3, N)
    assert len(backend) == len(kept)
    _, found = backend.search(X[kept[:200]], 1)
    hits = np.mean(found[:, 0] == ids[kept[:200]])
    assert hits == 1.0 if backend.capabilities.exact else hits >= 0.95
    assert set(found[:, 0].tolist()) <= set(ids[kept].tolist())


def test_allow_limits_the_search_to_its_ids(name: str) -> None:
    backend, X, ids = filled(name)
    rng = np.random.default_rng(3)
    subset = np.sort(rng.choice(N, N // 10, replace=False))
    allow = Allow.of(ids[subset])
    queries = clustered(30, seed=11)
    _, found = backend.search(queries, 20, allow)
    assert set(found.ravel().tolist()) - {-1} <= set(ids[subset].tolist())
    truth, _ = true_top(X[subset], ids[subset], queries, 20, Metric.INNER_PRODUCT)
    assert_finds(backend, found, truth, filtered=True)
    # A sparse filter: three scattered keys, each its own nearest.
    sparse = np.array([11, 1500, 2999])
    _, found = backend.search(X[sparse], 5, Allow.of(ids[sparse]))
    np.testing.assert_array_equal(found[:, 0], ids[sparse])
    assert np.all(found[:, 3:] == -1)


def test_allow_with_ids_not_held_returns_only_held_ones(name: str) -> None:
    backend, X, ids = filled(name, n=2500)
    backend.remove(ids[:5])
    allow = Allow.of([*ids[:10].tolist(), 10**9])
    _, found = backend.search(X[:10], 10, allow)
    assert set(found.ravel().tolist()) - {-1} == set(ids[5:10].tolist())


def test_score_all_where_exact_or_scannable_and_only_there(name: str) -> None:
    backend, X, ids = filled(name)
    backend.remove(ids[:10])
    queries = clustered(3, seed=5)
    capabilities = backend.capabilities
    if not (capabilities.exact or capabilities.scan_max_keys):
        with pytest.raises(NotImplementedError):
            backend.score_all(queries)
        return
    scores, columns = backend.score_all(queries)
    np.testing.assert_array_equal(columns, ids[10:])  # held ids, increasing
    # Within float32 rounding: Milvus sums the products in its own order.
    expected = metric_scores(queries, X[10:], Metric.INNER_PRODUCT)
    assert_close(scores, expected, atol=1e-6)
    subset = ids[[3, 20, 700]]  # the first was removed: not scored
    scores, columns = backend.score_all(queries, Allow.of(subset))
    np.testing.assert_array_equal(columns, subset[1:])
    assert scores.shape == (3, 2)


def test_vectors_come_back_as_added(name: str) -> None:
    backend, X, ids = filled(name)
    assert backend.capabilities.returns_vectors
    picked = np.array([0, 17, 2999])
    got = backend.vectors(ids[picked])
    tolerance = 1e-6 if backend.capabilities.exact or "sq8" not in backend.describe() else 0.02
    np.testing.assert_allclose(got, X[picked], atol=tolerance)


def test_dump_and_restore_round_trip(name: str) -> None:
    backend, X, ids = filled(name)
    backend.remove(ids[::7])
    dump = backend.dump()
    reader = FileReader(
        __import__("pathlib").Path("store"),
        {name_: encode_file(content) for name_, content in dump.files.items()},
    )
    restored = backend_spec(name).create(DIM, Metric.INNER_PRODUCT)
    restored.restore(dump.meta, reader)
    assert len(restored) == len(backend) and restored.describe() == backend.describe()
    queries = clustered(20, seed=9)
    a, b = backend.search(queries, 15), restored.search(queries, 15)
    np.testing.assert_array_equal(a[1], b[1])
    assert_close(a[0], b[0])
    # And it keeps working: new ids after the restored ones.
    restored.add(np.array([ids[-1] + 1]), X[:1])
    assert restored.search(X[:1], 1)[1][0, 0] in (ids[0], ids[-1] + 1)


def test_emptied_backend_takes_new_keys(name: str) -> None:
    backend, X, ids = filled(name, n=2500)
    backend.remove(ids)
    assert len(backend) == 0
    assert np.all(backend.search(X[:2], 3)[1] == -1)
    fresh = ids[-1] + 1 + np.arange(50)
    backend.add(fresh, X[:50])
    assert len(backend) == 50
    _, found = backend.search(X[:50], 1)
    assert np.mean(found[:, 0] == fresh) >= 0.95


@pytest.mark.parametrize(
    "make",
    [lambda: ExactBackend(DIM, Metric.INNER_PRODUCT)]
    + [
        lambda name=name: backend_spec(name).create(DIM, Metric.INNER_PRODUCT)
        for name in ("hnsw", "ivf-from-start")
    ],
)
def test_backends_with_rows_refuse_ids_that_do_not_increase(make) -> None:
    """The store hands out ids in increasing order; a backend that maps them to rows relies on
    it and says so rather than corrupting its map."""
    backend = make()
    backend.add(np.array([4, 9]), clustered(2))
    for bad in ([9], [2], [12, 11]):
        with pytest.raises(ValueError, match="increasing"):
            backend.add(np.array(bad), clustered(len(bad)))
    assert len(backend) == 2


def test_the_plug_in_is_one_class_and_one_registration() -> None:
    assert type(backend_spec("test-dict").create(DIM, Metric.L2)) is DictBackend


def test_the_id_set_helpers_equal_numpys() -> None:
    """``sorted_unique`` and ``is_in`` (sort-based, faster than numpy's hash-based unique and
    isin on a lookup's few hundred ids) give numpy's answers, repeats and negatives included."""
    from softdict.index.base import is_in, sorted_unique

    rng = np.random.default_rng(7)
    for _ in range(300):
        values = rng.integers(-3, 60, rng.integers(0, 50))
        pool = rng.integers(-3, 60, rng.integers(0, 50))
        np.testing.assert_array_equal(sorted_unique(values), np.unique(values))
        np.testing.assert_array_equal(is_in(values, pool), np.isin(values, pool))


def _misbehaving(answer: str) -> type[DictBackend]:
    """A plug-in backend whose search answers wrongly in one way (``answer``)."""

    class Misbehaving(DictBackend):
        def remove(self, ids: np.ndarray) -> None:
            if answer != "a removed id":
                super().remove(ids)

        def search(self, queries, k, allow=None):  # type: ignore[no-untyped-def]
            scores, ids = super().search(
                queries, k, None if answer == "ignores the mask" else allow
            )
            if answer == "an id twice":
                ids[:, 1] = ids[:, 0]
            elif answer == "an unknown id":
                ids[:, 0] = 10**6
            elif answer == "the id -2":
                ids[:, 0] = -2
            elif answer == "a NaN score":
                scores[:, 0] = np.nan
            elif answer == "one row, flat":
                return scores[0], ids[0]
            return scores, ids

        def score_all(self, queries, allow=None):  # type: ignore[no-untyped-def]
            scores, ids = super().score_all(queries, allow)
            return (scores[:, :-1], ids) if answer == "scores of too few columns" else (scores, ids)

    return Misbehaving


@pytest.mark.parametrize(
    "answer",
    [
        "ignores the mask",
        "an id twice",
        "an unknown id",
        "the id -2",
        "a removed id",
        "a NaN score",
        "one row, flat",
        "scores of too few columns",
    ],
)
def test_a_plug_in_backend_that_answers_wrongly_is_a_store_format_error(answer: str) -> None:
    """A lookup trusted a plug-in's answers: a key the mask left out came back, an unknown id
    was read as a neighbour's key, a NaN score made the lookup NaN, a flat answer raised numpy's
    AxisError (a hostile-input probe)."""
    from _support import FakeEncoder

    from softdict import SoftDict, StoreFormatError
    from softdict.index import register_backend

    register_backend(f"test-misbehaving-{answer}", _misbehaving(answer))
    keys = ["red apple", "green apple", "red car", "blue sofa", "old chair"]
    sd = SoftDict(
        dict(zip(keys, range(5))),
        encoder=FakeEncoder(),
        index=f"test-misbehaving-{answer}",
        lexical=0,
    )
    del sd["red apple"]
    keys.remove("red apple")
    calls = [  # a lookup scores every key (score_all); nearest by meaning searches
        lambda: sd.lookup("red apple", mask=keys[2:]),
        lambda: sd.nearest("apple", k=3, mask=keys[1:]),
        lambda: sd.nearest("red apple", k=3),
    ]
    if answer == "ignores the mask":
        calls = calls[1:2]
    elif answer == "a removed id":  # outside a mask: the mask leaves it out
        calls = calls[2:]
    elif answer != "scores of too few columns":
        calls = calls[1:]
    for call in calls:
        with pytest.raises(StoreFormatError, match=r"the index \(test-dict\)"):
            call()
    assert list(sd) == keys
