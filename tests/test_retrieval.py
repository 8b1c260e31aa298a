"""Retrieval: which keys a lookup attends to (every key, a fixed k, or an adaptive k with its
tail bound), tested as pure functions of a backend, and through SoftDict on every backend:
deletes, overwrites, compaction, masks inside the search, the auto switch, IVF retraining."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _support import FLOAT32_RTOL, FakeEncoder, assert_close, close

from softdict import (
    ConfigError,
    EmptyStoreError,
    KeyTypeError,
    Similarity,
    SoftDict,
    StoreFormatError,
)
from softdict._attention import softmax, tail_mass_bound
from softdict._config import EXACT_MAX_KEYS
from softdict._files import FileReader
from softdict._retrieval import HEAD_GROWTH_MAX, SPELLING_CANDIDATES, RetrievalPolicy, select
from softdict._similarity import Metric, metric_scores
from softdict.index import Allow, Capabilities, IndexBackend, backend_spec, register_backend
from softdict.index.growing import GrowingBackend
from softdict.index.ivf import IVFBackend

DIM = 16
BACKENDS = [
    "auto", "flat", "hnsw", "ivf", "ivf_sq8", "IVF16,Flat", "HNSW16", "test-dict",
    "compressed-from-start",
]  # fmt: skip
# Backends whose answers on these stores (3,000 keys) must be exactly the formula's.
EXACT = {"auto", "flat", "test-dict"}


class Recording(IndexBackend):
    """Any backend, recording each search's (number of queries, k); optionally claiming that
    cost grows with k, to run adaptive top-k in rounds over an exact backend, or a head share
    (``Capabilities.head_share``), its other capabilities the wrapped backend's."""

    def __init__(
        self, inner: IndexBackend, *, rounds: bool | None = None, head_share: float = 0.0
    ) -> None:
        super().__init__(inner.dim, inner.metric)
        self.inner, self.rounds, self.head_share = inner, rounds, head_share
        self.searches: list[tuple[int, int]] = []

    @property
    def capabilities(self) -> Capabilities:
        caps = self.inner.capabilities
        rounds = caps.cost_grows_with_k if self.rounds is None else self.rounds
        return replace(caps, cost_grows_with_k=rounds, head_share=self.head_share)

    def search(self, queries, k, allow=None):  # type: ignore[no-untyped-def]
        self.searches.append((len(queries), k))
        return self.inner.search(queries, k, allow)

    # Everything else as the backend it wraps.
    def __len__(self) -> int:
        return len(self.inner)

    def add(self, ids, vectors):  # type: ignore[no-untyped-def]
        self.inner.add(ids, vectors)

    def remove(self, ids):  # type: ignore[no-untyped-def]
        self.inner.remove(ids)

    def score_all(self, queries, allow=None):  # type: ignore[no-untyped-def]
        return self.inner.score_all(queries, allow)

    def vectors(self, ids):  # type: ignore[no-untyped-def]
        return self.inner.vectors(ids)

    def ids(self):  # type: ignore[no-untyped-def]
        return self.inner.ids()

    def describe(self) -> str:
        return self.inner.describe()

    def memory_bytes(self) -> int:
        return self.inner.memory_bytes()

    def dump(self):  # type: ignore[no-untyped-def]
        return self.inner.dump()

    def restore(self, meta, files):  # type: ignore[no-untyped-def]
        self.inner.restore(meta, files)


RECORDED: list[Recording] = []


def _recording_ivf(dim: int, metric: Metric) -> Recording:
    RECORDED.append(Recording(backend_spec("ivf").create(dim, metric)))
    return RECORDED[-1]


register_backend("test-recording-ivf", _recording_ivf)


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


# -- the policy as pure functions -----------------------------------------------------------


def exact_backend(n: int, clusters: int = 400, seed: int = 0) -> tuple[IndexBackend, np.ndarray]:
    X, _ = clustered(n, seed=seed, clusters=clusters)
    backend = backend_spec("flat").create(DIM, Metric.INNER_PRODUCT)
    backend.add(np.arange(n, dtype=np.int64), X)
    return backend, X


