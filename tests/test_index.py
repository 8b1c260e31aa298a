"""Index backends: deletes, overwrites and re-inserts on every backend; top-k with its tail bound;
masked lookups inside the FAISS search; a batch is one search call."""

from __future__ import annotations

import numpy as np
import pytest
from _support import FakeEncoder

from softdict import ConfigError, EmptyStoreError, KeyTypeError, SoftDict
from softdict._attention import similarity_scores, softmax
from softdict._config import Similarity
from softdict._index import EXACT_MAX_KEYS, KeyIndex

DIM = 16
BACKENDS = ["auto", "flat", "hnsw", "ivf", "ivf_sq8", "IVF16,Flat", "HNSW16"]


def clustered(n: int, seed: int = 0, clusters: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around ``clusters`` centres, and each one's cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    labels = rng.integers(0, clusters, n)
    X = centres[labels] + 0.3 * rng.standard_normal((n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32), labels


def build(index: str, n: int = 3000, **options) -> tuple[SoftDict, np.ndarray, list[str]]:
    X, labels = clustered(n)
    keys = [f"key{i}" for i in range(n)]
    options.setdefault("temperature", 0.1)
    sd = SoftDict(encoder=FakeEncoder(), index=index, **options)
    sd.add_embeddings(keys, X, labels.astype(float))
    return sd, X, keys


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def test_backend_is_built_once_there_are_enough_keys(backend: str) -> None:
    sd, _, _ = build(backend)
    assert sd._index is not None
    expected_faiss = backend != "auto"  # auto stays exact up to EXACT_MAX_KEYS
    assert (sd._index._faiss is not None) == expected_faiss
    assert backend.split(",")[0].lower() in sd.index_description.lower()


def test_deleted_keys_never_contribute_and_reinserted_keys_are_found(backend: str) -> None:
    sd, X, keys = build(backend, top_k=50)
    deleted = keys[:300:3]
    for key in deleted:
        del sd[key]
    gone = set(deleted)
    queries = X[:300:3]  # the deleted keys' own embeddings: they would score highest
    for attention in sd.attend_embeddings(queries):
        assert gone.isdisjoint(attention.keys)
        assert len(attention.keys) == 50
    # Re-inserted (with the same embedding), each key is its own nearest neighbour again.
    sd.add_embeddings(deleted, queries, np.full(len(deleted), 99.0))
    hits = sum(sd.attend_embeddings(q).keys[0] == key for key, q in zip(deleted, queries))
    assert hits >= 0.95 * len(deleted)
    assert sd[deleted[0]] == 99.0 and len(sd) == len(keys)


def test_overwrite_changes_the_value_attended_to(backend: str) -> None:
    sd, X, _ = build(backend, top_k=20)
    before = sd.lookup_embeddings(X[7])
    nearest = sd.attend_embeddings(X[7]).keys[0]
    sd[nearest] = 1e6  # an exact key: its embedding stays, its value changes
    after = sd.lookup_embeddings(X[7])
    assert after > before + 1e3


def test_compaction_keeps_mapping_and_search_consistent(backend: str) -> None:
    sd, X, keys = build(backend, top_k=10)
    rows_before = sd._index.size
    for key in keys[: 2 * len(keys) // 3]:
        del sd[key]
    assert sd._index.size < rows_before  # dead rows were compacted away
    survivors = keys[2 * len(keys) // 3 :]
    assert list(sd) == survivors
    hits = sum(
        sd.attend_embeddings(X[i]).keys[0] == keys[i] for i in range(len(keys) - 50, len(keys))
    )
    assert hits >= 45
    for attention in sd.attend_embeddings(X[:20]):
        assert set(attention.keys) <= set(survivors)


def test_l2_scores_on_a_faiss_index_are_negative_squared_distances() -> None:
    X, _ = clustered(3000)
    sd = SoftDict(encoder=FakeEncoder(), index="flat", similarity="l2", top_k=5)
    sd.add_embeddings([f"k{i}" for i in range(3000)], X, np.zeros(3000))
    attention = sd.attend_embeddings(X[3] + 0.01)
    exact = Similarity.L2.scores((X[3] + 0.01)[None, :], X)[0]
    np.testing.assert_allclose(attention.scores, np.sort(exact)[::-1][:5], rtol=1e-4, atol=1e-5)


def test_adaptive_k_grows_until_the_bound_is_met_and_the_bound_holds() -> None:
    n = EXACT_MAX_KEYS + 2000
    X, _ = clustered(n, clusters=400)
    values = np.random.default_rng(1).standard_normal(n)
    sd = SoftDict(encoder=FakeEncoder(), index="flat", temperature=0.05, tail_tolerance=0.01)
    sd.add_embeddings([f"k{i}" for i in range(n)], X, values)
    queries = clustered(20, seed=5, clusters=400)[0]
    exact_weights = softmax(Similarity.COSINE.scores(queries, X), 0.05)
    for attention, weights in zip(sd.attend_embeddings(queries), exact_weights):
        assert attention.k == len(attention.keys) <= 1024
        assert attention.tail_mass <= 0.01 or attention.k == 1024
        rows = [int(key[1:]) for key in attention.keys]
        true_tail = 1.0 - weights[rows].sum()
        assert true_tail <= attention.tail_mass + 1e-9  # flat: the true top k, so the bound holds
    # The blended value is close to exact attention.
    exact = exact_weights @ values
    np.testing.assert_allclose(sd.lookup_embeddings(queries), exact, atol=0.05)


def test_fixed_top_k_is_used_as_given() -> None:
    sd, X, _ = build("flat", top_k=7)
    attention = sd.attend_embeddings(X[0])
    assert attention.k == 7 and len(attention.keys) == 7 and 0 < attention.tail_mass < 1


def test_faiss_padding_is_masked() -> None:
    """A mask that allows fewer keys than k: FAISS pads with -1, which never gets weight."""
    sd, X, keys = build("ivf", top_k=20)
    allowed = keys[:5]
    attention = sd.attend_embeddings(X[0], mask=allowed)
    assert set(attention.keys) <= set(allowed) and attention.k == len(attention.keys) <= 5
    assert attention.weights.sum() == pytest.approx(1.0)
    assert np.all(np.isfinite(attention.scores))


def test_masked_attention_equals_exact_attention_over_the_subset(backend: str) -> None:
    sd, X, keys = build(backend, top_k=None, max_k=256)
    subset = keys[::10]  # 10% of the keys
    attention = sd.attend_embeddings(X[5], mask=subset)
    assert set(attention.keys) <= set(subset)
    sub = np.array([int(k[3:]) for k in subset])
    weights = softmax(Similarity.COSINE.scores(X[5][None, :], X[sub]), 0.1)[0]
    exact_value = weights @ clustered(3000)[1][sub].astype(float)  # values are cluster labels
    got = sd.lookup_embeddings(X[5], mask=subset)
    assert got == pytest.approx(exact_value, abs=0.05 * max(1.0, abs(exact_value)))


def test_a_sparse_mask_still_finds_its_keys_on_approximate_indexes(backend: str) -> None:
    sd, X, keys = build(backend, top_k=3)
    subset = [keys[i] for i in (11, 1500, 2999)]  # 0.1% of the keys, scattered
    for i, key in zip((11, 1500, 2999), subset):
        assert sd.attend_embeddings(X[i], mask=subset).keys[0] == key


def test_predicate_mask(backend: str) -> None:
    sd, X, _ = build(backend, top_k=30)
    attention = sd.attend_embeddings(X[0], mask=lambda key: key.endswith("7"))
    assert attention.keys and all(key.endswith("7") for key in attention.keys)


def test_mask_errors_and_absent_keys() -> None:
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=FakeEncoder())
    assert sd.lookup("apple", mask=["apple", "not stored"]) == pytest.approx(1.0)
    with pytest.raises(EmptyStoreError, match="mask allows none"):
        sd.lookup("apple", mask=["pear"])
    with pytest.raises(KeyTypeError, match="pass \\[key\\]"):
        sd.lookup("apple", mask="apple")
    assert [k for k, _ in sd.nearest("apple", k=2, mask=["chair"])] == ["chair"]


def test_a_batch_is_one_index_search(monkeypatch: pytest.MonkeyPatch) -> None:
    sd, X, _ = build("ivf", top_k=10)
    calls: list[tuple[int, ...]] = []
    original = KeyIndex.search

    def spy(self, queries, k, allowed=None):
        calls.append(queries.shape)
        return original(self, queries, k, allowed)

    monkeypatch.setattr(KeyIndex, "search", spy)
    sd.lookup_embeddings(X[:32])
    sd.attend_embeddings(X[:32])
    assert calls == [(32, DIM), (32, DIM)]


def test_auto_is_exact_while_small_then_switches_to_ivf() -> None:
    X, labels = clustered(EXACT_MAX_KEYS + 1)
    sd = SoftDict(encoder=FakeEncoder(), temperature=0.1)
    sd.add_embeddings([f"k{i}" for i in range(EXACT_MAX_KEYS)], X[:-1], labels[:-1].astype(float))
    assert sd.index_description == "auto: exact"
    assert sd.attend_embeddings(X[0]).k == EXACT_MAX_KEYS  # every key, exactly
    sd.add_embeddings(["last"], X[-1:], [1.0])
    assert sd.index_description.startswith("auto: ivf")
    attention = sd.attend_embeddings(X[0])
    assert attention.keys[0] == "k0" and attention.k <= 1024


def test_ivf_retrains_as_the_store_grows() -> None:
    X, _ = clustered(2000 * 4 + 100)
    sd = SoftDict(encoder=FakeEncoder(), index="ivf")
    sd.add_embeddings([f"k{i}" for i in range(2000)], X[:2000], np.zeros(2000))
    first = sd.index_description
    for start in range(2000, len(X), 1000):
        stop = min(start + 1000, len(X))
        sd.add_embeddings(
            [f"k{i}" for i in range(start, stop)], X[start:stop], np.zeros(stop - start)
        )
    assert sd.index_description != first  # more lists after retraining
    assert sd.attend_embeddings(X[-1]).keys[0] == f"k{len(X) - 1}"


def test_factory_string_is_checked_against_the_real_dimension() -> None:
    """A product quantiser with 48 codes fits 384 dims, not 16: judged once d is known."""
    rng = np.random.default_rng(0)
    sd = SoftDict(encoder=FakeEncoder(), index="IVF1024,PQ48")  # the README's example
    with pytest.raises(ConfigError, match="cannot be built for 16-dim embeddings"):
        sd.add_embeddings(["a", "b"], rng.standard_normal((2, 16)), [1.0, 2.0])
    assert len(sd) == 0
    sd.add_embeddings(["a", "b"], rng.standard_normal((2, 384)), [1.0, 2.0])
    assert sd.lookup_embeddings(rng.standard_normal(384)) == pytest.approx(1.5, abs=0.5)


def test_unknown_index_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="index_factory"):
        SoftDict(encoder=FakeEncoder(), index="NotAnIndex42")


def test_progress_bar_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    SoftDict({f"key {i}": i for i in range(300)}, encoder=FakeEncoder(), batch_size=100)
    assert "softdict: embedding keys" not in capsys.readouterr().err
    SoftDict(
        {f"key {i}": i for i in range(300)}, encoder=FakeEncoder(), batch_size=100, progress=True
    )
    assert "softdict: embedding keys" in capsys.readouterr().err


def test_one_pass_trimmed_search_equals_growing_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    n = EXACT_MAX_KEYS + 500
    X, _ = clustered(n, clusters=300)
    sd = SoftDict(encoder=FakeEncoder(), index="flat", temperature=0.05)
    sd.add_embeddings([f"k{i}" for i in range(n)], X, np.arange(n, dtype=float))
    queries = clustered(30, seed=9, clusters=300)[0]
    one_pass = sd.attend_embeddings(queries)
    monkeypatch.setattr(KeyIndex, "cost_grows_with_k", property(lambda self: True))
    rounds = sd.attend_embeddings(queries)
    assert {a.k for a in one_pass} <= {64, 256, 1024}
    for a, b in zip(one_pass, rounds):
        assert a.keys == b.keys and a.k == b.k
        np.testing.assert_allclose(a.weights, b.weights)
        assert a.tail_mass == pytest.approx(b.tail_mass)


def test_hnsw_adaptive_k_searches_in_rounds() -> None:
    sd, X, _ = build("hnsw", temperature=0.02)
    assert sd._index.cost_grows_with_k
    for attention in sd.attend_embeddings(X[:10]):
        assert attention.k in (64, 256, 1024, len(sd))
        assert attention.tail_mass <= 0.01 or attention.k >= 1024
