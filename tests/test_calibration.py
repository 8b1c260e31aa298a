"""calibrate(): the leave-one-out temperature (and k) beat the defaults on held-out data.

The losses are checked against leave-one-out written out naively, key by key; the choices
against held-out data the store never saw. Stores of synthetic embeddings under placeholder
keys ("k17") are queried by embedding and set ``lexical=0``: the spelling of "k17" and "k171"
means nothing about their vectors. The spelling channel's own choice is tested at the end.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _support import FakeEncoder, close

from softdict import CalibrationWarning, ConfigError, EmptyStoreError, SoftDict
from softdict._leave_one_out import LeftOutScores, ValueSide, all_keys_losses, prefix_losses
from softdict.values import LossKind

DIM = 16


def noisy_clusters(
    n: int, seed: int, clusters: int = 20
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys in clusters whose values are the cluster's mean plus heavy noise: the nearest key
    alone is a poor guess, an average over the cluster a good one."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((clusters, DIM))
    means = np.random.default_rng(98).standard_normal(clusters) * 3
    labels = rng.integers(0, clusters, n)
    X = centres[labels] + 0.4 * rng.standard_normal((n, DIM))
    return X.astype(np.float32), means[labels] + rng.standard_normal(n) * 2.0, labels


def held_out_mse(sd: SoftDict, X: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean((sd.lookup_embeddings(X) - truth) ** 2))


def test_calibrated_temperature_beats_the_default_on_held_out_data() -> None:
    X, y, _ = noisy_clusters(600, seed=0)
    X_test, _, test_labels = noisy_clusters(300, seed=1)
    truth = (np.random.default_rng(98).standard_normal(20) * 3)[test_labels]  # the cluster means
    sd = SoftDict(encoder=FakeEncoder(), lexical=0)
    sd.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
    default_t, default_mse = sd.temperature, held_out_mse(sd, X_test, truth)
    chosen = sd.calibrate()
    assert sd.temperature == chosen != default_t
    assert sd.top_k is None  # well-separated clusters: no fixed k is better than all keys
    calibrated_mse = held_out_mse(sd, X_test, truth)
    print(
        f"held-out MSE: default T={default_t} {default_mse:.3f}, calibrated T={chosen:.3f} "
        f"{calibrated_mse:.3f} ({1 - calibrated_mse / default_mse:.0%} lower)"
    )
    assert calibrated_mse < 0.9 * default_mse  # measured: 21% lower (T 0.05 -> 0.084)


def test_calibration_of_labels_maximises_held_out_likelihood() -> None:
    X, _, labels = noisy_clusters(600, seed=2)
    noisy = np.where(np.random.default_rng(3).random(600) < 0.3, (labels + 1) % 20, labels)
    X_test, _, test_labels = noisy_clusters(300, seed=4)
    sd = SoftDict(
        encoder=FakeEncoder(), lexical=0, temperature=5.0
    )  # far too flat to tell clusters apart
    sd.add_embeddings([f"k{i}" for i in range(600)], X, [f"c{c}" for c in noisy])

    def held_out_log_likelihood() -> float:
        return float(
            np.mean(
                [
                    np.log(max(a.distribution.get(f"c{c}", 0.0), 1e-12))
                    for a, c in zip(sd.attend_embeddings(X_test), test_labels)
                ]
            )
        )

    before = held_out_log_likelihood()
    sd.calibrate()
    after = held_out_log_likelihood()
    print(
        f"held-out log-likelihood: T=5 {before:.3f}, calibrated T={sd.temperature:.3f} {after:.3f}"
    )
    assert after > before + 0.5


def test_a_sample_of_keys_is_predicted_from_the_whole_store() -> None:
    """500 of 6,000 keys give the whole store's temperature: each sampled key attends to all the
    others, as its lookup would. (A store of the 500 alone, with fewer neighbours per key,
    calibrates to 0.065 against the whole store's 0.044.) The stores start from a poor 0.3, so
    that calibrate has a temperature to find and move to."""
    X, y, _ = many_small_clusters(6000, seed=5)
    stores = [SoftDict(encoder=FakeEncoder(), lexical=0, temperature=0.3) for _ in range(3)]
    for sd in stores:
        sd.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
    whole = stores[0].calibrate(sample_size=6000, choose_k=False)
    sampled = stores[1].calibrate(sample_size=500, seed=1, choose_k=False)
    assert whole == pytest.approx(0.044, rel=0.1)
    assert sampled == pytest.approx(whole, rel=0.15)  # within one step of the grid
    assert stores[2].calibrate(sample_size=500, seed=1, choose_k=False) == sampled  # seeded


def test_calibrate_errors_leave_the_store_unchanged() -> None:
    with pytest.raises(EmptyStoreError, match="at least 2 keys"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder()).calibrate()
    sd = SoftDict({"apple": 1.0, "pear": 2.0}, encoder=FakeEncoder(), temperature=0.3, top_k=1)
    for bad in (1, 2.5, True, "100"):
        with pytest.raises(ConfigError, match="sample_size"):
            sd.calibrate(sample_size=bad)
    with pytest.raises(ConfigError, match="choose_k"):
        sd.calibrate(choose_k="yes")
    with pytest.raises(ConfigError, match="seed"):
        sd.calibrate(seed=-1)
    assert (sd.temperature, sd.top_k) == (0.3, 1)


def many_small_clusters(
    n: int, seed: int, dim: int = 64
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """500 clusters of about n/500 keys, values = the cluster's mean plus heavy noise. The best
    guess averages a key's few cluster mates evenly; attention over every key has to choose
    between a temperature sharp enough to ignore the thousands of other keys and one soft enough
    to average the mates, and a fixed k needs no such compromise."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((500, dim))
    means = np.random.default_rng(98).standard_normal(500) * 3
    labels = rng.integers(0, 500, n)
    X = centres[labels] + rng.standard_normal((n, dim))
    return X.astype(np.float32), means[labels] + rng.standard_normal(n) * 2.0, means[labels]


def test_calibrate_chooses_a_fixed_k_where_it_beats_all_keys_on_held_out_data(tmp_path) -> None:
    X, y, _ = many_small_clusters(4000, seed=0)
    X_test, _, truth = many_small_clusters(1000, seed=1)
    keys = [f"k{i}" for i in range(len(X))]
    with_k, without_k = (
        SoftDict(encoder=FakeEncoder(), lexical=0),
        SoftDict(encoder=FakeEncoder(), lexical=0),
    )
    for sd in (with_k, without_k):
        sd.add_embeddings(keys, X, y)
    default_mse = held_out_mse(with_k, X_test, truth)
    with_k.calibrate()
    # Over every key, no temperature predicts clearly better than the default here: kept.
    with pytest.warns(CalibrationWarning):
        without_k.calibrate(choose_k=False)
    assert without_k.top_k is None and without_k.temperature == 0.05
    assert with_k.top_k in (4, 8, 16)  # about the number of cluster mates (8)
    mse_with_k, mse_without_k = (
        held_out_mse(with_k, X_test, truth),
        held_out_mse(without_k, X_test, truth),
    )
    print(
        f"held-out MSE: default {default_mse:.3f}; calibrated T={without_k.temperature:.3f} "
        f"{mse_without_k:.3f}; calibrated T={with_k.temperature:.3f}, k={with_k.top_k} "
        f"{mse_with_k:.3f} ({1 - mse_with_k / mse_without_k:.0%} below T alone)"
    )
    assert mse_with_k < 0.85 * mse_without_k  # measured: 25% lower (1.63 -> 1.23), k = 8
    # The choice is the store's configuration: it is saved and loaded with it.
    with_k.save(tmp_path / "store")
    loaded = SoftDict.load(tmp_path / "store", encoder=FakeEncoder())
    assert (loaded.top_k, loaded.temperature) == (with_k.top_k, with_k.temperature)


def test_choose_k_false_keeps_the_k_in_force_and_true_drops_a_k_that_does_not_help() -> None:
    X, y, _ = many_small_clusters(2000, seed=2)
    fixed = SoftDict(encoder=FakeEncoder(), lexical=0, top_k=32)
    fixed.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
    fixed.calibrate(choose_k=False)
    assert fixed.top_k == 32
    X, y, _ = noisy_clusters(600, seed=0)
    dropped = SoftDict(encoder=FakeEncoder(), lexical=0, top_k=2)
    dropped.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
    dropped.calibrate()
    assert dropped.top_k is None


@pytest.mark.parametrize("index", ["hnsw", "ivf"])
def test_calibration_on_approximate_indexes_agrees_with_exact(index: str) -> None:
    """Where the store attends to its top candidates, calibrate ranks them with the index."""
    X, y, _ = many_small_clusters(2000, seed=3)
    chosen = {}
    for name in ("flat", index):
        sd = SoftDict(encoder=FakeEncoder(), lexical=0, index=name)
        sd.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
        chosen[name] = (sd.calibrate(), sd.top_k)
    assert chosen[index][1] == chosen["flat"][1]
    assert chosen[index][0] == pytest.approx(chosen["flat"][0], rel=0.3)  # within 2 grid steps


@pytest.mark.parametrize("index", ["auto", "hnsw"])
def test_deleted_keys_play_no_part_in_calibration(index: str) -> None:
    X, y, _ = many_small_clusters(1500, seed=4)
    keys = [f"k{i}" for i in range(len(X))]
    # Both start from a poor temperature, so each has one to find (and both the same one).
    churned = SoftDict(encoder=FakeEncoder(), lexical=0, index=index, temperature=0.3)
    churned.add_embeddings(keys, X, y)
    # Deleted keys keep their rows (tombstones) until compaction; give them wild values first.
    churned.add_embeddings(keys[::3], X[::3], np.full(500, 1e6))
    for key in keys[::3]:
        del churned[key]
    fresh = SoftDict(encoder=FakeEncoder(), lexical=0, index=index, temperature=0.3)
    kept = [i for i in range(len(X)) if i % 3]
    fresh.add_embeddings([keys[i] for i in kept], X[kept], y[kept])
    chosen = (churned.calibrate(), churned.top_k)
    assert chosen == (fresh.calibrate(), fresh.top_k) and chosen[0] != 0.3


def test_scaled_dot_is_calibrated_on_the_same_scale_as_lookups() -> None:
    """scaled_dot divides query scores by sqrt(d); keys used as queries must be scaled too, or
    the chosen temperature comes out sqrt(d) times too large."""
    X, y, _ = noisy_clusters(600, seed=0)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)  # unit vectors: cosine = dot
    chosen = {}
    for similarity in ("cosine", "scaled_dot"):
        sd = SoftDict(encoder=FakeEncoder(), lexical=0, similarity=similarity)
        sd.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
        chosen[similarity] = sd.calibrate()
    assert chosen["scaled_dot"] == close(chosen["cosine"] / np.sqrt(DIM))