def test_every_allowed_key_is_scored_exactly_while_the_store_is_small() -> None:
    backend, X = exact_backend(500)
    queries = clustered(4, seed=3, clusters=400)[0]
    chosen = select(backend, queries, RetrievalPolicy(0.07), None, 500)
    np.testing.assert_array_equal(chosen.ids, np.arange(500))
    assert_close(chosen.weights, softmax(queries @ X.T, 0.07))
    assert chosen.k.tolist() == [500] * 4 and chosen.tail_mass.tolist() == [0.0] * 4
    allow = Allow.of(np.arange(0, 500, 5))
    chosen = select(backend, queries, RetrievalPolicy(0.07), allow, 100)
    np.testing.assert_array_equal(chosen.ids, allow.ids)
    assert_close(chosen.weights, softmax(queries @ X[::5].T, 0.07))


def test_a_fixed_k_is_the_softmax_over_the_k_best() -> None:
    backend, X = exact_backend(500)
    queries = clustered(3, seed=4, clusters=400)[0]
    chosen = select(backend, queries, RetrievalPolicy(0.1, top_k=7), None, 500)
    scores = queries @ X.T
    best = np.argsort(-scores, axis=1)[:, :7]
    np.testing.assert_array_equal(chosen.ids, best)
    top = np.take_along_axis(scores, best, axis=1)
    assert_close(chosen.weights, softmax(top, 0.1))
    # Top-k attention estimates no tail; the bound holds on this exact index.
    assert np.isnan(chosen.tail_mass).all() and chosen.sampled is None
    assert_close(chosen.tail_bound, tail_mass_bound(top, 500, 0.1))
    assert chosen.k.tolist() == [7, 7, 7]


def test_adaptive_k_in_one_search_equals_adaptive_k_in_rounds() -> None:
    """Where k barely changes a search's cost, one search at max_k is cut where the rounds
    would stop; where it does (HNSW), each round searches again. Same keys either way."""
    n = EXACT_MAX_KEYS + 500
    inner, _ = exact_backend(n, clusters=300)
    queries = clustered(30, seed=9, clusters=300)[0]
    # Here the bound is met at 64, 256 and 1024 keys; the head alone (no sample) is compared.
    policy = RetrievalPolicy(0.02, max_sample=0)
    one_pass, rounds = Recording(inner, rounds=False), Recording(inner, rounds=True)
    a = select(one_pass, queries, policy, None, n)
    b = select(rounds, queries, policy, None, n)
    assert one_pass.searches == [(30, 1024)]
    # Each round searches only the queries still pending.
    assert rounds.searches[0] == (30, 64) and [k for _, k in rounds.searches] == [64, 256, 1024]
    assert rounds.searches[1][0] < 30 and rounds.searches[2][0] < rounds.searches[1][0]
    assert set(a.k.tolist()) == {64, 256, 1024}
    np.testing.assert_array_equal(a.k, b.k)
    # float32 products over batches of other sizes differ in the last bits.
    np.testing.assert_allclose(a.tail_bound, b.tail_bound, rtol=1e-4)
    for i in range(30):
        ids_a, ids_b = a.ids[i, : a.k[i]], b.ids[i, : b.k[i]]
        # The same keys; two whose scores differ in float32's last bits may trade places
        # (generic kernels round the two batches' products differently).
        assert set(ids_a.tolist()) == set(ids_b.tolist())
        moved = ids_a != ids_b
        assert_close(a.scores[i, : a.k[i]][moved], b.scores[i, : b.k[i]][moved])
        assert_close(a.weights[i, : a.k[i]], b.weights[i, : b.k[i]], atol=1e-6)


