"""Full attention by a scan of every key while that is cheaper than the estimate
(``Capabilities.scan_max_keys``), and lookups run in chunks of queries (``_lookup.selections``),
checked against the seed formula softmax(Q·Kᵀ/T)·V computed naively."""

from __future__ import annotations

import numpy as np
import pytest
from _support import FakeEncoder, assert_close, close

from softdict import NoMatchError, SoftDict, _lookup
from softdict._attention import softmax
from softdict._config import EXACT_MAX_KEYS
from softdict.index import hnsw

DIM = 16
T = 0.05


def unit(n: int, seed: int) -> np.ndarray:
    X = np.random.default_rng(seed).standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def naive(X: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The seed formula over every key given: softmax(cos(Q, K)/T)·V."""
    scores = queries.astype(np.float64) @ X.astype(np.float64).T
    return softmax(scores, T) @ values


def store(index: str, n: int, seed: int = 0, **options: object) -> tuple[SoftDict, np.ndarray]:
    X = unit(n, seed)
    sd = SoftDict(encoder=FakeEncoder(), index=index, temperature=T, **options)  # type: ignore[arg-type]
    values = np.random.default_rng(seed + 1).standard_normal(n)
    sd.add_embeddings([f"k{i}" for i in range(n)], X, list(values))
    return sd, X


def test_hnsw_scans_every_live_allowed_key_while_cheaper() -> None:
    """3,000 keys on HNSW (an approximate index): full attention is exact, deletes and masks
    apply, and nothing is sampled."""
    sd, X = store("hnsw", 3000)
    values = np.array([sd[f"k{i}"] for i in range(3000)])
    for i in range(0, 3000, 7):
        del sd[f"k{i}"]
    live = np.array([i for i in range(3000) if i % 7])
    queries = unit(9, seed=5)
    got = sd.lookup_embeddings(queries)
    assert_close(got, naive(X[live], values[live], queries), atol=1e-7)
    attention = sd.attend_embeddings(queries[0])
    assert attention.k == len(live) and attention.sampled == 0 and attention.tail_mass == 0
    assert attention.weights.sum() == close(1.0)
    allowed = live[live % 3 == 0]
    masked = sd.lookup_embeddings(queries, mask=[f"k{i}" for i in allowed])
    assert_close(masked, naive(X[allowed], values[allowed], queries))


def test_above_scan_max_keys_the_attention_is_estimated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the scan's limit the tail is sampled; a mask that allows no more keys than the limit
    brings the scan back."""
    monkeypatch.setattr(hnsw, "SCAN_MAX_KEYS", 1000)
    sd, _ = store("hnsw", 3000, max_k=64, max_sample=512)
    query = unit(1, seed=5)
    attention = sd.attend_embeddings(query[0])
    assert attention.k == 64 and attention.sampled > 0 and attention.tail_interval is not None
    allowed = np.arange(0, 3000, 4)  # 750 keys
    masked = sd.attend_embeddings(query[0], mask=[f"k{i}" for i in allowed])
    assert masked.k == 750 and masked.sampled == 0 and masked.tail_mass == 0


def test_a_flat_index_is_exact_at_any_size() -> None:
    n = EXACT_MAX_KEYS + 2000
    sd, X = store("flat", n)
    values = np.array([sd[f"k{i}"] for i in range(n)])
    queries = unit(4, seed=8)
    assert_close(sd.lookup_embeddings(queries), naive(X, values, queries))


def test_a_scan_past_the_exact_path_lists_the_best_keys_and_the_rest_exactly() -> None:
    """Past EXACT_MAX_KEYS, ``attend`` lists the max_k best keys of the scan, with their exact
    weights, and the exact mass of the others as ``tail_mass``."""
    n = EXACT_MAX_KEYS + 2000
    sd, X = store("hnsw", n, max_k=100)
    values = np.array([sd[f"k{i}"] for i in range(n)])
    query = unit(1, seed=8)
    weights = softmax(query.astype(np.float64) @ X.astype(np.float64).T, T)[0]
    best = np.argsort(-weights)[:100]
    attention = sd.attend_embeddings(query[0])
    assert attention.keys == tuple(f"k{i}" for i in best)
    assert_close(attention.weights, weights[best])
    rest = 1 - weights[best].sum()
    assert attention.k == 100 and attention.sampled == 0
    assert attention.tail_mass == close(rest)
    assert attention.tail_interval == (attention.tail_mass, attention.tail_mass)
    assert attention.tail_bound == attention.tail_mass
    assert attention.value == close(float(weights @ values))


@pytest.mark.parametrize("estimated", [False, True])
def test_a_batch_in_chunks_answers_as_one(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, estimated: bool
) -> None:
    """Chunks of 3 queries give what one chunk gives, for every value kind and every call,
    scanned or estimated (each query's sample is seeded by the query)."""
    if estimated:
        request.getfixturevalue("without_scan")
    X = unit(2000, seed=3)
    keys = [f"k{i}" for i in range(2000)]
    kinds = {
        "scalar": list(np.random.default_rng(1).standard_normal(2000)),
        "vector": list(np.random.default_rng(2).standard_normal((2000, 3))),
        "categorical": [f"label{i % 5}" for i in range(2000)],
    }
    queries = unit(10, seed=4)
    for kind, values in kinds.items():
        sd = SoftDict(encoder=FakeEncoder(), index="hnsw", temperature=T, max_k=64, max_sample=256)
        sd.add_embeddings(keys, X, values)
        whole = sd.lookup_embeddings(queries)
        attended = sd.attend_embeddings(queries)
        assert (attended[0].sampled > 0) is estimated
        with monkeypatch.context() as patch:
            patch.setattr(_lookup, "CHUNK_ENTRIES", 3 * (2000 if not estimated else 64 + 256))
            chunked = sd.lookup_embeddings(queries)
            chunked_attended = sd.attend_embeddings(queries)
        if kind == "categorical":
            assert chunked == whole
        else:
            # float32 products of other batch sizes differ in the last bits, /T amplifies them.
            assert_close(chunked, whole)
        for a, b in zip(chunked_attended, attended, strict=True):
            assert a.keys == b.keys and a.sampled == b.sampled
            assert_close(a.weights, b.weights)


def test_a_miss_in_a_later_chunk_is_reported_for_its_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sd, X = store("hnsw", 2000)
    # Queries 5 and 6 are no key: their best cosine is far below 0.999.
    queries = np.concatenate([X[:5], unit(2, seed=9), X[7:9]])
    monkeypatch.setattr(_lookup, "CHUNK_ENTRIES", 2 * 2000)  # chunks of 2 queries
    with pytest.raises(NoMatchError, match=r"query embedding #5.*\(1 other query in"):
        sd.lookup_embeddings(queries, min_score=0.999)
    filled = sd.lookup_embeddings(queries, min_score=0.999, default=np.nan)
    assert np.isnan(filled[5:7]).all() and np.isfinite(np.delete(filled, [5, 6])).all()


def test_nearest_with_spelling_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    words = [f"word{i} thing{i % 50}" for i in range(300)]
    sd = SoftDict(dict.fromkeys(words, 1.0), encoder=FakeEncoder())
    queries = ["word1 thing1", "wrod7 thing7", "word42", "thing9", "word250 thing0"]
    whole = sd.nearest(queries, k=5)
    monkeypatch.setattr(_lookup, "CHUNK_ENTRIES", 1)  # one query per chunk
    for got, expected in zip(sd.nearest(queries, k=5), whole, strict=True):
        assert [key for key, _ in got] == [key for key, _ in expected]
        # One query alone is scored by a matrix-vector product: equal to about 1e-7.
        assert_close([s for _, s in got], [s for _, s in expected])
    assert sd.lookup(queries) == close([1.0] * 5)