def test_each_value_dimension_counts_in_units_of_its_spread() -> None:
    """A vector value whose second number is in the thousands (or near float64's limits) is
    calibrated as if it were not."""
    X, y, _ = noisy_clusters(600, seed=0)
    noise = np.random.default_rng(7).standard_normal(600)  # unpredictable: wants a flat blend
    chosen = []
    # Past about 1e154 the squares of the values overflow float64: their spread came out
    # infinite, and such a store was calibrated to the grid's edge (vectors) or not at all.
    for factor in (1.0, 1000.0, 1e-300, 1e300):
        sd = SoftDict(encoder=FakeEncoder(), lexical=0)
        sd.add_embeddings([f"k{i}" for i in range(600)], X, np.c_[y, factor * noise])
        chosen.append(sd.calibrate())
    assert chosen[1:] == [chosen[0]] * 3
    scalar = []
    for factor in (1.0, 1e300):
        sd = SoftDict(encoder=FakeEncoder(), lexical=0)
        sd.add_embeddings([f"k{i}" for i in range(600)], X, factor * y)
        scalar.append(sd.calibrate())
    assert scalar[0] == scalar[1]
    # Nor does a constant added to every value (times in epoch milliseconds): in float32 the
    # values of 1.7e12 + a few thousand kept their differences only to ~10^5, and calibrate
    # chose the grid's edge.
    for offset in (1.7e12, -1e300):
        sd = SoftDict(encoder=FakeEncoder(), lexical=0)
        sd.add_embeddings([f"k{i}" for i in range(600)], X, np.c_[y + offset, y])
        assert sd.calibrate() == scalar[0]
    # A constant dimension past float32's range (its spread 0) overflowed float32 and filled the
    # losses with NaN, with warnings; it is predicted exactly anyway, so it changes nothing.
    sd = SoftDict(encoder=FakeEncoder(), lexical=0)
    sd.add_embeddings([f"k{i}" for i in range(600)], X, np.c_[y, np.full(600, 1e39)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert sd.calibrate() == scalar[0]  # as the first dimension alone


def naive_leave_one_out(
    vectors: np.ndarray, values: np.ndarray, temperature: float, k: int | None, labels: bool
) -> np.ndarray:
    """Each key's loss when the others predict it, written out key by key."""
    losses = []
    for i in range(len(vectors)):
        others = [j for j in range(len(vectors)) if j != i]
        scores = np.array([float(vectors[i] @ vectors[j]) for j in others])
        keep = np.argsort(-scores, kind="stable")[: k or len(others)]
        weights = np.exp((scores[keep] - scores[keep].max()) / temperature)
        weights /= weights.sum()
        neighbours = [others[j] for j in keep]
        if labels:
            own = sum(w for w, j in zip(weights, neighbours) if values[j] == values[i])
            losses.append(-np.log(max(own, 1e-12)))
        else:
            spread = values.std(axis=0)
            predicted = sum(w * values[j] for w, j in zip(weights, neighbours))
            losses.append(np.mean(((predicted - values[i]) / spread) ** 2))
    return np.array(losses)


@pytest.mark.parametrize("labels", [False, True])
def test_leave_one_out_losses_match_the_naive_formula(labels: bool) -> None:
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((40, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # Numbers far from 0 (an offset changes no squared error: the losses must not see it).
    numbers = rng.standard_normal((40, 3)) * [1, 10, 100] + [0, 1e9, -3e12]
    values = rng.integers(0, 3, 40) if labels else numbers
    ids = 3 * np.arange(40)  # ids need not be positions: every third one
    left_out = LeftOutScores.from_all_scores(vectors @ vectors.T, np.arange(40), ids, 16)

    def values_of(of_ids: np.ndarray) -> np.ndarray:
        return values[of_ids // 3]

    loss = LossKind.LABEL_LIKELIHOOD if labels else LossKind.SQUARED_ERROR
    value_side = ValueSide.build(values, values_of, loss)
    temperatures = np.array([0.02, 0.1, 0.5])
    every_key = all_keys_losses(left_out, value_side, temperatures)
    needed = np.ones((3, 3), dtype=bool)
    prefixes = prefix_losses(left_out, value_side, temperatures, [16, 1, 4], needed)
    for t, temperature in enumerate(temperatures):
        expected = naive_leave_one_out(vectors, values, temperature, None, labels)
        # Losses sum thousands of float32 scores, in another order than the naive loop.
        np.testing.assert_allclose(every_key[t], expected, rtol=1e-4, atol=1e-6)
        for p, k in enumerate([16, 1, 4]):
            expected = naive_leave_one_out(vectors, values, temperature, k, labels)
            np.testing.assert_allclose(prefixes[t, p], expected, rtol=1e-4, atol=1e-6)


def test_an_index_search_drops_each_key_itself_or_its_last_candidate() -> None:
    scores = np.array([[0.9, 0.8, 0.7], [0.9, 0.8, 0.7]])
    rows = np.array([[5, 3, 2], [4, 7, 6]])  # key 3's search found itself; key 9's did not
    left_out = LeftOutScores.from_search(scores, rows, np.array([3, 9]), attended=1024)
    assert left_out.top_ids.tolist() == [[5, 2], [4, 7]]
    assert left_out.top_scores.tolist() == [[0.9, 0.7], [0.9, 0.8]]
    assert left_out.attended == 2


@pytest.mark.parametrize(
    "values",
    [["same"] * 5, [3.0] * 5, ["a", "b", "c", "d", "e"]],
    ids=["one label", "constant number", "every label different"],
)
def test_a_store_that_no_temperature_predicts_better_keeps_the_default(values: list) -> None:
    keys = ["apple", "red apple", "pear", "green pear", "chair"]
    sd = SoftDict(dict(zip(keys, values)), encoder=FakeEncoder())
    default = sd.temperature
    with pytest.warns(CalibrationWarning, match="kept the temperature in force"):
        assert sd.calibrate() == default
    assert sd.top_k is None and sd.temperature == default


def test_a_store_too_small_to_tell_keeps_its_temperature_and_says_so() -> None:
    """Three keys cannot show that one temperature predicts better than another: calibrate keeps
    the one in force (set or default) instead of the edge of its grid, and warns."""
    for temperature in (None, 0.3):
        sd = SoftDict(
            {"red apple": 10, "green apple": 9, "old chair": 2},
            encoder=FakeEncoder(),
            temperature=temperature,
        )
        in_force = sd.temperature
        with pytest.warns(CalibrationWarning, match="3 stored values"):
            assert sd.calibrate() == in_force
        assert sd.temperature == in_force and sd.top_k is None


def test_a_warning_raised_as_an_error_leaves_the_store_as_it_was() -> None:
    """Where warnings are errors (python -W error, pytest's filterwarnings=error) calibrate
    raises its CalibrationWarning, and it had written top_k first (in a Milvus store, for every
    process that opens it later: a probe)."""
    sd = SoftDict(
        {"red apple": 10, "green apple": 9, "old chair": 2}, encoder=FakeEncoder(), top_k=2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CalibrationWarning, match="3 stored values"):
            sd.calibrate()
    assert sd.top_k == 2
    with pytest.warns(CalibrationWarning):
        sd.calibrate()
    assert sd.top_k is None  # as a warning only, the call chooses


def test_calibrate_chooses_how_much_spelling_weighs_between_real_words() -> None:
    """Under the hand-set rule, values that follow spelling (a word's English frequency rank,
    shared by its inflections, "run"/"runs"/"running") make calibrate raise lexical_known from
    its default, where the fake encoder's meaning knows nothing of them; lexical itself is left
    alone. Values unrelated to spelling keep the default. The learned combination has nothing
    the values can judge but the temperature: lexical_known stays."""
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", 3000) if w.isalpha() and len(w) >= 4][:400]
    stems = {w: w[:4] for w in words}
    value_of_stem = {stem: float(i) for i, stem in enumerate(dict.fromkeys(stems.values()))}
    items = {w: value_of_stem[stems[w]] for w in words}
    follows = SoftDict(items, encoder=FakeEncoder(), combination="rule-1")
    follows.calibrate(choose_k=False)
    assert follows.lexical_known > 1 / 16 and follows.lexical == 1.0
    rng = np.random.default_rng(0)
    unrelated = SoftDict(
        {w: float(rng.normal()) for w in words}, encoder=FakeEncoder(), combination="rule-1"
    )
    unrelated.calibrate(choose_k=False)
    assert unrelated.lexical_known == 1 / 16
    learned = SoftDict(items, encoder=FakeEncoder(), combination="learned-1")
    learned.calibrate(choose_k=False)
    assert (learned.lexical_known, learned.lexical) == (1 / 16, 1.0)