@pytest.mark.usefixtures("without_scan")
def test_a_backend_drawing_its_tail_uniformly_widens_the_head_with_the_store() -> None:
    """``Capabilities.head_share``: an estimated attention's head holds that share of the
    allowed keys where it is more than max_k, at most HEAD_GROWTH_MAX times max_k, and the
    head's rounds (no sample) stop there too: the head is the true best keys, the rest sampled."""
    n = EXACT_MAX_KEYS + 500
    inner, X = exact_backend(n, clusters=300)
    queries = clustered(6, seed=9, clusters=300)[0]
    scores = queries.astype(np.float64) @ X.T.astype(np.float64)
    for share, head in [(0.0, 64), (1 / 64, n // 64), (1 / 4, HEAD_GROWTH_MAX * 64)]:
        sampled = Recording(inner, head_share=share)
        chosen = select(sampled, queries, RetrievalPolicy(0.05, max_k=64), None, n)
        assert sampled.searches == [(6, head)] and chosen.k.tolist() == [head] * 6
        assert chosen.n_sampled is not None and np.all(chosen.n_sampled > 0)
        assert_close(chosen.weights.sum(axis=1), 1.0)
        for i in range(6):
            inside = np.zeros(n, dtype=bool)
            inside[chosen.ids[i, :head]] = True
            # float32 scores may order near-equal keys differently at the head's edge.
            assert scores[i, inside].min() >= scores[i, ~inside].max() - FLOAT32_RTOL
        rounds = Recording(inner, rounds=True, head_share=share)
        never_met = RetrievalPolicy(0.05, max_k=64, max_sample=0, tail_tolerance=1e-12)
        chosen = select(rounds, queries, never_met, None, n)
        assert rounds.searches[-1] == (6, head) and chosen.k.tolist() == [head] * 6


def test_an_empty_batch_selects_nothing() -> None:
    backend, _ = exact_backend(50)
    for policy in (RetrievalPolicy(0.1), RetrievalPolicy(0.1, top_k=5)):
        chosen = select(backend, np.zeros((0, DIM), np.float32), policy, None, 50)
        assert chosen.weights.shape[0] == 0 and chosen.k.shape == (0,)


# -- through SoftDict, on every backend --------------------------------------------------------


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
    hits = np.mean([sd.attend_embeddings(q).keys[0] == key for key, q in zip(deleted, queries)])
    assert hits == 1.0 if backend in EXACT else hits >= 0.95
    assert sd[deleted[0]] == 99.0 and len(sd) == len(keys)


def test_overwrite_changes_the_value_attended_to(backend: str) -> None:
    sd, X, _ = build(backend, top_k=20)
    before = sd.lookup_embeddings(X[7])
    nearest = sd.attend_embeddings(X[7]).keys[0]
    sd[nearest] = 1e6  # an exact key: its embedding stays, its value changes
    weight = dict(sd.attend_embeddings(X[7]).top(20))[nearest]
    # The weight is rounded to float32 precision, and the new value multiplies it by 1e6.
    assert sd.lookup_embeddings(X[7]) == pytest.approx(before + weight * (1e6 - before), rel=1e-3)


def test_after_compaction_mapping_and_search_agree(backend: str) -> None:
    sd, X, keys = build(backend, top_k=10)
    for key in keys[: 2 * len(keys) // 3]:
        del sd[key]
    survivors = keys[2 * len(keys) // 3 :]
    assert list(sd) == survivors
    assert all(sd[key] == float(clustered(3000)[1][int(key[3:])]) for key in survivors[:50])
    hits = np.mean(
        [sd.attend_embeddings(X[i]).keys[0] == keys[i] for i in range(len(keys) - 50, len(keys))]
    )
    assert hits == 1.0 if backend in EXACT else hits >= 0.9
    for attention in sd.attend_embeddings(X[:20]):
        assert set(attention.keys) <= set(survivors)


def test_masked_attention_equals_attention_over_the_subset(backend: str) -> None:
    sd, X, keys = build(backend, top_k=None, max_k=256)
    subset = keys[::10]  # 10% of the keys
    attention = sd.attend_embeddings(X[5], mask=subset)
    assert set(attention.keys) <= set(subset)
    rows = np.array([int(k[3:]) for k in subset])
    weights = softmax(Similarity.COSINE.scores(X[5][None, :], X[rows]), 0.1)[0]
    exact_value = weights @ clustered(3000)[1][rows].astype(float)  # values are cluster labels
    got = sd.lookup_embeddings(X[5], mask=subset)
    if backend in EXACT:
        assert got == close(exact_value)
    else:
        assert got == pytest.approx(exact_value, abs=0.05 * max(1.0, abs(exact_value)))


def test_a_sparse_mask_still_finds_its_keys(backend: str) -> None:
    sd, X, keys = build(backend, top_k=3)
    subset = [keys[i] for i in (11, 1500, 2999)]  # 0.1% of the keys, scattered
    for i, key in zip((11, 1500, 2999), subset):
        assert sd.attend_embeddings(X[i], mask=subset).keys[0] == key


def test_predicate_mask(backend: str) -> None:
    sd, X, _ = build(backend, top_k=30)
    attention = sd.attend_embeddings(X[0], mask=lambda key: key.endswith("7"))
    assert attention.keys and all(key.endswith("7") for key in attention.keys)


def test_padding_never_gets_weight() -> None:
    """A mask that allows fewer keys than k: the index pads with -1, which gets no weight."""
    sd, X, keys = build("ivf", top_k=20)
    allowed = keys[:5]
    attention = sd.attend_embeddings(X[0], mask=allowed)
    assert set(attention.keys) <= set(allowed) and attention.k == len(attention.keys) <= 5
    assert attention.weights.sum() == close(1.0)
    assert np.all(np.isfinite(attention.scores))


def test_mask_errors_and_absent_keys() -> None:
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=FakeEncoder())
    assert sd.lookup("apple", mask=["apple", "not stored"]) == close(1.0)
    with pytest.raises(EmptyStoreError, match="mask allows none"):
        sd.lookup("apple", mask=["pear"])
    with pytest.raises(KeyTypeError, match="pass \\[key\\]"):
        sd.lookup("apple", mask="apple")
    assert [k for k, _ in sd.nearest("apple", k=2, mask=["chair"])] == ["chair"]


def test_l2_scores_are_negative_squared_distances() -> None:
    X, _ = clustered(3000)
    sd = SoftDict(encoder=FakeEncoder(), index="flat", similarity="l2", top_k=5)
    sd.add_embeddings([f"k{i}" for i in range(3000)], X, np.zeros(3000))
    attention = sd.attend_embeddings(X[3] + 0.01)
    exact = Similarity.L2.scores((X[3] + 0.01)[None, :], X)[0]
    # Both expand |q − k|² = |q|² − 2q·k + |k|² in float32, cancelling most digits of a near key.
    np.testing.assert_allclose(attention.scores, np.sort(exact)[::-1][:5], rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("without_scan")
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
        assert attention.tail_bound is not None  # flat: exact neighbours
        assert attention.tail_bound <= 0.01 or attention.k == 1024
        rows = [int(key[1:]) for key in attention.keys]
        true_tail = 1.0 - weights[rows].sum()
        assert true_tail <= attention.tail_bound + 1e-9  # flat: the true top k, so it holds
    # The blended value (head and sampled tail) is close to exact attention.
    exact = exact_weights @ values
    np.testing.assert_allclose(sd.lookup_embeddings(queries), exact, atol=0.05)


def test_fixed_top_k_is_used_as_given() -> None:
    sd, X, _ = build("flat", top_k=7)
    attention = sd.attend_embeddings(X[0])
    assert attention.k == 7 and len(attention.keys) == 7 and attention.tail_mass is None
    assert attention.tail_bound is not None and 0 < attention.tail_bound < 1


def test_a_batch_is_one_index_search() -> None:
    sd, X, _ = build("test-recording-ivf", top_k=10)
    recording = RECORDED[-1]
    recording.searches.clear()
    sd.lookup_embeddings(X[:32])
    sd.attend_embeddings(X[:32])
    sd.nearest([f"key{i}" for i in range(5)], k=3)
    # nearest by text also ranks by spelling: one dense search for the batch, for the keys full
    # attention's rounds take (on IVF, one search at the head's size, cut where each query's
    # rounds stop) and at least SPELLING_CANDIDATES, to choose the k best combined scores from.
    assert recording.searches[:2] == [(32, 10), (32, 10)] and len(recording.searches) == 3
    queries, k = recording.searches[2]
    assert queries == 5 and k >= SPELLING_CANDIDATES


@pytest.mark.usefixtures("without_scan")
def test_hnsw_adaptive_k_searches_in_rounds() -> None:
    sd, X, _ = build("hnsw", temperature=0.02)
    for attention in sd.attend_embeddings(X[:10]):
        assert attention.k in (64, 256, 1024, len(sd))
        assert attention.tail_bound is None  # HNSW can miss near keys: no bound
        # 3,000 keys: the rest of the head fits in max_sample, so it is scored whole.
        assert attention.sampled == len(sd) - attention.k and attention.tail_mass is not None
        assert attention.weights.sum() + attention.tail_mass == close(1.0)


@pytest.mark.usefixtures("without_scan")
def test_auto_is_exact_while_small_then_switches_to_hnsw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from softdict._cli import main

    X, labels = clustered(EXACT_MAX_KEYS + 1)
    sd = SoftDict(encoder=FakeEncoder(), temperature=0.1)
    sd.add_embeddings([f"k{i}" for i in range(EXACT_MAX_KEYS)], X[:-1], labels[:-1].astype(float))
    assert sd.index_description == "auto: exact"
    assert sd.attend_embeddings(X[0]).k == EXACT_MAX_KEYS  # every key, exactly
    sd.add_embeddings(["last"], X[-1:], [1.0])
    assert sd.index_description.startswith("auto: hnsw")
    attention = sd.attend_embeddings(X[0])
    assert attention.keys[0] == "k0" and attention.k <= 1024
    assert sd._store.snapshot()[0].index_meta["large"] == "hnsw"
    sd.save(tmp_path / "s")  # the command line's info says what the index holds, from its files
    assert main(["info", str(tmp_path / "s")]) == 0
    assert "index        auto: hnsw\n" in capsys.readouterr().out


def _dumped(backend: IndexBackend) -> tuple[dict, FileReader]:
    dump = backend.dump()
    return dict(dump.meta), FileReader(Path("<dump>"), dict(dump.files))


def test_auto_stores_built_as_ivf_before_still_load_as_ivf() -> None:
    """Before "auto" built HNSW it built IVF, and saved no ``large`` entry: such a store loads
    as IVF and answers as it did; an unknown kind is refused, naming the manifest."""
    X, _ = clustered(EXACT_MAX_KEYS + 1)
    ids = np.arange(len(X), dtype=np.int64)
    earlier = GrowingBackend(
        DIM, Metric.INNER_PRODUCT, lambda: IVFBackend(DIM, Metric.INNER_PRODUCT), EXACT_MAX_KEYS + 1
    )
    earlier.add(ids, X)
    meta, files = _dumped(earlier)
    assert meta["phase"] == "built" and "large" not in meta
    auto = backend_spec("auto").create(DIM, Metric.INNER_PRODUCT)
    auto.restore(meta, files)
    assert auto.describe().startswith("auto: ivf (nlist=")
    for got, want in zip(auto.search(X[:5], 10), earlier.search(X[:5], 10)):
        np.testing.assert_array_equal(got, want)
    assert "large" not in auto.dump().meta  # saved again as it was found
    other = backend_spec("auto").create(DIM, Metric.INNER_PRODUCT)
    with pytest.raises(StoreFormatError, match=r"manifest.json has an index of kind 'graph'"):
        other.restore({**meta, "large": "graph"}, files)


def test_ivf_is_built_at_2000_keys_and_retrained_as_the_store_grows() -> None:
    """About 4·sqrt(n) lists, at least 39 keys per list, rebuilt each time the store has grown
    4x since it was trained."""
    X, _ = clustered(2000 * 4 + 100)

    def lists(n: int) -> int:
        return int(max(1, min(4 * math.sqrt(n), n // 39)))

    sd = SoftDict(encoder=FakeEncoder(), index="ivf")
    sd.add_embeddings([f"k{i}" for i in range(1999)], X[:1999], np.zeros(1999))
    assert sd.index_description == "ivf (nprobe>=16)"  # exact until there are enough keys
    sd.add_embeddings(["k1999"], X[1999:2000], [0.0])
    assert sd.index_description == f"ivf (nlist={lists(2000)}, nprobe>=16)"
    for start in range(2000, len(X), 1000):
        stop = min(start + 1000, len(X))
        sd.add_embeddings(
            [f"k{i}" for i in range(start, stop)], X[start:stop], np.zeros(stop - start)
        )
    assert sd.index_description == f"ivf (nlist={lists(8000)}, nprobe>=16)"
    assert sd.attend_embeddings(X[-1]).keys[0] == f"k{len(X) - 1}"


def test_factory_string_is_checked_against_the_real_dimension() -> None:
    """A product quantiser with 48 codes fits 384 dims, not 16: judged once d is known."""
    rng = np.random.default_rng(0)
    sd = SoftDict(encoder=FakeEncoder(), index="IVF1024,PQ48")  # the README's example
    with pytest.raises(ConfigError, match="cannot be built for 16-dim embeddings"):
        sd.add_embeddings(["a", "b"], rng.standard_normal((2, 16)), [1.0, 2.0])
    assert len(sd) == 0
    K = rng.standard_normal((2, 384))
    sd.add_embeddings(["a", "b"], K, [1.0, 2.0])
    q = rng.standard_normal(384)
    # Two keys: far too few to train on, so the store answers exactly until it can.
    weights = softmax(Similarity.COSINE.scores(q[None, :], K), sd.temperature)[0]
    assert sd.lookup_embeddings(q) == close(weights @ [1.0, 2.0])


def test_unknown_index_is_a_config_error_that_says_why() -> None:
    with pytest.raises(ConfigError, match="index_factory") as info:
        SoftDict(encoder=FakeEncoder(), index="NotAnIndex42")
    assert "could not parse" in str(info.value) and "auto" in str(info.value)


def test_scores_are_the_metric_of_prepared_vectors_for_every_backend(backend: str) -> None:
    sd, X, _ = build(backend, top_k=5)
    attention = sd.attend_embeddings(X[42])
    rows = [int(key[3:]) for key in attention.keys]
    expected = metric_scores(X[42][None, :], X[rows], Metric.INNER_PRODUCT)[0]
    tolerance = 1e-5 if backend != "ivf_sq8" else 0.02
    np.testing.assert_allclose(attention.scores, expected, atol=tolerance)


@pytest.mark.parametrize("index", ["IVF4,PQ4", "ivf-from-start", "auto"])
def test_deleting_down_to_one_key_keeps_the_store_whole(index: str) -> None:
    """An index that cannot be retrained on what is left (a product quantiser needs 256
    vectors) keeps its tombstones, and below half the keys it was built for the store searches
    exactly again: every delete succeeds, and no deleted key comes back."""
    n = EXACT_MAX_KEYS + 300 if index == "auto" else 300
    X, _ = clustered(n)
    keys = [f"k{i}" for i in range(n)]
    sd = SoftDict(encoder=FakeEncoder(), index=index, top_k=5)
    sd.add_embeddings(keys, X, np.arange(n, dtype=float))
    for i, key in enumerate(keys[:-1]):
        del sd[key]
        if i % 97 == 0 or i > n - 5:
            assert len(sd) == n - i - 1 and key not in sd
            found = sd.attend_embeddings(X[i])
            assert set(found.keys) <= set(keys[i + 1 :])
    assert list(sd) == [keys[-1]] and sd[keys[-1]] == n - 1
    assert sd.nearest("anything", k=3) == [(keys[-1], pytest.approx(0.0, abs=1.0))]
    if index == "auto":
        assert sd.index_description == "auto: exact"  # searching exactly again
